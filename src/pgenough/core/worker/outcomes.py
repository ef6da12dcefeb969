"""What a worker did and says: its counts (``WorkerStats``) and the line each finished job
gets on ``JOBS_LOGGER``."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from pgenough.core.failures import task_frames
from pgenough.core.queue import Job

log = logging.getLogger("pgenough.core.worker")
"""The worker's own logger (claims, heartbeats, shutdown), shared by every module of the
worker under the name it always had."""
JOBS_LOGGER: Final = "pgenough.jobs"
"""The logger of the line each finished job gets (``job_line``): INFO for a job
done (or handed back, or retried as its task asked), WARNING for a failed attempt to retry or
a lost claim, ERROR for a job dead-lettered; a failure's line carries its traceback. Set it
to WARNING to keep only the failures (``PGENOUGH_LOG_JOBS=0``, ``worker run --quiet``)."""
jobs_log = logging.getLogger(JOBS_LOGGER)
INTERRUPTED: Final = "interrupted: the worker shut down before the handler finished"
"""The error recorded with a job whose handler the shutdown interrupted (its claim handed
back)."""


@dataclass
class WorkerStats:
    """What a worker did, counted per job or attempt (``Worker.stats`` sums its queues)."""

    claimed: int = 0
    completed: int = 0
    """Jobs whose handler returned (a batch's, once its transaction committed)."""
    failed: int = 0
    """Attempts that raised and were recorded as failed (retried, dead-lettered, or found
    lost when recorded), a task that failed under its own handler's record included
    (``TaskFailed``: a Django task's FAILED result)."""
    lost: int = 0
    """Claims lost before the job could be completed or its failure recorded: reclaimed
    after the lease expired, or cancelled by an operator."""
    retried: int = 0
    """Failed attempts whose job is to run again (after its backoff, or as ``RetryIn``
    asked)."""
    dead: int = 0
    """Jobs this worker dead-lettered: attempts spent, ``GiveUp``, ``TaskFailed``, or a kind
    no task handles past the grace."""
    handed_back: int = 0
    """Jobs of a kind no task of this worker handles, handed back for another worker (no
    attempt counted)."""

    def summary(self) -> str:
        """These counts in words: the worker commands' final line."""
        return (
            f"{self.completed} job(s) completed, {self.failed} failed attempt(s)"
            f" ({self.retried} to retry), {self.dead} dead-lettered, {self.lost} lost"
            f" claim(s), {self.handed_back} handed back (no task here for their kind)"
        )


def job_line(
    name: str,
    level: int,
    job: Job,
    outcome: str,
    started: float,
    *,
    error: str | None = None,
    exc: BaseException | None = None,
    note: str | None = None,
) -> None:
    """The line of a finished job, on ``JOBS_LOGGER``: ``<worker>: job <id> <outcome>
    (<task>, <seconds>s, attempt <n> of <max>): <error>``, with the traceback of a
    failure (once per failed attempt). A done job's line is written inline where it ends
    (the hot path)."""
    if not jobs_log.isEnabledFor(level):
        return
    jobs_log.log(
        level,
        "%s: job %d %s (%s, %.3fs, attempt %d of %d)%s",
        name,
        job.id,
        outcome,
        job.kind,
        time.perf_counter() - started,
        job.attempts,
        job.max_attempts,
        f": {error}" if error else f": {note}" if note else "",
        exc_info=None if exc is None else (type(exc), exc, task_frames(exc)),
    )


def job_ids(jobs: Sequence[Job]) -> str:
    """``job 7``, or ``jobs 12, 13, 21``: every id of a batch (at most ``batch_size``), so
    that a search for one job's id finds its batch's line."""
    if len(jobs) == 1:
        return f"job {jobs[0].id}"
    return "jobs " + ", ".join(str(job.id) for job in jobs)
