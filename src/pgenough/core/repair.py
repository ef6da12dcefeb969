"""The operator's repairs, each in one transaction, returning what changed: what
``pgenough retry``, ``discard`` and ``requeue-stuck`` and the dashboard's buttons run."""

from __future__ import annotations

from pgenough.core.maintenance import RescueResult, rescue_expired
from pgenough.core.queue import (
    AnyConn,
    JobRecord,
    cancel_job,
    get_job,
    retry_dead,
    retry_job,
)


async def retry(conn: AnyConn, job_id: int) -> JobRecord:
    """Make a dead, cancelled or waiting job runnable now (``core.retry_job``)."""
    async with conn.transaction():
        await retry_job(conn, job_id)
        return await _job(conn, job_id)


async def retry_all_dead(conn: AnyConn, queue: str | None = None) -> int:
    """Every dead job (of ``queue``) runnable now (``core.retry_dead``); how many."""
    async with conn.transaction():
        return await retry_dead(conn, queue)


async def discard(conn: AnyConn, job_id: int) -> JobRecord:
    """Cancel a job that has not finished (``core.cancel_job``); it stays visible as
    ``cancelled`` until the cleaner removes it, and can still be retried until then."""
    async with conn.transaction():
        await cancel_job(conn, job_id)
        return await _job(conn, job_id)


async def requeue_stuck(conn: AnyConn) -> RescueResult:
    """Take back now every claim whose lease expired, as the rescuer would on its next
    round (``core.rescue_expired``): retried, or dead when its attempts are spent."""
    return await rescue_expired(conn)


async def _job(conn: AnyConn, job_id: int) -> JobRecord:
    job = await get_job(conn, job_id)
    assert job is not None  # just changed in this transaction
    return job
