"""The operator's repairs (``pgenough.core.repair``, behind ``pgenough retry``, ``discard``
and ``requeue-stuck`` and the dashboard's buttons) and the queue's counts, on real
PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue, get_job, repair
from pgenough.core.admin import discard_job, queue_stats

pytestmark = pytest.mark.db


async def doomed_and_stuck(conn: psycopg.AsyncConnection[object]) -> tuple[int, int]:
    """Two jobs of queue ``ops``: one waiting (to discard), and one whose claim's lease ran
    out, as a worker killed mid-job leaves it."""
    doomed = await enqueue(conn, "noop", queue="ops")
    stuck = await enqueue(conn, "noop", queue="ops")
    assert doomed is not None and stuck is not None
    await conn.execute(
        "UPDATE pgenough.jobs SET state = 'running', attempts = 1, worker = 'gone',"
        " claimed_at = now() - interval '2 min', lease_until = now() - interval '1 min'"
        " WHERE id = %s",
        (stuck,),
    )
    return doomed, stuck


async def test_discard_cancels_and_requeue_stuck_takes_back_expired_leases(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        doomed, stuck = await doomed_and_stuck(conn)
        discarded = await repair.discard(conn, doomed)
        result = await repair.requeue_stuck(conn)
        rescued = await get_job(conn, stuck)
    assert discarded.state == "cancelled"
    assert (result.retried, result.dead) == (1, 0)
    assert rescued is not None and rescued.state == "ready" and rescued.worker is None


async def test_job_counts_per_queue_and_state(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        assert await queue_stats(conn) == []
        for _ in range(2):
            await enqueue(conn, "noop", queue="ops")
        await enqueue(conn, "noop", queue="ops", run_at=timedelta(hours=1))
        doomed = await enqueue(conn, "noop", queue="ops")
        assert doomed is not None
        await discard_job(conn, doomed)
        dead = await enqueue(conn, "noop", queue="mail")
        await conn.execute(
            "UPDATE pgenough.jobs SET state = 'dead', finished_at = now() WHERE id = %s", (dead,)
        )
        counts = await queue_stats(conn)
    by_state = [(c.queue, c.ready, c.scheduled, c.running, c.dead, c.cancelled) for c in counts]
    assert by_state == [("mail", 0, 0, 0, 1, 0), ("ops", 2, 1, 0, 0, 1)]
