"""Errors a user can act on, each as a user meets it: the SQLAlchemy adapter of the wrong kind
for the session, a forgotten ``await`` on an async enqueue, a misspelled keyword, a database
never migrated (sync and async, in a transaction and in autocommit)."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.ext.asyncio import AsyncSession, async_scoped_session, async_sessionmaker
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from pgenough.core import App, NewJob, PgenoughError, enqueue_many, get_job, publish
from pgenough.core.admin import list_jobs
from pgenough.core.errors import MigrationError, SchemaMissing
from pgenough.core.orm import sqlalchemy_async_connection, sqlalchemy_connection
from pgenough.core.tasks import TaskArgumentsError
from tests.core.test_orm import sa_async_engine, sa_engine

app = App()


@app.task(name="shop.send_receipt")
async def send_receipt(order_id: int, to: str = "") -> None: ...


@dataclass
class View:
    page_id: int
    user_id: int


@app.batch_task(View, name="shop.record_views")
async def record_views(conn: psycopg.AsyncConnection[Any], views: list[View]) -> None: ...


# -- 1. the SQLAlchemy adapter of the other kind --------------------------------------------------


@pytest.mark.db
async def test_the_sync_adapter_given_an_async_session_names_the_async_one(
    database_url: str,
) -> None:
    engine = sa_async_engine(database_url)
    try:
        async with AsyncSession(engine) as session:
            with pytest.raises(
                TypeError,
                match=r"got a SQLAlchemy AsyncSession: use await"
                r" sqlalchemy_async_connection\(\.\.\.\)",
            ):
                sqlalchemy_connection(session)  # type: ignore[arg-type]
        async with engine.connect() as conn:
            with pytest.raises(TypeError, match="AsyncConnection: use await sqlalchemy_async"):
                sqlalchemy_connection(conn)  # type: ignore[arg-type]
    finally:
        await engine.dispose()


@pytest.mark.db
async def test_the_async_adapter_given_a_sync_session_names_the_sync_one(
    database_url: str,
) -> None:
    engine = sa_engine(database_url)
    try:
        with (
            Session(engine) as session,
            pytest.raises(
                TypeError,
                match=r"got a SQLAlchemy Session: use"
                r" sqlalchemy_connection\(\.\.\.\)",
            ),
        ):
            await sqlalchemy_async_connection(session)  # type: ignore[arg-type]
        with (
            engine.connect() as conn,
            pytest.raises(TypeError, match="got a SQLAlchemy Connection: use sqlalchemy_c"),
        ):
            await sqlalchemy_async_connection(conn)  # type: ignore[arg-type]
    finally:
        engine.dispose()
    with pytest.raises(TypeError, match="takes a SQLAlchemy Session or Connection, not builtins"):
        sqlalchemy_connection("postgresql://")  # type: ignore[arg-type]


@pytest.mark.db
async def test_a_scoped_session_is_taken_for_the_session_it_holds(
    db: AsyncConnectionPool, database_url: str
) -> None:
    engine = sa_engine(database_url)
    scoped = scoped_session(sessionmaker(engine))
    try:
        conn = sqlalchemy_connection(scoped)  # type: ignore[arg-type]
        assert isinstance(conn, psycopg.Connection)
        assert send_receipt.enqueue(conn, 1) is not None  # in the session's transaction
        scoped.rollback()  # so the job goes with it
        async with db.connection() as check:
            assert await list_jobs(check) == []
    finally:
        scoped.remove()
        engine.dispose()
    async_engine = sa_async_engine(database_url)
    async_scoped = async_scoped_session(
        async_sessionmaker(async_engine), scopefunc=asyncio.current_task
    )
    try:
        aconn = await sqlalchemy_async_connection(async_scoped)  # type: ignore[arg-type]
        assert isinstance(aconn, psycopg.AsyncConnection)
    finally:
        await async_scoped.remove()
        await async_engine.dispose()


# -- 2. a forgotten await ---------------------------------------------------------------------


def _unawaited(make: Any) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
        gc.collect()
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.db
async def test_a_forgotten_await_says_which_call_enqueued_nothing(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        calls = {
            "send_receipt.enqueue(...) was never awaited: no job was enqueued": lambda: (
                send_receipt.enqueue(conn, 1)
            ),
            "send_receipt.enqueue_many(...) was never awaited: no job was enqueued": lambda: (
                send_receipt.enqueue_many(conn, [{"order_id": 2}])
            ),
            "record_views.enqueue(...) was never awaited": lambda: record_views.enqueue(
                conn, page_id=1, user_id=2
            ),
            "enqueue_many(...) was never awaited": lambda: enqueue_many(conn, [NewJob("k")]),
            "publish(...) was never awaited": lambda: publish(conn, "c", "hello"),
        }
        for expected, make in calls.items():
            caught = _unawaited(make)
            assert [str(w.message) for w in caught][:1] == [expected] or (
                caught and str(caught[0].message).startswith(expected)
            ), [str(w.message) for w in caught]
            assert len(caught) == 1, "Python's own warning (run_async) is silenced"
            assert caught[0].filename == __file__  # the line of the call, not pgenough's
        assert await list_jobs(conn) == []
        # Awaited (directly, or as a task) it runs and says nothing.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert await send_receipt.enqueue(conn, 3) is not None
            gc.collect()


# -- 3. a misspelled keyword --------------------------------------------------------------------


def test_a_misspelled_keyword_is_named_with_the_close_match() -> None:
    with pytest.raises(TaskArgumentsError) as caught:
        send_receipt.job(orderid=7)  # type: ignore[call-arg]
    assert str(caught.value) == (
        "task 'shop.send_receipt': unexpected keyword argument 'orderid'"
        " (did you mean 'order_id'?); its parameters: order_id, to"
    )
    with pytest.raises(TaskArgumentsError, match=r"'user_di' \(did you mean 'user_id'\?\)"):
        record_views.job(page_id=1, user_di=2)  # type: ignore[call-arg]
    with pytest.raises(TaskArgumentsError, match=r"unexpected keyword argument 'colour';"):
        send_receipt.job(order_id=1, colour="red")  # type: ignore[call-arg]


# -- 4. a database never migrated ---------------------------------------------------------------


@pytest.fixture
def bare_url(database_url: str) -> Iterator[str]:
    """A database of its own, with no pgenough schema."""
    name = f"bare_{id(object()) % 10**9}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(database_url, dbname=name)
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


MIGRATE = r"run `pgenough migrate` \(or `manage.py migrate` with pgenough.contrib.django"
ABORTED = "aborted the transaction open on this connection: roll it back"


@pytest.mark.db
def test_a_missing_schema_says_to_migrate_on_a_sync_connection(bare_url: str) -> None:
    calls = [
        lambda c: send_receipt.enqueue(c, 1),
        lambda c: send_receipt.enqueue_many(c, [{"order_id": 1}]),
        lambda c: get_job(c, 1),
        lambda c: list_jobs(c),
        lambda c: publish(c, "c", "x" * 100_000),  # stored: a small one is a NOTIFY
    ]
    with psycopg.connect(bare_url, autocommit=True) as conn:
        for call in calls:
            with pytest.raises(SchemaMissing, match=MIGRATE) as caught:
                call(conn)
            assert ABORTED not in str(caught.value)  # autocommit: nothing to roll back
            assert isinstance(caught.value, MigrationError | PgenoughError)
            assert isinstance(caught.value.__cause__, psycopg.errors.ProgrammingError)
    with psycopg.connect(bare_url) as conn:
        conn.execute("SELECT 1")  # the caller's transaction is open
        with pytest.raises(SchemaMissing, match=ABORTED):
            send_receipt.enqueue(conn, 1)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        conn.rollback()
        # enqueue_many's statements run in a savepoint: the caller's transaction is usable.
        with pytest.raises(SchemaMissing) as caught:
            send_receipt.enqueue_many(conn, [{"order_id": 1}])
        assert ABORTED not in str(caught.value)
        assert conn.execute("SELECT 2").fetchone() == (2,)


@pytest.mark.db
async def test_a_missing_schema_says_to_migrate_on_an_async_connection(bare_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(bare_url) as conn:
        await conn.execute("SELECT 1")
        with pytest.raises(SchemaMissing, match=f"{MIGRATE}.*{ABORTED}"):
            await send_receipt.enqueue(conn, 1)
        await conn.rollback()
        await conn.set_autocommit(True)
        for call in (
            lambda: send_receipt.enqueue_many(conn, [{"order_id": 1}]),
            lambda: get_job(conn, 1),
            lambda: list_jobs(conn, state="dead"),
            lambda: publish(conn, "c", "x" * 100_000),
        ):
            with pytest.raises(SchemaMissing, match=MIGRATE):
                await call()
