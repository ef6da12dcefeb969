"""Fleet-wide limits (``limits.py``): at most N jobs of a queue run at once across every
worker, counted by the claim itself, and at most M start in any T seconds; set and lifted
while workers run; visible in the stats. The proof under contention, with worker processes
killed, is ``test_limits_fleet.py``."""

from __future__ import annotations

import asyncio
import time

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


def most_in_a_window(starts: list[float], window: float) -> int:
    """The most of ``starts`` (seconds, any clock) within any ``window`` seconds."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


async def test_a_rate_holds_jobs_back_and_the_worker_looks_again_when_it_allows(
    db: AsyncConnectionPool,
) -> None:
    """3 starts in any 2 s, 7 jobs, a worker of concurrency 10 whose poll is 10 minutes
    away: the rate's claim says when the next start is allowed and the worker claims then,
    so the 7 start in three bursts two seconds apart, each within the deadline. The starts
    are the handlers' (a little after their claims): any window of the interval less a
    margin for that holds at most 3."""
    starts: list[float] = []
    all_started = asyncio.Event()

    async def tick(job: Job) -> None:
        starts.append(time.monotonic())
        if len(starts) == 7:
            all_started.set()

    async with db.connection() as conn:
        await set_queue_limit(conn, QUEUE, starts=3, per=2.0)
        for n in range(7):
            await enqueue(conn, "tick", {"n": n}, queue=QUEUE)
        stats = {s.queue: s for s in await queue_stats(conn)}
        assert (stats[QUEUE].rate_count, stats[QUEUE].rate_interval) == (3, 2.0)
    config = WorkerConfig(queue=QUEUE, concurrency=10, maintenance=None, poll_interval=600)
    worker = Worker(db, {"tick": tick}, config)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(all_started.wait(), DEADLINE)
    finally:
        worker.stop()
        await asyncio.wait_for(run, DEADLINE)
    assert most_in_a_window(starts, 2.0 - 0.5) <= 3, starts
    assert starts[-1] - starts[0] >= 2 * 2.0 - 0.5  # three bursts: the rate held them
    async with db.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM pgenough.jobs WHERE state = 'ready'")
        assert await cur.fetchone() == (0,)  # none failed nor retried: each ran once
    assert (worker.stats.completed, worker.stats.failed) == (7, 0)


async def test_rates_are_checked(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        for kwargs, said in (
            ({}, "give a limit"),
            ({"starts": 5}, "starts per seconds: give both"),
            ({"starts": 0, "per": 1.0}, "starts must be 1 to 100000"),
            ({"starts": 5, "per": 0.0}, "seconds must be more than 0"),
        ):
            with pytest.raises(ValueError, match=said):
                await set_queue_limit(conn, QUEUE, **kwargs)  # type: ignore[arg-type]
        await set_queue_limit(conn, QUEUE, 2, starts=10, per=1.0)
        (limit,) = await queue_limits(conn)
        assert (limit.max_running, limit.rate_count, limit.rate_interval) == (2, 10, 1.0)
