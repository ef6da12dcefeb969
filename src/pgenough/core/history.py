"""The queue over time, per queue and minute: throughput (jobs completed, attempts failed,
jobs dead-lettered) and backlog (ready, scheduled and running jobs, the oldest ready one's
age). What the dashboard draws and ``pgenough status`` sums up.

Completed jobs are deleted, so their count is kept as it happens: each worker adds what its
executors finished to ``pgenough.job_counts`` every few seconds, in one statement, from the
counts it keeps anyway (``WorkerStats``) - nothing on a job's own path. The backlog is
sampled once a minute across all workers by a periodic duty (``sample_queues``) into
``pgenough.queue_samples``. The cleaner deletes both past ``history_retention``.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Final

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core._sql import PLAN_EACH_TIME, load
from pgenough.core.errors import first_line
from pgenough.core.service import Service
from pgenough.core.statements import Query, Steps, dual

log = logging.getLogger(__name__)
_Q = load("history")

FLUSH_INTERVAL: Final = 5.0
"""Seconds between a worker's additions to ``pgenough.job_counts``."""
SAMPLE_INTERVAL: Final = 60.0
"""Seconds between two samples of the backlog (once across all workers)."""
DEFAULT_HISTORY_RETENTION: Final = 7 * 24 * 3600.0
"""Seconds the counts and samples are kept."""
DEFAULT_HISTORY_WINDOW: Final = 3600.0
"""The window ``queue_history`` reads by default: the last hour."""
MAX_TREND_BUCKETS: Final = 10_080
"""The most buckets ``queue_trend`` gives (a week of minutes): a chart's points are few."""


@dataclass(frozen=True)
class QueuePoint:
    """One queue in one minute."""

    at: datetime
    """The minute's start."""
    queue: str
    completed: int
    failed: int
    """Failed attempts (retried or dead-lettered)."""
    dead: int
    ready: int | None
    """The backlog as sampled in that minute (``queue_trend``: the largest sampled in the
    bucket); None when no sample was taken in it."""
    scheduled: int | None
    running: int | None
    oldest_ready_age: float | None


@dual
def queue_history(
    *, window: float = DEFAULT_HISTORY_WINDOW, queue: str | None = None
) -> Steps[list[QueuePoint]]:
    """Every minute of the last ``window`` seconds that has counts or a sample, per queue (of
    ``queue`` only, when given), oldest first."""
    result = yield Query(
        _Q["queue_history"],
        {"window": window, "queue": queue},
        record=QueuePoint,
        prepare=PLAN_EACH_TIME,
    )
    points: list[QueuePoint] = result.rows
    return points


@dual
def queue_trend(
    *, window: float = DEFAULT_HISTORY_WINDOW, step: float = 60.0, queue: str | None = None
) -> Steps[list[QueuePoint]]:
    """One series over the last ``window`` seconds in ``step``-second buckets (aligned on the
    epoch, oldest first, the current one last, each present even when empty): of ``queue``,
    or of every queue added together when None (``QueuePoint.queue`` is then ``""``). Each
    has the jobs completed, attempts failed and jobs dead-lettered in it, and the largest
    backlog sampled in it: a minute's depths of the queues added together, the oldest ready
    age the largest of any; None where no sample was taken. What a chart draws: a week in
    two-hour buckets is 84 points, whatever the number of queues."""
    if step <= 0 or window < step:
        raise ValueError(f"step must be positive and at most the window ({window:g} s): {step:g}")
    buckets = math.ceil(window / step)
    if buckets > MAX_TREND_BUCKETS:
        raise ValueError(f"{buckets} buckets of {step:g} s: at most {MAX_TREND_BUCKETS}")
    result = yield Query(
        _Q["queue_trend"],
        {"buckets": buckets, "step": step, "queue": queue},
        record=QueuePoint,
        prepare=PLAN_EACH_TIME,
    )
    points: list[QueuePoint] = result.rows
    return points


@dual
def sample_queues() -> Steps[int]:
    """Record every queue's depths at this minute (the sampling duty); how many queues."""
    result = yield Query(_Q["sample_queues"], prepare=PLAN_EACH_TIME)
    return int(result.rowcount)


@dual
def delete_old_history(retention: float, limit: int) -> Steps[int]:
    """Delete counts and samples older than ``retention`` seconds, ``limit`` rows a
    statement; how many."""
    deleted = 0
    for name in ("delete_old_counts", "delete_old_samples"):
        while True:
            result = yield Query(
                _Q[name], {"retention": retention, "limit": limit}, prepare=PLAN_EACH_TIME
            )
            deleted += result.rowcount
            if result.rowcount < limit:
                break
    return deleted


@dataclass
class _Counts:
    completed: int = 0
    failed: int = 0
    dead: int = 0


class CountsFlusher(Service):
    """Adds what a worker's executors finished to ``pgenough.job_counts``, every
    ``interval`` seconds and once more when it stops. ``counts()`` gives the executors'
    running totals per queue (``WorkerStats``); only what changed since the last flush that
    reached the database is sent, so a flush that fails is carried into the next."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        name: str,
        counts: Callable[[], Mapping[str, object]],
        *,
        interval: float = FLUSH_INTERVAL,
    ) -> None:
        self._pool = pool
        self._counts = counts
        self._interval = interval
        self._sent: dict[str, _Counts] = {}
        self.service_name = f"{name}:counts"
        self._name = name
        self._failing = False

    def _deltas(self) -> dict[str, _Counts]:
        deltas: dict[str, _Counts] = {}
        for queue, stats in self._counts().items():
            sent = self._sent.get(queue, _Counts())
            delta = _Counts(
                *(getattr(stats, f.name) - getattr(sent, f.name) for f in fields(_Counts))
            )
            if delta.completed or delta.failed or delta.dead:
                deltas[queue] = delta
        return deltas

    async def flush(self) -> None:
        """Send what changed since the last flush; on a database error, keep it for the next."""
        deltas = self._deltas()
        if not deltas:
            return
        queues = sorted(deltas)
        params = {
            "queues": queues,
            **{f.name: [getattr(deltas[q], f.name) for q in queues] for f in fields(_Counts)},
        }
        try:
            async with self._pool.connection() as conn:
                await conn.execute(_Q["add_counts"], params)
        except psycopg.Error as exc:  # only history: a warning once per outage, carry on
            if not self._failing:
                log.warning(
                    "%s: could not add to pgenough.job_counts (%s)", self._name, first_line(exc)
                )
            self._failing = True
            return
        self._failing = False
        for queue, delta in deltas.items():
            sent = self._sent.setdefault(queue, _Counts())
            for f in fields(_Counts):
                setattr(sent, f.name, getattr(sent, f.name) + getattr(delta, f.name))

    async def serve(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.flush()

    async def wait_stopped(self) -> None:
        await super().wait_stopped()
        await self.flush()
