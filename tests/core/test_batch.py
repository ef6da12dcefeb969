"""Batch handlers: many jobs, their effects and their completions in one transaction.

Effects go to ``batch_effects``, which has NO unique constraint: a job whose effect committed
twice shows up as two rows instead of an error, so "exactly once" is counted, not assumed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    App,
    Backoff,
    BatchHandler,
    BatchTask,
    GiveUp,
    Job,
    NewJob,
    RetryIn,
    Worker,
    WorkerConfig,
    enqueue,
    enqueue_many,
    get_job,
)
from pgenough.core._sql import load
from pgenough.core.admin import discard_job
from pgenough.core.maintenance import MaintenanceConfig, requeue_stuck
from pgenough.core.statements import record_rows
from pgenough.core.worker import INTERRUPTED
from tests.helpers.procs import wait_until

pytestmark = pytest.mark.db

Conn = psycopg.AsyncConnection[Any]
CONFIG = WorkerConfig(batch_size=20, concurrency=20, maintenance=None)


@pytest.fixture
async def effects(db: AsyncConnectionPool) -> AsyncIterator[AsyncConnectionPool]:
    """``db`` with an empty ``batch_effects`` table: one row per effect a handler committed,
    with the transaction that wrote it."""
    async with db.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS batch_effects (job_id bigint, note text,"
            " xact xid8 NOT NULL DEFAULT pg_current_xact_id())"
        )
        await conn.execute("TRUNCATE batch_effects")
    yield db


async def write_effects(conn: Conn, jobs: Sequence[Job], note: str = "") -> None:
    await conn.execute(
        "INSERT INTO batch_effects (job_id, note) SELECT unnest(%s::bigint[]), %s",
        ([j.id for j in jobs], note),
    )


async def rows(db: AsyncConnectionPool, query: str, *params: Any) -> list[tuple[Any, ...]]:
    async with db.connection() as conn:
        cur = await conn.execute(query, params or None)  # type: ignore[arg-type]
        return await cur.fetchall()


async def effect_counts(db: AsyncConnectionPool) -> dict[int, int]:
    found = await rows(db, "SELECT job_id, count(*) FROM batch_effects GROUP BY job_id")
    return {job_id: n for job_id, n in found}


async def enqueue_jobs(db: AsyncConnectionPool, kind: str, payloads: Sequence[Any]) -> list[int]:
    async with db.connection() as conn, conn.transaction():
        ids = [await enqueue(conn, kind, p, max_attempts=2) for p in payloads]
    assert all(i is not None for i in ids)
    return [i for i in ids if i is not None]


def completed_total(queue: str = "default") -> float:
    return REGISTRY.get_sample_value("pgenough_jobs_completed_total", {"queue": queue}) or 0.0


async def make_due(db: AsyncConnectionPool) -> None:
    """Skip the backoff wait (the delay itself is checked before this is called)."""
    async with db.connection() as conn:
        await conn.execute("UPDATE pgenough.jobs SET run_at = now() WHERE state = 'ready'")


# -- commit together ----------------------------------------------------------------------


async def test_a_batch_commits_every_effect_with_every_completion_in_one_transaction(
    effects: AsyncConnectionPool,
) -> None:
    ids = await enqueue_jobs(effects, "view", [{"n": n} for n in range(50)])
    batches: list[list[int]] = []

    async def record(conn: Conn, jobs: Sequence[Job]) -> None:
        batches.append([j.id for j in jobs])
        await write_effects(conn, jobs)

    before = completed_total()
    async with effects.connection() as conn:
        # Which transaction deleted (completed) each job, to compare with its effect's.
        await conn.execute("CREATE TABLE batch_completions (job_id bigint, xact xid8 NOT NULL)")
        await conn.execute(
            "CREATE FUNCTION batch_note_completion() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN INSERT INTO batch_completions VALUES (OLD.id, pg_current_xact_id());"
            " RETURN OLD; END$$"
        )
        await conn.execute(
            "CREATE TRIGGER batch_note_completion AFTER DELETE ON pgenough.jobs"
            " FOR EACH ROW EXECUTE FUNCTION batch_note_completion()"
        )
    try:
        stats = await Worker(effects, {"view": BatchHandler(record)}, CONFIG).run(until_idle=True)
        apart = await rows(
            effects,
            "SELECT e.job_id FROM batch_effects e JOIN batch_completions c USING (job_id)"
            " WHERE e.xact <> c.xact",
        )
        [(completions,)] = await rows(effects, "SELECT count(*) FROM batch_completions")
    finally:
        async with effects.connection() as conn:
            await conn.execute("DROP TRIGGER batch_note_completion ON pgenough.jobs")
            await conn.execute("DROP FUNCTION batch_note_completion()")
            await conn.execute("DROP TABLE batch_completions")
    assert completions == 50
    assert apart == []  # every job completed in the transaction that wrote its effect

    assert (stats.completed, stats.failed, stats.lost) == (50, 0, 0)
    assert completed_total() - before == 50
    assert sorted(i for b in batches for i in b) == ids
    assert max(len(b) for b in batches) == CONFIG.batch_size  # whole claims, not one by one
    assert await effect_counts(effects) == dict.fromkeys(ids, 1)
    assert await rows(effects, "SELECT count(*) FROM pgenough.jobs") == [(0,)]
    # One transaction per handler call wrote its batch's effects...
    per_xact = await rows(
        effects, "SELECT count(*) FROM batch_effects GROUP BY xact ORDER BY count(*) DESC"
    )
    assert sorted(n for (n,) in per_xact) == sorted(len(b) for b in batches)


async def test_when_the_commit_fails_neither_the_effects_nor_the_completions_happen(
    effects: AsyncConnectionPool,
) -> None:
    """The failure comes at COMMIT, after the completions ran: they were in the same
    transaction as the effects, since both are gone, and every job is still to do."""
    async with effects.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS batch_doomed (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)"
        )
        await conn.execute("TRUNCATE batch_doomed")
    ids = await enqueue_jobs(effects, "doomed", [None] * 4)

    async def doomed(conn: Conn, jobs: Sequence[Job]) -> None:
        await write_effects(conn, jobs)
        await conn.execute("INSERT INTO batch_doomed VALUES (1), (1)")  # refused at COMMIT

    try:
        # A retry a minute away: the run ends idle after the first attempts, however slow the
        # machine (with the default second, a loaded CI pass once retried them before idle).
        handler = BatchHandler(doomed, backoff=Backoff(base=60.0, cap=60.0))
        stats = await Worker(effects, {"doomed": handler}, CONFIG).run(until_idle=True)
        states = await rows(
            effects, "SELECT id, state::text, attempts, last_error FROM pgenough.jobs ORDER BY id"
        )
    finally:
        async with effects.connection() as conn:
            await conn.execute("DROP TABLE batch_doomed")
    assert (stats.completed, stats.failed) == (0, 4)
    assert await effect_counts(effects) == {}
    assert [(i, s, a) for i, s, a, _ in states] == [(i, "ready", 1) for i in ids]
    assert all(e.startswith("UniqueViolation") for *_, e in states), states


async def test_concurrency_counts_the_jobs_of_running_batches(
    effects: AsyncConnectionPool,
) -> None:
    """At most ``concurrency`` jobs are inside handlers at once; a batch whose handler has
    returned stops counting while it commits, so the next claim need not wait for it."""
    await enqueue_jobs(effects, "view", [None] * 40)
    inside = peak = 0

    async def record(conn: Conn, jobs: Sequence[Job]) -> None:
        nonlocal inside, peak
        inside += len(jobs)
        peak = max(peak, inside)
        await asyncio.sleep(0.05)  # let the claim loop try to take more meanwhile
        inside -= len(jobs)
        await write_effects(conn, jobs)

    config = WorkerConfig(batch_size=4, concurrency=10, maintenance=None)
    stats = await Worker(effects, {"view": BatchHandler(record)}, config).run(until_idle=True)
    assert stats.completed == 40
    assert 4 < peak <= 10  # several batches at once, never more jobs than the concurrency
    assert len(await effect_counts(effects)) == 40


# -- isolation: a raising job fails alone -------------------------------------------------


async def test_a_raising_job_fails_alone_and_the_others_commit_exactly_once(
    effects: AsyncConnectionPool,
) -> None:
    ids = await enqueue_jobs(effects, "view", [{"bad": n == 13} for n in range(20)])
    bad = ids[13]
    calls: list[list[int]] = []

    async def record(conn: Conn, jobs: Sequence[Job]) -> None:
        calls.append([j.id for j in jobs])
        await write_effects(conn, jobs)  # rolled back with the batch when a job raises
        for job in jobs:
            if job.payload["bad"]:
                raise ValueError(f"bad job {job.id}")

    backoff = Backoff(base=100.0, cap=100.0)
    handlers = {"view": BatchHandler(record, backoff=backoff)}
    stats = await Worker(effects, handlers, CONFIG).run(until_idle=True)

    assert (stats.completed, stats.failed) == (19, 1)
    assert calls[0] == ids  # one batch first, then halves
    assert [bad] in calls  # down to the bad job alone
    assert len(calls) <= 2 * 5 + 1  # bisection: about two calls per halving of 20
    assert await effect_counts(effects) == {i: 1 for i in ids if i != bad}
    record_ = await get_job_record(effects, bad)
    assert (record_.state, record_.attempts) == ("ready", 1)
    assert record_.last_error == f"ValueError: bad job {bad}"
    delay = await rows(
        effects,
        "SELECT extract(epoch FROM run_at - (errors -> -1 ->> 'at')::timestamptz)::float8"
        " FROM pgenough.jobs WHERE id = %s",
        bad,
    )
    assert 50 <= delay[0][0] <= 100  # the handler's own backoff, not the queue's

    await make_due(effects)
    calls.clear()
    stats = await Worker(effects, handlers, CONFIG).run(until_idle=True)
    assert calls == [[bad]]
    record_ = await get_job_record(effects, bad)
    assert (record_.state, record_.attempts) == ("dead", 2)  # max_attempts=2 spent
    assert [e.error for e in record_.errors] == [f"ValueError: bad job {bad}"] * 2
    assert await effect_counts(effects) == {i: 1 for i in ids if i != bad}


async def get_job_record(db: AsyncConnectionPool, job_id: int) -> Any:
    async with db.connection() as conn:
        record = await get_job(conn, job_id)
    assert record is not None
    return record


async def test_give_up_and_retry_in_apply_to_their_job_alone(
    effects: AsyncConnectionPool,
) -> None:
    fates = ["ok"] * 10
    fates[2], fates[7] = "give_up", "retry_in"
    ids = await enqueue_jobs(effects, "view", [{"fate": f} for f in fates])

    async def record(conn: Conn, jobs: Sequence[Job]) -> None:
        await write_effects(conn, jobs)
        for job in jobs:
            if job.payload["fate"] == "give_up":
                raise GiveUp("malformed record")
            if job.payload["fate"] == "retry_in":
                raise RetryIn(120, "provider asked us to wait")

    stats = await Worker(effects, {"view": BatchHandler(record)}, CONFIG).run(until_idle=True)

    assert (stats.completed, stats.failed) == (8, 2)
    assert await effect_counts(effects) == {i: 1 for n, i in enumerate(ids) if n not in (2, 7)}
    gave_up, later = await get_job_record(effects, ids[2]), await get_job_record(effects, ids[7])
    assert (gave_up.state, gave_up.attempts, gave_up.last_error) == (
        "dead",
        1,
        "gave up: malformed record",
    )
    assert (later.state, later.last_error) == ("ready", "provider asked us to wait (retry in 120s)")
    [(wait,)] = await rows(
        effects,
        "SELECT extract(epoch FROM run_at - now())::float8 FROM pgenough.jobs WHERE id = %s",
        ids[7],
    )
    assert 100 < wait <= 120


async def test_a_handler_never_sees_jobs_of_another_kind(effects: AsyncConnectionPool) -> None:
    kinds = ["a", "b", "single"] * 10
    async with effects.connection() as conn:
        await enqueue_many(conn, [NewJob(k, {"n": n}) for n, k in enumerate(kinds)])
    seen: dict[str, list[list[str]]] = {"a": [], "b": [], "single": []}

    def batch_of(kind: str) -> BatchHandler:
        async def handle(conn: Conn, jobs: Sequence[Job]) -> None:
            seen[kind].append([j.kind for j in jobs])
            await write_effects(conn, jobs, kind)

        return BatchHandler(handle)

    async def single(job: Job) -> None:
        seen["single"].append([job.kind])

    handlers = {"a": batch_of("a"), "b": batch_of("b"), "single": single}
    stats = await Worker(effects, handlers, CONFIG).run(until_idle=True)

    assert stats.completed == 30
    for kind, batches in seen.items():
        assert {k for b in batches for k in b} == {kind}
        assert sum(map(len, batches)) == 10
    assert max(len(b) for b in seen["a"]) > 1
    assert await rows(
        effects, "SELECT note, count(*) FROM batch_effects GROUP BY 1 ORDER BY 1"
    ) == [
        ("a", 10),
        ("b", 10),
    ]
    assert await rows(effects, "SELECT count(*) FROM pgenough.jobs") == [(0,)]


# -- lost claims ----------------------------------------------------------------------------


async def take_back_by_rescuer(db: AsyncConnectionPool, job_id: int) -> None:
    """The job's lease expires (as if its worker stopped heartbeating) and the rescuer takes
    it back: runnable again, for whichever worker claims it next."""
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE pgenough.jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
            (job_id,),
        )
        result = await requeue_stuck(conn)
    assert result.retried == 1


async def cancel_by_operator(db: AsyncConnectionPool, job_id: int) -> None:
    async with db.connection() as conn:
        await discard_job(conn, job_id)


@pytest.mark.parametrize("lose", [take_back_by_rescuer, cancel_by_operator])
async def test_a_claim_lost_mid_batch_rolls_back_and_the_rest_runs_again(
    effects: AsyncConnectionPool,
    lose: Callable[[AsyncConnectionPool, int], Awaitable[None]],
) -> None:
    ids = await enqueue_jobs(effects, "view", [None] * 6)
    victim = ids[2]
    entered, resume = asyncio.Event(), asyncio.Event()
    calls: list[list[int]] = []

    async def record(conn: Conn, jobs: Sequence[Job]) -> None:
        calls.append([j.id for j in jobs])
        await write_effects(conn, jobs, "first")
        entered.set()
        await resume.wait()

    async def other(conn: Conn, jobs: Sequence[Job]) -> None:
        await write_effects(conn, jobs, "second")

    # A lease far longer than the test: no heartbeat restores the victim's meanwhile.
    config = WorkerConfig(batch_size=20, concurrency=20, lease=600, maintenance=None)
    first = Worker(effects, {"view": BatchHandler(record)}, config)
    run = asyncio.create_task(first.run(until_idle=True))
    try:
        await asyncio.wait_for(entered.wait(), 30)
        await lose(effects, victim)
        # Rescued: a second worker claims the victim and completes it, effect included.
        second = await Worker(effects, {"view": BatchHandler(other)}, config).run(until_idle=True)
        assert second.completed == (1 if lose is take_back_by_rescuer else 0)
        resume.set()
        stats = await asyncio.wait_for(run, 30)
    finally:
        resume.set()
        await asyncio.gather(run, return_exceptions=True)

    assert (stats.completed, stats.lost, stats.failed) == (5, 1, 0)
    assert calls == [ids, [i for i in ids if i != victim]]
    counted = await rows(
        effects, "SELECT job_id, note, count(*) FROM batch_effects GROUP BY 1, 2 ORDER BY 1"
    )
    if lose is take_back_by_rescuer:
        expected = [(i, "second" if i == victim else "first", 1) for i in ids]
        assert await rows(effects, "SELECT count(*) FROM pgenough.jobs") == [(0,)]
    else:
        expected = [(i, "first", 1) for i in ids if i != victim]
        assert (await get_job_record(effects, victim)).state == "cancelled"
    assert counted == expected


async def test_heartbeats_keep_a_long_batch_from_being_reclaimed(
    effects: AsyncConnectionPool,
) -> None:
    ids = await enqueue_jobs(effects, "view", [None] * 3)
    attempts: list[list[int]] = []

    async def slow(conn: Conn, jobs: Sequence[Job]) -> None:
        attempts.append([j.attempts for j in jobs])
        await write_effects(conn, jobs)
        await asyncio.sleep(3.0)  # three leases long, the rescuer sweeping all along

    config = WorkerConfig(
        batch_size=20,
        concurrency=20,
        lease=1.0,
        poll_interval=0.2,
        maintenance=MaintenanceConfig(rescue_interval=0.2),
    )
    worker = Worker(effects, {"view": BatchHandler(slow)}, config)
    run = asyncio.create_task(worker.run())
    try:

        async def done() -> bool:
            return await rows(effects, "SELECT count(*) FROM pgenough.jobs") == [(0,)]

        await wait_until(done, timeout=30, what="the batch done")
    finally:
        worker.stop()
        await run
    assert attempts == [[1, 1, 1]]
    assert worker.stats.lost == 0
    assert await effect_counts(effects) == dict.fromkeys(ids, 1)


async def test_shutdown_mid_batch_rolls_back_and_hands_the_jobs_back(
    effects: AsyncConnectionPool,
) -> None:
    ids = await enqueue_jobs(effects, "view", [None] * 5)
    entered = asyncio.Event()

    async def stuck(conn: Conn, jobs: Sequence[Job]) -> None:
        await write_effects(conn, jobs)
        entered.set()
        await asyncio.Event().wait()  # never finishes on its own

    config = WorkerConfig(batch_size=20, concurrency=20, shutdown_timeout=0.2, maintenance=None)
    worker = Worker(effects, {"view": BatchHandler(stuck)}, config)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(entered.wait(), 30)
    finally:
        worker.stop()
        await asyncio.wait_for(run, 30)
    found = await rows(
        effects,
        "SELECT id, state::text, attempts, worker, last_error FROM pgenough.jobs ORDER BY id",
    )
    assert found == [(i, "ready", 1, None, INTERRUPTED) for i in ids]
    assert await effect_counts(effects) == {}


# -- batch tasks ------------------------------------------------------------------------------


@dataclass
class View:
    page_id: int
    user_id: int
    weight: int = 1

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError("weight must be >= 0")


async def test_a_batch_task_gets_its_arguments_as_objects_and_dead_letters_a_stale_one_alone(
    effects: AsyncConnectionPool,
) -> None:
    app = App()
    seen: list[list[View]] = []

    @app.batch_task(View, queue="views", max_attempts=3)
    async def record_views(conn: Conn, views: list[View]) -> None:
        seen.append(views)
        await conn.execute(
            "INSERT INTO batch_effects (job_id, note)"
            " SELECT unnest(%s::bigint[]), 'page ' || unnest(%s::int[])",
            ([v.user_id for v in views], [v.page_id for v in views]),
        )

    assert isinstance(record_views, BatchTask)
    async with effects.connection() as conn:
        first = await record_views.enqueue(conn, page_id=1, user_id=100)
        assert first is not None
        await record_views.enqueue_many(conn, [{"page_id": 2, "user_id": n} for n in (101, 102)])
        await record_views.using(priority=5).enqueue(conn, page_id=3, user_id=103)
        # Written by an older deploy (or by hand): fields that no longer fit, and a value
        # the class's own validation refuses.
        stale = await enqueue(conn, record_views.name, {"page": 9}, queue="views")
        refused = await enqueue(
            conn, record_views.name, {"page_id": 9, "user_id": 9, "weight": -1}, queue="views"
        )
    stats = await app.worker(effects, config=CONFIG).run(until_idle=True)

    assert (stats.completed, stats.failed) == (4, 2)
    assert len(seen) == 1  # one batch: the stale jobs were taken out, not bisected around
    assert sorted((v.page_id, v.user_id) for v in seen[0]) == [
        (1, 100),
        (2, 101),
        (2, 102),
        (3, 103),
    ]
    assert await rows(effects, "SELECT job_id, note FROM batch_effects ORDER BY 1") == [
        (100, "page 1"),
        (101, "page 2"),
        (102, "page 2"),
        (103, "page 3"),
    ]
    for job_id, reason in (
        (stale, "stored arguments do not fit: missing a required argument: 'page_id'"),
        (refused, "stored arguments do not fit View: weight must be >= 0"),
    ):
        assert job_id is not None
        record_ = await get_job_record(effects, job_id)
        assert (record_.state, record_.attempts) == ("dead", 1), record_
        assert record_.last_error == f"gave up: task {record_views.name!r}: {reason}"


async def test_a_batch_task_that_runs_past_its_timeout_fails_and_retries(
    effects: AsyncConnectionPool,
) -> None:
    app = App()

    @app.batch_task(View, timeout=0.2, retry=Backoff(base=60, cap=60))
    async def slow_views(conn: Conn, views: list[View]) -> None:
        await asyncio.sleep(30)

    async with effects.connection() as conn:
        job_id = await slow_views.enqueue(conn, page_id=1, user_id=1)
    assert job_id is not None
    stats = await app.worker(effects, config=CONFIG).run(until_idle=True)
    assert stats.failed == 1
    record_ = await get_job_record(effects, job_id)
    assert record_.state == "ready"
    assert (
        record_.last_error == f"TaskTimeout: task {slow_views.name!r} ran past its timeout of 0.2s"
    )


def test_a_batch_task_must_be_async_and_take_arguments_by_name() -> None:
    app = App()

    with pytest.raises(TypeError, match="must be an async def"):

        @app.batch_task(View)
        def blocking(conn: Any, views: list[View]) -> None: ...

    class PositionalOnly:
        def __init__(self, n: int, /) -> None: ...

    with pytest.raises(TypeError, match="positional-only"):

        @app.batch_task(PositionalOnly)
        async def positional(conn: Any, items: list[PositionalOnly]) -> None: ...

    @app.batch_task(View, name="views")
    async def views(conn: Any, items: list[View]) -> None: ...

    with pytest.raises(ValueError, match="already registered"):

        @app.batch_task(View, name="views")
        async def again(conn: Any, items: list[View]) -> None: ...

    assert views.payload(page_id=1, user_id=2) == {"page_id": 1, "user_id": 2}
    job = views.using(queue="elsewhere").job(page_id=1, user_id=2, weight=3)
    assert (job.kind, job.queue, job.payload) == (
        "views",
        "elsewhere",
        {"page_id": 1, "user_id": 2, "weight": 3},
    )


async def test_a_batch_task_runs_one_job_alone_as_a_batch_of_one(
    effects: AsyncConnectionPool,
) -> None:
    app = App()

    @app.batch_task(View, queue="views")
    async def record_views(conn: Conn, views: list[View]) -> None:
        await conn.execute(
            "INSERT INTO batch_effects (job_id, note) VALUES (%s, 'alone')", (views[0].user_id,)
        )

    async with effects.connection() as conn:
        job_id = await record_views.enqueue(conn, page_id=1, user_id=5)
    [job] = await claim_now(effects, "views")
    assert job.id == job_id
    await record_views.run_job(job, effects)
    assert await rows(effects, "SELECT job_id, note FROM batch_effects") == [(5, "alone")]
    assert await rows(effects, "SELECT count(*) FROM pgenough.jobs") == [(0,)]


async def claim_now(db: AsyncConnectionPool, queue: str) -> list[Job]:
    """Claim a queue's jobs as a worker does, without running them."""
    params = {"done_ids": [], "done_attempts": [], "done_created": [], "queue": queue, "limit": 10}
    async with db.connection() as conn:
        cur = conn.cursor(row_factory=record_rows(Job))
        await cur.execute(load("queue")["claim"], {**params, "lease": 30, "worker": "t"})
        return await cur.fetchall()
