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
    NewJob,
    Worker,
    WorkerConfig,
    complete,
    enqueue,
    enqueue_many,
    get_job,
)
from pgenough.core.admin import (
    JobFailures,
    discard_dead,
    discard_job,
    discard_jobs,
    job_failures,
    job_failures_by_queue,
    list_jobs,
    queue_stats,
    retry_dead,
    retry_job,
    retry_jobs,
)
from pgenough.core.errors import JobNotFound, LeaseLost

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


async def _states(db: AsyncConnectionPool, *ids: int | None) -> list[str]:
    async with db.connection() as conn:
        found = [await get_job(conn, i) for i in ids if i is not None]
    return [str(j.state) if j is not None else "gone" for j in found]


async def test_list_jobs_filters_by_kind_and_payload_text(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        mail = await enqueue(conn, "send_mail", {"to": "Ann@Example.com", "n": 1}, queue="a")
        other = await enqueue(conn, "send_mail", {"to": "bob@example.com", "n": 2}, queue="b")
        report = await enqueue(conn, "report", {"title": "ann's 100% report_x"}, queue="a")
        by_kind = await list_jobs(conn, kind="send_mail")
        # Case-insensitive, anywhere in the payload's JSON text, keys included.
        ann = await list_jobs(conn, text="ANN")
        keyed = await list_jobs(conn, text='"n": 2')
        # LIKE's wildcards are plain characters here.
        literal = await list_jobs(conn, text="100% report_")
        wildcard = await list_jobs(conn, text="%")
        none = await list_jobs(conn, text="nobody")
        both = await list_jobs(conn, kind="send_mail", text="ann", queue="a")
        paged = await list_jobs(conn, text="example", limit=1)
        older = await list_jobs(conn, text="example", before=paged[0].id)
    assert [j.id for j in by_kind] == [other, mail]
    assert [j.id for j in ann] == [report, mail]
    assert [j.id for j in keyed] == [other]
    assert [j.id for j in literal] == [j.id for j in wildcard] == [report]
    assert none == []
    assert [j.id for j in both] == [mail]
    assert [j.id for j in paged + older] == [other, mail]


async def test_retry_jobs_and_discard_jobs_change_many_in_one_statement(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        ids = [await enqueue(conn, "t", {"n": n}, queue="ops") for n in range(4)]
        assert all(i is not None for i in ids)
        a, b, c, d = (i for i in ids if i is not None)
        await conn.execute(
            "UPDATE pgenough.jobs SET state = 'dead', attempts = max_attempts,"
            " finished_at = now(), last_error = 'boom' WHERE id = ANY(%s)",
            ([a, b, c],),
        )
        await conn.execute(
            "UPDATE pgenough.jobs SET state = 'running', worker = 'w', attempts = 1,"
            " claimed_at = now(), lease_until = now() + interval '1 min' WHERE id = %s",
            (d,),
        )
        assert await retry_jobs(conn, [a, b, 424242]) == 2
        assert await retry_jobs(conn, [d]) == 0  # running: left as it is
        assert await retry_jobs(conn, []) == 0
    assert await _states(db, a, b, c, d) == ["ready", "ready", "dead", "running"]
    async with db.connection() as conn:
        record = await get_job(conn, a)
        assert record is not None and record.max_attempts == record.attempts + 1
        assert await discard_jobs(conn, [a, c, d, 424242]) == 3
        assert await discard_jobs(conn, [a]) == 0  # already cancelled
    assert await _states(db, a, b, c, d) == ["cancelled", "ready", "cancelled", "cancelled"]


async def test_retry_dead_and_discard_dead_take_the_list_filters(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        ids = [
            await enqueue(conn, kind, payload, queue=queue)
            for kind, payload, queue in (
                ("mail", {"to": "ann"}, "a"),
                ("mail", {"to": "bob"}, "a"),
                ("report", {"to": "ann"}, "a"),
                ("mail", {"to": "ann"}, "b"),
                ("mail", {"to": "ann"}, "a"),  # stays ready
            )
        ]
        ann_a, bob_a, report_a, ann_b, ready = ids
        await conn.execute(
            "UPDATE pgenough.jobs SET state = 'dead', finished_at = now(), last_error = 'x'"
            " WHERE id = ANY(%s)",
            ([ann_a, bob_a, report_a, ann_b],),
        )
        assert await retry_dead(conn, "a", kind="mail", text="ANN") == 1
        assert await discard_dead(conn, kind="mail", text="ann") == 1  # ann_b; ann_a is ready
        assert await discard_dead(conn, "a", text="bob") == 1
        assert await retry_dead(conn) == 1  # what is left dead: report_a
    assert await _states(db, ann_a, bob_a, report_a, ann_b, ready) == [
        "ready",
        "cancelled",
        "ready",
        "cancelled",
        "ready",
    ]


async def test_job_failures_by_queue_add_up_to_job_failures(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        dead = await enqueue(conn, "t", None, queue="a")
        retrying = await enqueue(conn, "t", None, queue="b")
        await enqueue(conn, "t", None, queue="c")  # no failure
        failed = "jsonb_build_object('attempt', 1, 'at', now(), 'error', 'boom')"
        await conn.execute(
            "UPDATE pgenough.jobs SET state = 'dead', finished_at = now(), last_error = 'boom',"
            f" errors = jsonb_build_array({failed}, {failed}) WHERE id = %s",
            (dead,),
        )
        await conn.execute(
            f"UPDATE pgenough.jobs SET last_error = 'boom', errors = jsonb_build_array({failed})"
            " WHERE id = %s",
            (retrying,),
        )
        per_queue = await job_failures_by_queue(conn, 3600)
        total = await job_failures(conn, 3600)
    assert per_queue == {"a": JobFailures(1, 2), "b": JobFailures(0, 1)}
    assert total == JobFailures(1, 3)


def test_new_job_carries_the_enqueue_options() -> None:
    """``NewJob``'s fields are a kind, a payload and ``EnqueueOptions``'s, so that
    ``NewJob.with_options`` and the options the tasks use cannot drift apart."""
    options = {f.name for f in dataclasses.fields(EnqueueOptions)}
    assert [f.name for f in dataclasses.fields(NewJob)][:2] == ["kind", "payload"]
    assert {f.name for f in dataclasses.fields(NewJob)[2:]} == options
    chosen = EnqueueOptions(queue="q", priority=3, max_attempts=2, dedupe_key="k")
    job = NewJob.with_options("k", {"a": 1}, chosen)
    assert {name: getattr(job, name) for name in options} == dataclasses.asdict(chosen)
