"""Enqueue, claim order, dedupe, delays, bulk COPY, transactional completion, operator ops."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    EnqueueOptions,
    Job,
    JobNotFound,
    LeaseLost,
    NewJob,
    Worker,
    WorkerConfig,
    complete,
    discard_job,
    enqueue,
    enqueue_many,
    get_job,
    list_jobs,
    queue_stats,
    retry_dead,
    retry_job,
)

pytestmark = pytest.mark.db


async def drain(pool: AsyncConnectionPool, **config: object) -> list[Job]:
    """Run a worker until idle, recording the jobs its handler saw in order."""
    seen: list[Job] = []

    async def record(job: Job) -> None:
        seen.append(job)

    cfg = WorkerConfig(maintenance=None, **config)  # type: ignore[arg-type]
    await Worker(pool, {"t": record}, cfg).run(until_idle=True)
    return seen


async def test_enqueue_commits_with_the_transaction(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        async with conn.transaction():
            job_id = await enqueue(conn, "t", {"n": 1})
        assert job_id is not None
        record = await get_job(conn, job_id)
    assert record is not None
    assert (record.state, record.kind, record.payload, record.attempts) == (
        "ready",
        "t",
        {"n": 1},
        0,
    )


async def test_rolled_back_enqueue_leaves_no_job(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        with pytest.raises(ZeroDivisionError):
            async with conn.transaction():
                await enqueue(conn, "t", {"n": 1})
                await enqueue_many(conn, [NewJob("t", i) for i in range(10)])
                raise ZeroDivisionError
        cur = await conn.execute("SELECT count(*) FROM pgenough.jobs")
        assert (await cur.fetchone()) == (0,)


async def test_priority_then_run_at_then_id_order(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        low = await enqueue(conn, "t", "low", priority=0)
        high = await enqueue(conn, "t", "high", priority=5)
        low2 = await enqueue(conn, "t", "low2", priority=0)
    seen = await drain(db, batch_size=1, concurrency=1)
    assert [j.id for j in seen] == [high, low, low2]


async def test_delayed_job_waits_for_its_time(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        later = await enqueue(conn, "t", "later", run_at=timedelta(hours=1))
        now = await enqueue(conn, "t", "now")
    seen = await drain(db)
    assert [j.id for j in seen] == [now]
    async with db.connection() as conn:
        record = await get_job(conn, later)  # type: ignore[arg-type]
        assert record is not None and record.state == "ready"
        [stats] = await queue_stats(conn)
    assert (stats.ready, stats.scheduled, stats.running) == (0, 1, 0)


async def test_dedupe_key_is_unique_among_live_jobs(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        first = await enqueue(conn, "t", 1, dedupe_key="order-7")
        again = await enqueue(conn, "t", 2, dedupe_key="order-7")
        other_queue = await enqueue(conn, "t", 3, dedupe_key="order-7", queue="other")
    assert first is not None and again is None and other_queue is not None
    await drain(db)
    async with db.connection() as conn:
        # Once the first job is done, the key is free again.
        assert await enqueue(conn, "t", 4, dedupe_key="order-7") is not None


async def test_bulk_enqueue_with_copy_and_dedupe(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        assert await enqueue_many(conn, [NewJob("t", i) for i in range(500)]) == 500
        await enqueue(conn, "t", "live", dedupe_key="k1")
        inserted = await enqueue_many(
            conn,
            [
                NewJob("t", "dup-of-live", dedupe_key="k1"),
                NewJob("t", "a", dedupe_key="k2"),
                NewJob("t", "dup-in-batch", dedupe_key="k2"),
                NewJob("t", "plain"),
                NewJob("t", "delayed", run_at=timedelta(minutes=5)),
            ],
        )
        assert inserted == 3
        cur = await conn.execute("SELECT payload FROM pgenough.jobs WHERE dedupe_key = 'k2'")
        assert await cur.fetchall() == [("a",)]
    seen = await drain(db, batch_size=100, concurrency=100)
    assert len(seen) == 500 + 1 + 2  # the delayed one is not due


async def test_complete_in_handler_transaction_is_exactly_once(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        job_id = await enqueue(conn, "t", None)

    async def handler(job: Job) -> None:
        async with db.connection() as conn, conn.transaction():
            await conn.execute("INSERT INTO effects (job_id) VALUES (%s)", (job.id,))
            await complete(conn, job)

    await Worker(db, {"t": handler}, WorkerConfig(maintenance=None)).run(until_idle=True)
    async with db.connection() as conn:
        assert await get_job(conn, job_id) is None  # type: ignore[arg-type]
        cur = await conn.execute("SELECT job_id FROM effects")
        assert await cur.fetchall() == [(job_id,)]


async def test_complete_after_cancel_raises_lease_lost_and_rolls_back(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        job_id = await enqueue(conn, "t", None)
    started = asyncio.Event()
    cancelled = asyncio.Event()
    outcome: list[BaseException] = []

    async def handler(job: Job) -> None:
        started.set()
        await cancelled.wait()
        try:
            async with db.connection() as conn, conn.transaction():
                await conn.execute("INSERT INTO effects (job_id) VALUES (%s)", (job.id,))
                await complete(conn, job)
        except LeaseLost as exc:
            outcome.append(exc)
            raise

    worker = Worker(db, {"t": handler}, WorkerConfig(maintenance=None))
    run = asyncio.create_task(worker.run(until_idle=True))
    await asyncio.wait_for(started.wait(), 10)
    async with db.connection() as conn:
        await discard_job(conn, job_id)  # type: ignore[arg-type]
    cancelled.set()
    stats = await asyncio.wait_for(run, 10)
    assert isinstance(outcome[0], LeaseLost)
    assert stats.lost == 1
    async with db.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM effects")
        assert await cur.fetchone() == (0,)
        record = await get_job(conn, job_id)  # type: ignore[arg-type]
        assert record is not None and record.state == "cancelled"


async def test_operator_actions_on_unknown_jobs_fail_clearly(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        with pytest.raises(JobNotFound, match="job 424242: nothing to retry"):
            await retry_job(conn, 424242)
        with pytest.raises(JobNotFound, match="nothing to cancel"):
            await discard_job(conn, 424242)
        assert await retry_dead(conn) == 0


async def test_unknown_kind_past_its_grace_is_dead_with_a_clear_error(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        job_id = await enqueue(conn, "nobody-handles-this", None, max_attempts=5)
    config = WorkerConfig(maintenance=None, unhandled_grace=0)
    worker = Worker(db, {"t": lambda job: asyncio.sleep(0)}, config, name="w1")
    await worker.run(until_idle=True)
    async with db.connection() as conn:
        record = await get_job(conn, job_id)  # type: ignore[arg-type]
    assert record is not None and record.state == "dead" and record.attempts == 1
    assert record.last_error == (
        "no task named 'nobody-handles-this' on worker w1 (its tasks: t); handed back,"
        " dead-lettered 0s after its enqueue"
    )


async def test_list_jobs_filters_by_state_queue_and_failure_and_pages_by_id(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        ids = [await enqueue(conn, "t", n, queue="a" if n % 2 else "b") for n in range(6)]
        doomed = await enqueue(conn, "boom", None, queue="a", max_attempts=1)
        flaky = await enqueue(conn, "boom", None, queue="a", max_attempts=5)
        assert ids[0] is not None
        await discard_job(conn, ids[0])
    # A worker for queue "a" only runs the failing kind: one dead, one waiting to retry.
    config = WorkerConfig(queue="a", maintenance=None)
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE pgenough.jobs SET run_at = now() + interval '1 hour'"
            " WHERE kind = 't' AND queue = 'a'"
        )

    async def boom(job: Job) -> None:
        raise RuntimeError("boom")

    await Worker(db, {"boom": boom}, config).run(until_idle=True)

    async with db.connection() as conn:
        everything = await list_jobs(conn)
        in_b = await list_jobs(conn, queue="b")
        cancelled = await list_jobs(conn, state="cancelled")
        failing = await list_jobs(conn, failing=True)
        first = await list_jobs(conn, limit=3)
        rest = await list_jobs(conn, before=first[-1].id)
        with pytest.raises(ValueError, match="state must be one of"):
            await list_jobs(conn, state="done")
    assert [j.id for j in everything] == sorted([*ids, doomed, flaky], reverse=True)
    assert {j.queue for j in in_b} == {"b"} and len(in_b) == 3
    assert [j.id for j in cancelled] == [ids[0]]
    assert [(j.id, j.state) for j in failing] == [(flaky, "ready"), (doomed, "dead")]
    assert [j.id for j in first + rest] == [j.id for j in everything]


def test_new_job_carries_the_enqueue_options() -> None:
    """``NewJob``'s fields are a kind, a payload and ``EnqueueOptions``'s, so that
    ``NewJob.with_options`` and the options the tasks use cannot drift apart."""
    options = {f.name for f in dataclasses.fields(EnqueueOptions)}
    assert [f.name for f in dataclasses.fields(NewJob)][:2] == ["kind", "payload"]
    assert {f.name for f in dataclasses.fields(NewJob)[2:]} == options
    chosen = EnqueueOptions(queue="q", priority=3, max_attempts=2, dedupe_key="k")
    job = NewJob.with_options("k", {"a": 1}, chosen)
    assert {name: getattr(job, name) for name in options} == dataclasses.asdict(chosen)
