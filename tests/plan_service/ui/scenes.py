"""Real states for the dashboard to show: ingestions over real HTTP from the simulator, a
failed run, and chunks dead-lettered by a real database error (a trigger that makes counting
a chunk on its run fail, as a constraint or a full disk would)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    GiveUp,
    Job,
    JobRecord,
    RetryIn,
    Worker,
    WorkerConfig,
    discard_job,
    enqueue,
    get_job,
)
from pgenough_plans.ingest import inspect
from pgenough_plans.ingest.fetch import FetchConfig, RunResult
from pgenough_plans.sim.server import SimServer
from tests.plan_service.ingest.pipeline import break_chunks, fetch, heal_chunks, ingest, process


@dataclass(frozen=True)
class Scene:
    ok: RunResult
    """Ingested and processed (with some malformed records skipped)."""
    failed: RunResult
    """Failed: the provider answered 404."""
    stuck: RunResult
    """Staged, its chunks dead-lettered."""
    dead: list[JobRecord]


DEAD_CHUNKS = FetchConfig(chunk_pages=4)


async def dead_chunks(pool: AsyncConnectionPool, sim: SimServer, name: str) -> RunResult:
    """A staged run of ``name`` whose chunk jobs are all dead ('disk full (test)')."""
    await break_chunks(pool)
    try:
        # Small chunks, so the run has several (the tests retry one, then the rest in bulk)
        # whatever the server's page layout: 600 plans in 16-page chunks made 2 on one
        # PostgreSQL and 3 on another.
        staged = await fetch(pool, f"{sim.url}?version=1", name=name, config=DEAD_CHUNKS)
        async with pool.connection() as conn:
            # One attempt each, so the failing chunks are dead-lettered at once.
            await conn.execute("UPDATE pgenough.jobs SET max_attempts = 1 WHERE state = 'ready'")
        await process(pool)
    finally:
        await heal_chunks(pool)
    return staged


async def build(pool: AsyncConnectionPool, sim: SimServer) -> Scene:
    ok = await ingest(pool, f"{sim.url}?version=1&fault=malformed:0.02", name="alpha")
    failed = await fetch(pool, f"{sim.url}?fault=404", name="beta")
    stuck = await dead_chunks(pool, sim, "gamma")
    async with pool.connection() as conn:
        dead = await inspect.failed_jobs(conn)
    assert dead and all(j.state == "dead" for j in dead)
    return Scene(ok, failed, stuck, dead)


@dataclass(frozen=True)
class Jobs:
    """One job in each state: ``ops`` has a ready, a scheduled, a dead and a cancelled one,
    ``slow`` the running one, held by ``worker``."""

    ready: int
    scheduled: int
    dead: int
    """Failed twice for real: a retry, then a give-up."""
    cancelled: int
    running: int
    worker: str

    @property
    def everything(self) -> list[int]:
        """Newest first, as the jobs pages list them."""
        return sorted(
            [self.ready, self.scheduled, self.dead, self.cancelled, self.running], reverse=True
        )


DEAD_PAYLOAD = {"order": 7, "note": "naïve <b>bold</b>"}


async def _flaky(job: Job) -> None:
    if job.attempts == 1:
        raise RetryIn(0, "upstream timed out")
    raise GiveUp("upstream said no")


@asynccontextmanager
async def jobs(pool: AsyncConnectionPool) -> AsyncIterator[Jobs]:
    """``Jobs``, the running one held by a real worker until the block ends."""
    quick = WorkerConfig(queue="ops", batch_size=1, maintenance=None)
    async with pool.connection() as conn:
        dead = await enqueue(conn, "flaky", DEAD_PAYLOAD, queue="ops", max_attempts=5)
    # Drained until the job is dead: its retry is due at once, and a drain that ends just
    # before the retry is claimable is allowed to (the next one takes it).
    for _ in range(5):
        await Worker(pool, {"flaky": _flaky}, quick, name="flaky-worker").run(until_idle=True)
        async with pool.connection() as conn:
            record = await get_job(conn, dead) if dead else None
        if record is None or record.state == "dead":
            break
    assert record is not None and record.state == "dead", record
    async with pool.connection() as conn:
        ready = await enqueue(conn, "noop", {"n": 1}, queue="ops")
        scheduled = await enqueue(conn, "noop", {"n": 2}, queue="ops", run_at=timedelta(minutes=5))
        cancelled = await enqueue(conn, "noop", {"n": 3}, queue="ops")
        assert cancelled is not None
        await discard_job(conn, cancelled)
        running = await enqueue(conn, "hold", {"n": 4}, queue="slow")
    assert dead and ready and scheduled and running

    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Job) -> None:
        started.set()
        await release.wait()

    slow = WorkerConfig(queue="slow", maintenance=None)
    worker = Worker(pool, {"hold": hold}, slow, name="holder-1")
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            await started.wait()
        yield Jobs(ready, scheduled, dead, cancelled, running, worker.name)
    finally:
        release.set()
        worker.stop()
        async with asyncio.timeout(10):
            await task
