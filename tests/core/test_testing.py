"""Test mode (``pgenough.core.testing``): ``run_jobs`` runs an app's jobs on the caller's
connection and in its transaction, never committed here (as in a Django ``TestCase`` or a
pytest fixture that rolls back), with a worker's bookkeeping; and an eager app runs each job at
its enqueue. On a sync and an async psycopg connection, and on Django's inside ``atomic()``."""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import App, GiveUp, TaskFailed, complete, fail, get_job
from pgenough.core.admin import list_jobs
from pgenough.core.testing import run_jobs
from tests.core.test_orm import django_ready

pytestmark = pytest.mark.db

__all__ = ["django_ready"]  # the fixture, imported for the Django test below


class Boom(Exception):
    pass


@dataclass
class View:
    page_id: int


def make_app(seen: list[Any], *, eager: bool = False) -> App:
    app = App(eager=eager)

    @app.task(name="plain")
    def plain(order_id: int, tags: list[str] | tuple[str, ...] = ()) -> None:
        seen.append(("plain", order_id, tags))

    @app.task(name="coro", queue="other")
    async def coro(order_id: int) -> None:
        seen.append(("coro", order_id))

    @app.task(name="flaky", max_attempts=2)
    def flaky(order_id: int) -> None:
        raise Boom(f"order {order_id}")

    @app.task(name="refuse")
    def refuse() -> None:
        raise GiveUp("not this one")

    @app.task(name="chain", pass_context=True)
    async def chain(ctx: Any, order_id: int) -> None:
        async with ctx.pool.connection() as conn:
            seen.append(("chain", order_id, ctx.job.attempts))
            if order_id > 0:
                await app.tasks["chain"].enqueue(conn, order_id=order_id - 1)

    @app.task(name="exactly_once", pass_context=True)
    async def exactly_once(ctx: Any, order_id: int) -> None:
        async with ctx.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT email FROM tm_orders WHERE id = %s", [order_id])
            seen.append(("exactly_once", await cur.fetchone()))
            await complete(conn, ctx.job)

    @app.batch_task(View, name="views")
    async def views(conn: psycopg.AsyncConnection[Any], items: list[View]) -> None:
        seen.append(("views", [v.page_id for v in items]))

    return app


@pytest.fixture
def sync_conn(db: AsyncConnectionPool, database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection whose transaction is rolled back at the end, never committed."""
    with psycopg.connect(database_url) as conn:
        yield conn
        conn.rollback()


@pytest.fixture
async def async_conn(
    db: AsyncConnectionPool, database_url: str
) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        yield conn
        await conn.rollback()


def test_run_jobs_runs_the_jobs_of_the_callers_open_transaction(
    sync_conn: psycopg.Connection[Any], database_url: str
) -> None:
    seen: list[Any] = []
    app = make_app(seen)
    plain_id = app.tasks["plain"].enqueue(sync_conn, 1, tags=("a", "b"))
    app.tasks["coro"].enqueue(sync_conn, order_id=2)
    later = app.tasks["plain"].using(delay=3600).enqueue(sync_conn, 3)
    app.tasks["plain"].using(queue="elsewhere").enqueue(sync_conn, 4)

    report = run_jobs(sync_conn, app, queues=["default", "other"])

    # The arguments as a worker gives them: through JSON (a tuple arrives as a list).
    assert seen == [("plain", 1, ["a", "b"]), ("coro", 2)]
    assert report.completed_kinds == ["plain", "coro"] and report.failed == []
    assert report.runs[0].id == plain_id and report.runs[0].attempt == 1
    assert get_job(sync_conn, plain_id) is None  # completed: deleted, as a worker does
    left = {(j.payload["order_id"], j.state) for j in list_jobs(sync_conn)}
    assert left == {(3, "ready"), (4, "ready")}  # scheduled; another queue
    # Nothing was committed: another connection sees no job at all.
    with psycopg.connect(database_url) as other:
        assert list_jobs(other) == []

    report = run_jobs(sync_conn, app, include_scheduled=True)
    assert report.runs[-1].id == later  # in the order a worker claims: due first
    assert [s[1] for s in seen[2:]] == [4, 3]


def test_a_failure_is_recorded_as_a_worker_would_and_raised(
    sync_conn: psycopg.Connection[Any],
) -> None:
    seen: list[Any] = []
    app = make_app(seen)
    flaky_id = app.tasks["flaky"].enqueue(sync_conn, 7)
    refuse_id = app.tasks["refuse"].enqueue(sync_conn)
    app.tasks["plain"].enqueue(sync_conn, 8)

    with pytest.raises(Boom, match="order 7"):
        run_jobs(sync_conn, app)
    assert seen == [("plain", 8, ())]  # every job ran before the first error was raised
    flaky = get_job(sync_conn, flaky_id)
    assert flaky is not None
    assert (flaky.state, flaky.attempts, flaky.last_error) == ("ready", 1, "Boom: order 7")
    refused = get_job(sync_conn, refuse_id)
    assert refused is not None and (refused.state, refused.last_error) == (
        "dead",
        "gave up: not this one",
    )
    # Its retry is scheduled (backoff): run again only with include_scheduled, then dead.
    report = run_jobs(sync_conn, app, include_scheduled=True, raise_on_failure=False)
    [run] = report.failed
    assert (run.id, run.attempt, run.state, run.error) == (flaky_id, 2, "dead", "Boom: order 7")
    assert isinstance(run.exception, Boom)
    # The caller's transaction is still usable.
    assert sync_conn.execute("SELECT 1").fetchone() == (1,)


def test_an_async_pass_context_task_on_a_sync_connection_says_what_it_needs(
    sync_conn: psycopg.Connection[Any],
) -> None:
    seen: list[Any] = []
    app = make_app(seen)
    # An async pass_context task on a sync connection has no async connection to lend.
    app.tasks["chain"].enqueue(sync_conn, order_id=1)
    with pytest.raises(TypeError, match=r"ctx\.pool\.connection\(\) has no async connection"):
        run_jobs(sync_conn, app)


async def test_run_jobs_on_an_async_connection(async_conn: psycopg.AsyncConnection[Any]) -> None:
    seen: list[Any] = []
    app = make_app(seen)
    await async_conn.execute("CREATE TABLE tm_orders (id int PRIMARY KEY, email text)")
    await async_conn.execute("INSERT INTO tm_orders VALUES (5, 'a@example.com')")  # uncommitted
    await app.tasks["exactly_once"].enqueue(async_conn, order_id=5)
    await app.tasks["views"].enqueue(async_conn, page_id=9)
    await app.tasks["plain"].enqueue(async_conn, 6)
    await app.tasks["chain"].enqueue(async_conn, order_id=2)

    report = await run_jobs(async_conn, app, kinds=["exactly_once", "views", "plain"])
    assert seen[:3] == [("exactly_once", ("a@example.com",)), ("views", [9]), ("plain", 6, ())]
    assert len(report.completed) == 3

    report = await run_jobs(async_conn, app, limit=2)  # the chain: 2, 1, then 0 is left
    assert seen[3:] == [("chain", 2, 1), ("chain", 1, 1)]
    assert report.stopped_at_limit
    assert [j.payload for j in await list_jobs(async_conn)] == [{"order_id": 0}]
    assert not (await run_jobs(async_conn, app)).stopped_at_limit
    assert await list_jobs(async_conn) == []
    with pytest.raises(ValueError, match="no task of this app is named 'nope'"):
        await run_jobs(async_conn, app, kinds=["nope"])


async def test_a_failure_the_task_recorded_as_its_outcome_is_kept_reported_and_raised(
    async_conn: psycopg.AsyncConnection[Any],
) -> None:
    """``TaskFailed`` (as the django.tasks backend raises for a FAILED result), after the
    task's own ``fail`` or without it: what the attempt wrote stays, the job is dead (never
    retried), the run is ``dead`` and the task's own error is raised."""
    app = App()
    modes: list[bool] = []

    @app.task(name="recorded", pass_context=True)
    async def recorded(ctx: Any, order_id: int) -> None:
        modes.append(ctx.test_mode)
        try:
            raise Boom(f"order {order_id}")
        except Boom as exc:
            async with ctx.pool.connection() as conn:
                await conn.execute("INSERT INTO tm_outcomes VALUES (%s)", [order_id])
                if order_id == 1:
                    await fail(conn, ctx.job, exc)  # the outcome and the job's end, together
            raise TaskFailed from exc

    await async_conn.execute("CREATE TABLE tm_outcomes (id int)")
    first = await recorded.enqueue(async_conn, order_id=1)
    second = await recorded.enqueue(async_conn, order_id=2)

    with pytest.raises(Boom, match="order 1") as raised:
        await run_jobs(async_conn, app, ids=[first])  # that one alone
    assert "raise Boom" in "".join(traceback.format_exception(raised.value))  # the task's
    report = await run_jobs(async_conn, app, raise_on_failure=False)
    [run] = report.runs
    assert (run.id, run.state, run.error) == (second, "dead", "Boom: order 2")
    assert isinstance(run.exception, Boom)
    assert report.failed == [run] and report.completed_kinds == []
    assert modes == [True, True]
    cur = await async_conn.execute("SELECT id FROM tm_outcomes ORDER BY id")
    assert await cur.fetchall() == [(1,), (2,)]  # kept, not rolled back
    jobs = await list_jobs(async_conn)
    assert sorted((j.id, j.state) for j in jobs) == [(first, "dead"), (second, "dead")]
    assert all("raise Boom" in (j.errors[-1].traceback or "") for j in jobs)


def test_a_batch_task_on_a_sync_connection_says_what_it_needs(
    sync_conn: psycopg.Connection[Any],
) -> None:
    app = make_app([])
    app.tasks["views"].enqueue(sync_conn, page_id=1)
    with pytest.raises(TypeError, match="batch task 'views' runs on an async connection"):
        run_jobs(sync_conn, app)


async def test_an_eager_app_runs_each_job_at_its_enqueue(
    async_conn: psycopg.AsyncConnection[Any],
    sync_conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []
    app = make_app(seen, eager=True)
    job_id = app.tasks["plain"].enqueue(sync_conn, 1, tags=("x",))
    assert seen == [("plain", 1, ["x"])] and job_id is not None
    assert get_job(sync_conn, job_id) is None  # ran and completed
    with pytest.raises(Boom):
        app.tasks["flaky"].enqueue(sync_conn, 2)
    assert [j.state for j in list_jobs(sync_conn)] == ["ready"]  # its failure recorded

    await app.tasks["chain"].enqueue(async_conn, order_id=1)  # the chained enqueue is eager too
    assert seen[1:] == [("chain", 1, 1), ("chain", 0, 1)]
    assert await app.tasks["plain"].enqueue_many(async_conn, [{"order_id": 3}]) == 1
    assert seen[-1] == ("plain", 3, ())
    assert await list_jobs(async_conn) == []

    monkeypatch.setenv("PGENOUGH_EAGER", "1")
    assert App().eager
    monkeypatch.setenv("PGENOUGH_EAGER", "no")
    assert not App().eager
    monkeypatch.setenv("PGENOUGH_EAGER", "maybe")
    with pytest.raises(ValueError, match="PGENOUGH_EAGER='maybe'"):
        App()


# -- Django: a TestCase's way (atomic, never committed) ----------------------------------------


def test_django_jobs_enqueued_in_atomic_run_without_a_commit(
    db: AsyncConnectionPool, django_ready: None
) -> None:
    from django.db import connection, transaction

    from pgenough.core.orm import django_connection
    from tests.helpers.djangoshop.models import Order

    with connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS django_orders")
    with connection.schema_editor() as editor:
        editor.create_model(Order)

    app = App()
    shipped: list[str] = []

    @app.task(name="ship")
    def ship(order_id: int) -> None:
        # Django's own ORM, in the test's transaction: it sees the uncommitted order.
        shipped.append(Order.objects.get(id=order_id).email)
        Order.objects.filter(id=order_id).update(email="shipped")

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():  # as a TestCase wraps each test
        order = Order.objects.create(email="a@example.com")
        ship.enqueue(django_connection(), order_id=order.id)
        report = run_jobs(django_connection(), app)
        assert report.completed_kinds == ["ship"] and shipped == ["a@example.com"]
        assert Order.objects.get(id=order.id).email == "shipped"
        raise Rollback
    assert not Order.objects.exists()
    assert list_jobs(django_connection()) == []


async def test_sqlalchemy_sessions_run_their_jobs_in_their_transaction(
    db: AsyncConnectionPool, database_url: str
) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    from pgenough.core.orm import sqlalchemy_async_connection, sqlalchemy_connection
    from tests.core.test_orm import sa_async_engine, sa_engine

    seen: list[Any] = []
    app = make_app(seen)
    engine = sa_engine(database_url)
    try:
        with Session(engine) as session:
            app.tasks["plain"].enqueue(sqlalchemy_connection(session), 1)
            report = run_jobs(sqlalchemy_connection(session), app)
            assert report.completed_kinds == ["plain"]
            session.rollback()
    finally:
        engine.dispose()
    async_engine = sa_async_engine(database_url)
    try:
        async with AsyncSession(async_engine) as asession:
            await app.tasks["coro"].enqueue(await sqlalchemy_async_connection(asession), 2)
            report = await run_jobs(await sqlalchemy_async_connection(asession), app)
            assert report.completed_kinds == ["coro"]
            await asession.rollback()
    finally:
        await async_engine.dispose()
    assert seen == [("plain", 1, ()), ("coro", 2)]
    async with db.connection() as conn:
        assert await list_jobs(conn) == []
