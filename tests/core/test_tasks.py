"""Tasks: arguments checked at the call, options, and the jobs a worker runs from them."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import App, Backoff, GiveUp, NewJob, TaskContext, WorkerConfig, complete, get_job
from pgenough.core.admin import list_jobs
from pgenough.core.tasks import TaskArgumentsError
from tests.helpers.procs import ROOT, wait_until

pytestmark = pytest.mark.db

FAST = WorkerConfig(poll_interval=0.05, maintenance=None)


def make_app() -> tuple[App, list[Any]]:
    app = App()
    seen: list[Any] = []

    @app.task(name="confirm", queue="emails", max_attempts=3)
    async def confirm(order_id: int, to: str, *, urgent: bool = False) -> None:
        seen.append(("confirm", order_id, to, urgent))

    @app.task(name="blocking")
    def blocking(n: int) -> None:
        seen.append(("blocking", n, threading.current_thread() is threading.main_thread()))

    @app.task(name="flexible")
    async def flexible(a: int, **extra: Any) -> None:
        seen.append(("flexible", a, extra))

    return app, seen


async def jobs(conn: psycopg.AsyncConnection[Any]) -> list[Any]:
    return await list_jobs(conn, limit=1000)


async def test_a_job_carries_its_arguments_by_name(db: AsyncConnectionPool) -> None:
    app, seen = make_app()
    async with db.connection() as conn:
        job_id = await app.tasks["confirm"].enqueue(conn, 7, "a@example.com", urgent=True)
        await app.tasks["flexible"].enqueue(conn, 1, b=[1, (2, 3)], c={"k": None})
        assert job_id is not None
        record = await get_job(conn, job_id)
    assert record is not None
    assert (record.kind, record.queue, record.max_attempts) == ("confirm", "emails", 3)
    assert record.payload == {"order_id": 7, "to": "a@example.com", "urgent": True}
    await app.worker(db, config=FAST).run(until_idle=True)
    assert sorted(map(repr, seen)) == sorted(
        map(
            repr,
            [
                ("confirm", 7, "a@example.com", True),
                ("flexible", 1, {"b": [1, [2, 3]], "c": {"k": None}}),  # a tuple comes back a list
            ],
        )
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {"to": "x"}, "missing a required argument: 'order_id'"),
        ((1, "x", True), {}, "too many positional arguments"),
        ((1, "x"), {"colour": "red"}, "unexpected keyword argument 'colour'"),
        ((1,), {"to": datetime(2026, 1, 1, tzinfo=UTC)}, "'to'.*datetime is not JSON"),
        ((1, "x"), {"urgent": {1, 2}}, "'urgent'.*set is not JSON"),
        ((math.nan, "x"), {}, "'order_id'.*nan is not a JSON number"),
        ((math.inf, "x"), {}, "inf is not a JSON number"),
        ((1, "a\x00b"), {}, "NUL character"),
        ((1, {1: "one"}), {}, "key 1 is a int, and JSON keys are strings"),
        ((1, [{"deep": b"bytes"}]), {}, "bytes is not JSON"),
    ],
)
async def test_bad_arguments_fail_at_the_call_and_leave_the_transaction_usable(
    db: AsyncConnectionPool, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    app, _ = make_app()
    async with db.connection() as conn:
        async with conn.transaction():
            with pytest.raises(TaskArgumentsError, match=message) as caught:
                await app.tasks["confirm"].enqueue(conn, *args, **kwargs)
            # Raised before any statement: the caller's transaction goes on.
            assert await app.tasks["confirm"].enqueue(conn, 2, "ok") is not None
        assert [j.payload for j in await jobs(conn)] == [{"order_id": 2, "to": "ok"}]
    assert isinstance(caught.value, TypeError)  # what a Python caller expects of bad arguments
    assert "'confirm'" in str(caught.value)


def test_signatures_that_cannot_travel_by_name_are_refused_at_definition() -> None:
    app = App()
    with pytest.raises(TypeError, match="positional-only"):

        @app.task
        async def pos_only(a: int, /) -> None: ...

    with pytest.raises(TypeError, match=r"\*rest is not allowed"):

        @app.task
        async def star(*rest: int) -> None: ...

    with pytest.raises(TypeError, match="pass_context needs a first parameter"):

        @app.task(pass_context=True)
        async def no_ctx() -> None: ...

    with pytest.raises(ValueError, match="timeout"):

        @app.task(timeout=0)
        async def zero() -> None: ...

    @app.task(name="once")
    async def once() -> None: ...

    with pytest.raises(ValueError, match="already registered"):

        @app.task(name="once")
        async def twice() -> None: ...

    async def named_by_default() -> None: ...

    assert App().task(named_by_default).name == (
        "tests.core.test_tasks.test_signatures_that_cannot_travel_by_name_are_refused_at_definition"
        ".<locals>.named_by_default"
    )


async def test_a_rolled_back_transaction_leaves_no_job(db: AsyncConnectionPool) -> None:
    app, _ = make_app()
    async with db.connection() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await app.tasks["confirm"].enqueue(conn, 1, "x")
                raise RuntimeError("the order failed")
        assert await jobs(conn) == []


async def test_enqueue_options_delay_run_at_dedupe_priority_queue(
    db: AsyncConnectionPool,
) -> None:
    app, _ = make_app()
    confirm = app.tasks["confirm"]
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    async with db.connection() as conn:
        now = (await (await conn.execute("SELECT now()")).fetchone())[0]  # type: ignore[index]
        later = await confirm.using(delay=90).enqueue(conn, 1, "x")
        fixed = await confirm.using(run_at=at, priority=5, queue="other").enqueue(conn, 2, "y")
        first = await confirm.using(dedupe_key="order-3").enqueue(conn, 3, "z")
        again = await confirm.using(dedupe_key="order-3").enqueue(conn, 3, "z")
        records = {j.id: j for j in await jobs(conn)}
    assert again is None and first is not None
    assert later is not None and fixed is not None
    assert records[later].run_at - now == pytest.approx(timedelta(seconds=90), abs=timedelta(1))
    assert (records[fixed].run_at, records[fixed].priority, records[fixed].queue) == (
        at,
        5,
        "other",
    )
    assert records[first].dedupe_key == "order-3"
    assert confirm.options.run_at is None  # using() made a copy
    with pytest.raises(ValueError, match="aware"):
        confirm.using(run_at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="not both"):
        confirm.using(run_at=at, delay=1)
    with pytest.raises(ValueError, match="non-negative"):
        confirm.using(delay=-1)


async def test_enqueue_many_checks_every_call_before_inserting(db: AsyncConnectionPool) -> None:
    app, seen = make_app()
    confirm = app.tasks["confirm"]
    async with db.connection() as conn:
        with pytest.raises(TaskArgumentsError, match="'to'"):
            await confirm.enqueue_many(conn, [{"order_id": 1, "to": "a"}, {"order_id": 2}])
        with pytest.raises(TaskArgumentsError, match="a job of 'blocking'"):
            await confirm.enqueue_many(conn, [app.tasks["blocking"].job(1)])
        with pytest.raises(TaskArgumentsError, match="not tuple"):
            await confirm.enqueue_many(conn, [(1, "a")])  # type: ignore[list-item]
        assert await jobs(conn) == []
        n = await confirm.enqueue_many(
            conn,
            [
                {"order_id": 1, "to": "a"},
                confirm.using(dedupe_key="k").job(2, "b"),
                confirm.using(dedupe_key="k").job(3, "c"),  # same key: skipped
            ],
        )
    assert n == 2
    await app.worker(db, config=FAST).run(until_idle=True)
    assert sorted(s[1] for s in seen) == [1, 2]


async def test_a_plain_function_runs_in_a_thread(db: AsyncConnectionPool) -> None:
    app, seen = make_app()
    async with db.connection() as conn:
        await app.tasks["blocking"].enqueue(conn, 5)
    await app.worker(db, config=FAST).run(until_idle=True)
    assert seen == [("blocking", 5, False)]


async def test_pass_context_completes_in_the_tasks_own_transaction(
    db: AsyncConnectionPool,
) -> None:
    app = App()

    @app.task(name="ledger", pass_context=True)
    async def ledger(ctx: TaskContext, amount: int) -> None:
        async with ctx.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, %s, %s)",
                (ctx.job.id, ctx.job.attempts, str(amount)),
            )
            await complete(conn, ctx.job)

    async with db.connection() as conn:
        job_id = await ledger.enqueue(conn, amount=42)
    stats = await app.worker(db, config=FAST).run(until_idle=True)
    assert stats.completed == 1
    async with db.connection() as conn:
        rows = await (await conn.execute("SELECT job_id, worker FROM effects")).fetchall()
    assert rows == [(job_id, "42")]


async def test_a_tasks_retry_policy_and_timeout(db: AsyncConnectionPool) -> None:
    app = App()

    @app.task(name="flaky", retry=Backoff(base=600, cap=600))
    async def flaky() -> None:
        raise ConnectionError("provider down")

    @app.task(name="stuck", timeout=0.2)
    async def stuck() -> None:
        await asyncio.sleep(30)

    @app.task(name="default-policy")
    async def plain() -> None:
        raise ConnectionError("down too")

    async with db.connection() as conn:
        ids = {t: await app.tasks[t].enqueue(conn) for t in ("flaky", "stuck", "default-policy")}
    config = WorkerConfig(poll_interval=0.05, maintenance=None, backoff=Backoff(base=1, cap=1))
    started = asyncio.get_running_loop().time()
    await app.worker(db, config=config).run(until_idle=True)
    assert asyncio.get_running_loop().time() - started < 10  # the timeout cut the sleep
    async with db.connection() as conn:
        now = (await (await conn.execute("SELECT now()")).fetchone())[0]  # type: ignore[index]
        flaky_job, stuck_job, plain_job = [await get_job(conn, ids[t]) for t in ids]  # type: ignore[arg-type]
    assert flaky_job is not None and stuck_job is not None and plain_job is not None
    # Equal jitter on the task's own policy: 300 to 600 s; the queue's would be 0.5 to 1 s.
    assert timedelta(seconds=290) < flaky_job.run_at - now <= timedelta(seconds=600)
    assert plain_job.run_at - now <= timedelta(seconds=1)
    assert flaky_job.last_error == "ConnectionError: provider down"
    assert stuck_job.state == "ready"
    assert stuck_job.last_error == "TaskTimeout: task 'stuck' ran past its timeout of 0.2s"


async def test_stored_arguments_that_no_longer_fit_are_dead_at_once(
    db: AsyncConnectionPool,
) -> None:
    """A deploy renamed a parameter under queued jobs: retrying cannot help."""
    app, _ = make_app()
    from pgenough.core import enqueue_many

    async with db.connection() as conn:
        await enqueue_many(
            conn,
            [
                NewJob("confirm", {"order": 1, "to": "x"}, queue="emails"),
                NewJob("confirm", [1, "x"], queue="emails"),
            ],
        )
    await app.worker(db, config=FAST).run(until_idle=True)
    async with db.connection() as conn:
        dead = await list_jobs(conn, state="dead")
    assert sorted(j.last_error or "" for j in dead) == [
        "gave up: task 'confirm': payload is list, not an object",
        "gave up: task 'confirm': stored arguments do not fit: missing a required argument:"
        " 'order_id'",
    ]
    assert all(j.attempts == 1 for j in dead)


def test_giveup_is_what_a_task_raises_to_dead_letter() -> None:
    assert issubclass(GiveUp, Exception)


async def test_a_worker_for_an_app_serves_its_queues(db: AsyncConnectionPool) -> None:
    app = App(queues={"emails": 3})
    done: list[str] = []

    for queue in ("emails", "reports", "default"):

        @app.task(name=f"t-{queue}", queue=queue)
        async def t(queue: str = queue) -> None:
            done.append(queue)

    worker = app.worker(db, concurrency=7, config=FAST)
    assert {c.queue: c.concurrency for c in worker.configs} == {
        "default": 7,
        "emails": 3,
        "reports": 7,
    }
    only = app.worker(db, queues={"reports": 2}, config=FAST)
    assert [(c.queue, c.concurrency) for c in only.configs] == [("reports", 2)]
    async with db.connection() as conn:
        for task in app.tasks.values():
            await task.enqueue(conn)
    await worker.run(until_idle=True)
    assert sorted(done) == ["default", "emails", "reports"]
    assert {q: s.completed for q, s in worker.queue_stats().items()} == {
        "default": 1,
        "emails": 1,
        "reports": 1,
    }


def test_a_task_in_a_script_is_named_after_the_module_the_worker_imports(
    tmp_path: Path,
) -> None:
    """``python shop.py`` and ``python -m shop`` run it as ``__main__``; ``pgenough worker
    run shop:app`` imports it as ``shop``. Its jobs must name what the worker registers."""
    (tmp_path / "shop.py").write_text(
        "from pgenough.core import App\n"
        "app = App()\n"
        "@app.task\n"
        "async def welcome(user: str) -> None: ...\n"
        "print(welcome.name)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    as_script = subprocess.run(
        [sys.executable, "shop.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    as_module = subprocess.run(
        [sys.executable, "-m", "shop"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (as_script.stdout, as_module.stdout) == ("shop.welcome\n", "shop.welcome\n"), (
        as_script.stderr + as_module.stderr
    )


async def test_a_scheduled_task_is_enqueued_once_per_tick_and_run(
    db: AsyncConnectionPool,
) -> None:
    app = App()
    ran: list[float] = []

    @app.periodic(cron="* * * * * *")  # cronsim's six fields: every second
    @app.task(name="tick", queue="cron")
    async def tick() -> None:
        ran.append(asyncio.get_running_loop().time())

    replicas = [app.worker(db, config=FAST, name=f"replica-{n}") for n in range(3)]
    started = asyncio.get_running_loop().time()
    runs = [asyncio.create_task(w.run()) for w in replicas]
    try:
        await wait_until(_at_least(ran, 3), timeout=30, what="three ticks")
    finally:
        for w in replicas:
            w.stop()
        await asyncio.gather(*runs)
    elapsed = asyncio.get_running_loop().time() - started
    async with db.connection() as conn:
        claimed = await (
            await conn.execute("SELECT period FROM pgenough.periodic WHERE name = 'schedule:tick'")
        ).fetchone()
    assert claimed is not None
    # Three replicas, one job per tick: at most one run per second that passed (the first
    # tick may come right after start-up, hence one more).
    assert len(ran) <= elapsed + 1, (len(ran), elapsed)


def _at_least(items: list[Any], n: int) -> Any:
    async def check() -> bool:
        return len(items) >= n

    return check


def test_a_schedule_is_checked_where_it_is_declared() -> None:
    app = App()

    @app.task(name="needs-arg")
    async def needs(arg: int) -> None: ...

    with pytest.raises(TaskArgumentsError, match="missing a required argument: 'arg'"):
        app.periodic(every=60)(needs)
    with pytest.raises(ValueError, match="invalid cron expression"):
        app.periodic(cron="61 * * * *")(app.task(name="a")(lambda: None))
    with pytest.raises(ValueError, match="unknown timezone"):
        app.periodic(cron="0 3 * * *", timezone="Europe/Atlantis")(app.task(name="b")(lambda: None))
    with pytest.raises(ValueError, match="one of them"):
        app.periodic(every=60, cron="0 3 * * *")
    with pytest.raises(TypeError, match=r"above @app\.task"):
        app.periodic(every=60)(lambda: None)  # type: ignore[arg-type]
    assert app.schedules == []
