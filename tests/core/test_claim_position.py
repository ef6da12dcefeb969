"""The claim starts past the last claimed position (so it does not re-walk the dead index
entries a held xmin horizon keeps); a job that lands behind that position is still claimed
promptly: a higher or lower priority, an explicit earlier run_at, a retry whose backoff
expired, a rescued claim, a row that was skipped because it was locked."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Job, RetryIn, Worker, WorkerConfig, enqueue
from pgenough.core.maintenance import requeue_stuck
from pgenough.core.worker._executor import RESCAN_INTERVAL

pytestmark = pytest.mark.db

PROMPT = 10 * RESCAN_INTERVAL + 5.0
"""Generous: a job behind the position waits for one scan from the start (RESCAN_INTERVAL)."""


class Seen:
    """What the handlers ran, in order, with the attempt."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []
        self.changed = asyncio.Event()

    def add(self, job: Job) -> None:
        self.runs.append((str(job.payload), job.attempts))
        self.changed.set()

    async def until(self, predicate: Callable[[], bool], timeout: float = PROMPT) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"not seen in {timeout:.0f} s; ran {self.runs[-20:]}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.2))

    def ran(self, name: str, attempt: int = 1) -> bool:
        return (name, attempt) in self.runs


@contextlib.asynccontextmanager
async def running(
    db: AsyncConnectionPool, handler: Callable[[Job], object], **config: object
) -> AsyncIterator[Worker]:
    async def run(job: Job) -> None:
        result = handler(job)
        if asyncio.iscoroutine(result):
            await result

    options: dict[str, object] = {"maintenance": None, "poll_interval": 600.0}
    options.update(config)
    worker = Worker(db, {"t": run}, WorkerConfig(**options))  # type: ignore[arg-type]
    task = asyncio.create_task(worker.run())
    try:
        await worker.wait_listening()
        yield worker
    finally:
        worker.stop()
        await task


async def put(db: AsyncConnectionPool, name: str, **options: object) -> int:
    async with db.connection() as conn:
        job_id = await enqueue(conn, "t", name, **options)  # type: ignore[arg-type]
    assert job_id is not None
    return job_id


async def advance(db: AsyncConnectionPool, seen: Seen, prefix: str, n: int = 5) -> None:
    """Enqueue and see run ``n`` ordinary jobs: the worker's position is now past them."""
    for i in range(n):
        await put(db, f"{prefix}{i}")
    await seen.until(lambda: all(seen.ran(f"{prefix}{i}") for i in range(n)))


async def test_higher_and_lower_priority_than_the_position(db: AsyncConnectionPool) -> None:
    seen = Seen()
    async with running(db, seen.add):
        await advance(db, seen, "p0-")
        await put(db, "high", priority=10)  # ahead of every priority-0 entry in the index
        await seen.until(lambda: seen.ran("high"))
        await put(db, "low", priority=-5)  # the position is now in priority 10
        await seen.until(lambda: seen.ran("low"))
        await put(db, "p0-again")
        await seen.until(lambda: seen.ran("p0-again"))


async def test_higher_priority_during_a_sustained_backlog(db: AsyncConnectionPool) -> None:
    """With every claim full past the position, the scan from the start still comes."""
    seen = Seen()

    async def slow(job: Job) -> None:
        seen.add(job)
        await asyncio.sleep(0.01)

    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO pgenough.jobs (kind, payload)"
            " SELECT 't', to_jsonb('b' || n) FROM generate_series(1, 3000) n"
        )
    async with running(db, slow, concurrency=1, batch_size=1):
        await seen.until(lambda: len(seen.runs) >= 20)
        await put(db, "urgent", priority=10)
        await seen.until(lambda: seen.ran("urgent"))
        backlog_runs = sum(1 for name, _ in seen.runs if name.startswith("b"))
    assert backlog_runs < 3000  # it ran while the backlog was still there


async def test_explicit_earlier_run_at(db: AsyncConnectionPool) -> None:
    seen = Seen()
    async with running(db, seen.add):
        await advance(db, seen, "now-")
        async with db.connection() as conn:
            cur = await conn.execute("SELECT now() - interval '1 hour'")
            row = await cur.fetchone()
        assert row is not None
        await put(db, "an-hour-ago", run_at=row[0])
        await seen.until(lambda: seen.ran("an-hour-ago"))


async def test_retry_whose_backoff_expired_behind_newer_jobs(db: AsyncConnectionPool) -> None:
    seen = Seen()

    def handler(job: Job) -> None:
        seen.add(job)
        if job.payload == "flaky" and job.attempts == 1:
            raise RetryIn(0.3)

    async with running(db, handler):
        await put(db, "flaky")
        await seen.until(lambda: seen.ran("flaky"))
        # Newer jobs, claimed after the retry's run_at: the position passes it.
        await asyncio.sleep(0.5)
        await advance(db, seen, "newer-")
        await seen.until(lambda: seen.ran("flaky", attempt=2))


async def test_rescued_claim_behind_the_position(db: AsyncConnectionPool) -> None:
    ghost = await put(db, "ghost")
    async with db.connection() as conn:
        # A claim of a worker that died: the rescuer takes it back.
        await conn.execute(
            "UPDATE pgenough.jobs SET state = 'running', attempts = 1, worker = 'gone',"
            " claimed_at = now(), lease_until = now() - interval '1 minute' WHERE id = %s",
            (ghost,),
        )
    seen = Seen()
    async with running(db, seen.add), db.connection() as rescuer:
        # The rescue's run_at is its transaction's now(): before the jobs claimed meanwhile.
        async with rescuer.transaction():
            await rescuer.execute("SELECT now()")
            await advance(db, seen, "meanwhile-")
            result = await requeue_stuck(rescuer)
        assert result.retried == 1
        await seen.until(lambda: seen.ran("ghost", attempt=2))


@contextlib.asynccontextmanager
async def locked_ready_job(db: AsyncConnectionPool) -> AsyncIterator[str]:
    """A committed ready job, row-locked by another transaction until the block ends; yields
    its payload. Inserted without a notification, but the idle worker may still claim it
    between the insert's commit and the lock (a follow-up claim, the scan from the start):
    a row found claimed by then is given up and another one tried."""
    async with db.connection() as holder:
        for attempt in range(50):
            name = f"locked-{attempt}"
            async with holder.transaction():
                cur = await holder.execute(
                    "INSERT INTO pgenough.jobs (kind, payload) VALUES ('t', to_jsonb(%s::text))"
                    " RETURNING id",
                    (name,),
                )
                row = await cur.fetchone()
                assert row is not None
            async with holder.transaction():
                cur = await holder.execute(
                    "SELECT state::text FROM pgenough.jobs WHERE id = %s FOR UPDATE", row
                )
                state = await cur.fetchone()
                if state is not None and state[0] == "ready":
                    yield name
                    return
        raise AssertionError("the worker claimed every row before it could be locked")


async def test_row_skipped_while_locked(db: AsyncConnectionPool) -> None:
    seen = Seen()
    async with running(db, seen.add):
        await advance(db, seen, "before-")
        async with locked_ready_job(db) as locked:
            await advance(db, seen, "after-")  # claimed past the locked row
            assert not seen.ran(locked)
        # Released. The next wake-up claims past the position, then from the start.
        await put(db, "wake")
        await seen.until(lambda: seen.ran(locked))


async def test_until_idle_runs_a_job_behind_the_position(db: AsyncConnectionPool) -> None:
    """``until_idle`` scans from the start before it decides there is nothing left."""
    seen = Seen()
    order: list[str] = []

    async def handler(job: Job) -> None:
        seen.add(job)
        order.append(str(job.payload))
        if job.payload == "first":
            async with db.connection() as conn:
                cur = await conn.execute("SELECT now() - interval '1 day'")
                row = await cur.fetchone()
                assert row is not None
                await enqueue(conn, "t", "behind", run_at=row[0])
                await enqueue(conn, "t", "ahead", run_at=timedelta(0))

    await put(db, "first")
    await Worker(db, {"t": handler}, WorkerConfig(maintenance=None)).run(until_idle=True)
    assert sorted(order) == ["ahead", "behind", "first"]
