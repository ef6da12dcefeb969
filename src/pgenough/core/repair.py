"""The operator's repairs, each all-or-nothing, returning what changed: what ``pgenough
retry``, ``discard`` and ``requeue-stuck`` and the dashboard's buttons run. Like every
producer-side call they take a sync or an async connection (``statements.py``)."""

from __future__ import annotations

from pgenough.core import maintenance
from pgenough.core.maintenance import RescueResult
from pgenough.core.queue import (
    JobRecord,
    discard_job,
    get_job,
    retry_dead,
    retry_job,
)
from pgenough.core.statements import Atomic, Steps, dual


@dual
def retry(job_id: int) -> Steps[JobRecord]:
    """Make a dead, cancelled or waiting job runnable now (``core.retry_job``)."""
    job: JobRecord = yield Atomic(_then_get(retry_job.steps(job_id), job_id))
    return job


@dual
def retry_all_dead(queue: str | None = None) -> Steps[int]:
    """Every dead job (of ``queue``) runnable now (``core.retry_dead``); how many."""
    return (yield from retry_dead.steps(queue))


@dual
def discard(job_id: int) -> Steps[JobRecord]:
    """Cancel a job that has not finished (``core.discard_job``); it stays visible as
    ``cancelled`` until the cleaner removes it, and can still be retried until then."""
    job: JobRecord = yield Atomic(_then_get(discard_job.steps(job_id), job_id))
    return job


@dual
def requeue_stuck() -> Steps[RescueResult]:
    """Take back now every claim whose lease expired, as the rescuer would on its next
    round (``core.requeue_stuck``): retried, or dead when its attempts are spent."""
    return (yield from maintenance.requeue_stuck.steps())


def _then_get(change: Steps[None], job_id: int) -> Steps[JobRecord]:
    yield from change
    job = yield from get_job.steps(job_id)
    assert job is not None  # just changed in this transaction
    return job
