"""Fleet-wide concurrency limits (``limits.py``): at most N jobs of a queue run at once across
every worker, counted by the claim itself; set and lifted while workers run; visible in the
stats. The proof under contention, with worker processes killed, is
``test_limits_fleet.py``."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Job, Worker, WorkerConfig, enqueue
from pgenough.core.admin import queue_stats, refresh_queue_metrics
from pgenough.core.limits import clear_queue_limit, queue_limits, set_queue_limit
from tests.helpers.procs import wait_until

pytestmark = pytest.mark.db

QUEUE = "partner"
DEADLINE = 60.0


class Gauge:
    """Handlers that hold until released one by one, counting how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.done: list[int] = []
        self.permits: asyncio.Queue[None] = asyncio.Queue()
        self.changed = asyncio.Event()

    async def handler(self, job: Job) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.changed.set()
        try:
            await self.permits.get()
        finally:
            self.running -= 1
        self.done.append(job.id)
        self.changed.set()

    async def until(self, what: str, check: object) -> None:
        async def holds() -> bool:
            return bool(check())  # type: ignore[operator]

        await wait_until(holds, DEADLINE, what)


async def _running_rows(db: AsyncConnectionPool) -> int:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pgenough.jobs WHERE queue = %s AND state = 'running'", [QUEUE]
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_two_workers_run_no_more_than_the_limit_together(db: AsyncConnectionPool) -> None:
    """Without the limit the first claims would take all 12 jobs at once (two workers of
    concurrency 10, the jobs enqueued before they start): the peak would be 12."""
    async with db.connection() as conn:
        await set_queue_limit(conn, QUEUE, 3)
        for n in range(12):
            await enqueue(conn, "hold", {"n": n}, queue=QUEUE)
    gauge = Gauge()
    config = WorkerConfig(queue=QUEUE, concurrency=10, maintenance=None)
    workers = [Worker(db, {"hold": gauge.handler}, config) for _ in range(2)]
    runs = [asyncio.create_task(w.run()) for w in workers]
    try:
        for released in range(12):
            expected = min(3, 12 - released)
            await gauge.until("the limit's worth", lambda n=expected: gauge.running == n)
            assert await _running_rows(db) <= 3
            gauge.permits.put_nowait(None)
        await gauge.until("every job done", lambda: len(gauge.done) == 12)
        assert gauge.peak == 3
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*runs)
    assert sum(w.stats.completed for w in workers) == 12


async def test_a_limit_set_and_lifted_while_workers_run(db: AsyncConnectionPool) -> None:
    gauge = Gauge()
    config = WorkerConfig(queue=QUEUE, concurrency=10, maintenance=None, poll_interval=600)
    worker = Worker(db, {"hold": gauge.handler}, config)
    run = asyncio.create_task(worker.run())
    try:
        await worker.wait_listening()
        async with db.connection() as conn:
            await set_queue_limit(conn, QUEUE, 1)  # wakes the worker: it learns the limit
            for n in range(4):
                await enqueue(conn, "hold", {"n": n}, queue=QUEUE)
        await gauge.until("one running", lambda: gauge.running == 1)
        gauge.permits.put_nowait(None)
        await gauge.until(
            "the next one running", lambda: len(gauge.done) == 1 and gauge.running == 1
        )
        assert gauge.peak == 1
        async with db.connection() as conn:
            (limit,) = await queue_limits(conn)
            assert (limit.queue, limit.max_running) == (QUEUE, 1)
            stats = {s.queue: s for s in await queue_stats(conn)}
            assert stats[QUEUE].running == 1
            await refresh_queue_metrics(conn)
            assert REGISTRY.get_sample_value("pgenough_queue_limit", {"queue": QUEUE}) == 1
            assert await clear_queue_limit(conn, QUEUE) is True  # wakes it: all the rest run
        await gauge.until("the other two running too", lambda: gauge.running == 3)
        for _ in range(3):
            gauge.permits.put_nowait(None)
        await gauge.until("every job done", lambda: len(gauge.done) == 4)
        async with db.connection() as conn:
            assert await clear_queue_limit(conn, QUEUE) is False
            assert await queue_limits(conn) == []
    finally:
        worker.stop()
        await asyncio.wait_for(run, DEADLINE)


async def test_limits_are_checked_and_set_in_the_callers_transaction(
    db: AsyncConnectionPool, database_url: str
) -> None:
    with psycopg.connect(database_url) as conn:
        set_queue_limit(conn, QUEUE, 5)
        set_queue_limit(conn, QUEUE, 2)  # a change, not a second limit
        conn.rollback()
        assert queue_limits(conn) == []
        set_queue_limit(conn, QUEUE, 2)
        for bad in (0, 10_001):
            with pytest.raises(ValueError, match="the limit must be 1 to 10000"):
                set_queue_limit(conn, QUEUE, bad)
        with pytest.raises(ValueError, match="queue name"):
            set_queue_limit(conn, "", 1)
    async with db.connection() as conn:
        assert [(q.queue, q.max_running) for q in await queue_limits(conn)] == [(QUEUE, 2)]
