"""The ORM adapters (core/orm.py) against the real libraries on a real PostgreSQL: SQLAlchemy 2
(Session and Connection, sync and asyncio) and Django (``transaction.atomic`` on Django's own
connection).

The contract, for each: the job exists if and only if the ORM's transaction commits (with the
ORM's own row); a rollback leaves neither; the NOTIFY that wakes a worker is delivered only at
commit. A real worker, polling every 60 s so that only a notification can wake it, is idle and
listening throughout: it must not run the job while the transaction is open, and must run it
promptly once it commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool
from sqlalchemy import String, create_engine, insert
from sqlalchemy import select as sa_select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pgenough.core import App, WorkerConfig, get_job
from pgenough.core.admin import list_jobs
from pgenough.core.orm import django_connection, sqlalchemy_async_connection, sqlalchemy_connection
from pgenough.core.queue import JOBS_CHANNEL

pytestmark = pytest.mark.db

QUEUE = "orm"
QUIET = 0.3
"""How long the listener must stay silent while a transaction is open (a negative check)."""

app = App()
ran: asyncio.Queue[int] = asyncio.Queue()


@app.task(queue=QUEUE)
async def ship(order_id: int) -> None:
    ran.put_nowait(order_id)


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "sa_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200))


# -- the harness -------------------------------------------------------------------------------


Pause = Callable[[], Awaitable[None]]
SyncPause = Callable[[], None]


@dataclass
class Listener:
    """A plain LISTEN on the jobs channel, the one workers use."""

    conn: psycopg.Connection[Any]

    def heard(self, timeout: float) -> list[str]:
        got = [n.payload for n in self.conn.notifies(timeout=timeout, stop_after=1)]
        return [p for p in got if p == QUEUE]


@pytest.fixture
async def harness(db: AsyncConnectionPool, database_url: str) -> AsyncIterator[Harness]:
    while not ran.empty():
        ran.get_nowait()
    async with db.connection() as conn:
        await conn.execute("DROP TABLE IF EXISTS sa_orders")
        await conn.execute("CREATE TABLE sa_orders (id serial PRIMARY KEY, email text)")
    worker = app.worker(db, config=WorkerConfig(poll_interval=60.0, maintenance=None))
    task = asyncio.create_task(worker.run())
    await worker.wait_listening()
    with psycopg.connect(database_url, autocommit=True) as listen:
        listen.execute(f"LISTEN {JOBS_CHANNEL}")
        yield Harness(database_url, Listener(listen))
    worker.stop()
    await task


@dataclass
class Harness:
    url: str
    listener: Listener

    async def check_open(self) -> None:
        """While the ORM's transaction is open: no notification, the worker idle."""
        heard = await asyncio.to_thread(self.listener.heard, QUIET)
        assert heard == [], "a NOTIFY was delivered before the commit"
        assert ran.empty(), "the worker ran the job before the commit"

    def sync_pause(self, loop: asyncio.AbstractEventLoop) -> SyncPause:
        def pause() -> None:
            asyncio.run_coroutine_threadsafe(self.check_open(), loop).result(timeout=30)

        return pause

    async def after(self, committed: bool, order_table: str) -> None:
        if committed:
            heard = await asyncio.to_thread(self.listener.heard, 10.0)
            assert heard == [QUEUE]
            order_id = await asyncio.wait_for(ran.get(), 10.0)
        else:
            assert await asyncio.to_thread(self.listener.heard, QUIET) == []
            assert ran.empty()
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            cur = await conn.execute(f"SELECT id FROM {order_table}")
            orders = [r[0] for r in await cur.fetchall()]
            cur = await conn.execute("SELECT count(*) FROM pgenough.jobs WHERE queue = %s", [QUEUE])
            row = await cur.fetchone()
        if committed:
            assert orders == [order_id]  # the job carried the order's id, committed with it
        else:
            assert orders == []
            assert row == (0,), "a job outlived the rollback"


def sa_engine(url: str) -> Any:
    # SQLAlchemy on psycopg 3, on whatever conninfo the suite uses.
    return create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url))


def sa_async_engine(url: str) -> AsyncEngine:
    return create_async_engine(
        "postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(url)
    )


COMMIT = pytest.mark.parametrize("committed", [True, False], ids=["commit", "rollback"])


# -- SQLAlchemy --------------------------------------------------------------------------------


@COMMIT
async def test_sqlalchemy_session(harness: Harness, committed: bool) -> None:
    def body(pause: SyncPause) -> None:
        engine = sa_engine(harness.url)
        with Session(engine) as session:
            order = Order(email="ann@example.com")
            session.add(order)
            session.flush()
            ship.enqueue(sqlalchemy_connection(session), order_id=order.id)
            pause()
            if committed:
                session.commit()
            else:
                session.rollback()
        engine.dispose()

    await asyncio.to_thread(body, harness.sync_pause(asyncio.get_running_loop()))
    await harness.after(committed, "sa_orders")


@COMMIT
async def test_sqlalchemy_connection_enqueue_first(harness: Harness, committed: bool) -> None:
    """The job is the first thing done on the connection: the adapter begins SQLAlchemy's
    transaction, so ``conn.commit()`` commits the job and ``rollback()`` removes it."""

    def body(pause: SyncPause) -> None:
        engine = sa_engine(harness.url)
        with engine.connect() as conn:
            next_id = conn.execute(sa_select(Order.id)).first()  # nothing yet
            assert next_id is None
            conn.rollback()
            raw = sqlalchemy_connection(conn)
            ship.enqueue(raw, order_id=1)
            conn.execute(insert(Order).values(id=1, email="bob@example.com"))
            pause()
            if committed:
                conn.commit()
            else:
                conn.rollback()
        engine.dispose()

    await asyncio.to_thread(body, harness.sync_pause(asyncio.get_running_loop()))
    await harness.after(committed, "sa_orders")


async def test_sqlalchemy_connection_closed_without_commit_keeps_nothing(harness: Harness) -> None:
    def body() -> None:
        engine = sa_engine(harness.url)
        with engine.connect() as conn:
            ship.enqueue(sqlalchemy_connection(conn), order_id=5)
        engine.dispose()

    await asyncio.to_thread(body)
    await harness.after(False, "sa_orders")


@COMMIT
async def test_sqlalchemy_async_session(harness: Harness, committed: bool) -> None:
    engine = sa_async_engine(harness.url)
    async with AsyncSession(engine) as session:
        order = Order(email="cy@example.com")
        session.add(order)
        await session.flush()
        await ship.enqueue(await sqlalchemy_async_connection(session), order_id=order.id)
        await harness.check_open()
        if committed:
            await session.commit()
        else:
            await session.rollback()
    await engine.dispose()
    await harness.after(committed, "sa_orders")


@COMMIT
async def test_sqlalchemy_async_connection(harness: Harness, committed: bool) -> None:
    engine = sa_async_engine(harness.url)
    async with engine.connect() as conn:
        await ship.enqueue_many(await sqlalchemy_async_connection(conn), [{"order_id": 2}])
        await conn.execute(insert(Order).values(id=2, email="dee@example.com"))
        await harness.check_open()
        if committed:
            await conn.commit()
        else:
            await conn.rollback()
    await engine.dispose()
    await harness.after(committed, "sa_orders")


async def test_sqlalchemy_connection_commit_of_only_a_job(harness: Harness) -> None:
    """Nothing but the job on a fresh connection, then ``conn.commit()``: SQLAlchemy must
    know its transaction began, or its commit would do nothing and the pool's reset on
    return would roll the job back."""

    def body() -> None:
        engine = sa_engine(harness.url)
        with engine.connect() as conn:
            ship.enqueue(sqlalchemy_connection(conn), order_id=6)
            conn.commit()
        engine.dispose()

    await asyncio.to_thread(body)
    assert await asyncio.wait_for(ran.get(), 10.0) == 6


def test_sqlalchemy_on_another_driver_is_refused_with_the_fix() -> None:
    engine = create_engine("sqlite://")  # a driver that is not psycopg 3
    with Session(engine) as session, pytest.raises(TypeError, match="postgresql\\+psycopg://"):
        sqlalchemy_connection(session)


# -- Django ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def django_ready(database_url: str) -> Iterator[None]:
    import django
    from django.conf import settings

    params = conninfo_to_dict(database_url)
    if not settings.configured:
        settings.configure(
            DATABASES={
                "default": {
                    "ENGINE": "django.db.backends.postgresql",
                    "NAME": params["dbname"],
                    "USER": params.get("user", ""),
                    "PASSWORD": params.get("password", ""),
                    "HOST": params.get("host", ""),
                    "PORT": params.get("port", ""),
                }
            },
            INSTALLED_APPS=["tests.helpers.djangoshop"],
            USE_TZ=True,
        )
        django.setup()
    yield


def _django_table() -> None:
    from django.db import connection

    from tests.helpers.djangoshop.models import Order as DjangoOrder

    with connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS django_orders")
    with connection.schema_editor() as editor:
        editor.create_model(DjangoOrder)


@COMMIT
async def test_django_atomic(harness: Harness, django_ready: None, committed: bool) -> None:
    class Rollback(Exception):
        pass

    def body(pause: SyncPause) -> None:
        from django.db import connection, transaction

        from tests.helpers.djangoshop.models import Order as DjangoOrder

        _django_table()
        try:
            with transaction.atomic():
                # The job first: Django's atomic() has begun nothing on the connection yet.
                conn = django_connection()
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                ship.enqueue_many(conn, [{"order_id": 1}])
                order = DjangoOrder.objects.create(id=1, email="eve@example.com")
                assert order.pk == 1
                pause()
                if not committed:
                    raise Rollback
        except Rollback:
            pass
        connection.close()

    await asyncio.to_thread(body, harness.sync_pause(asyncio.get_running_loop()))
    await harness.after(committed, "django_orders")


async def test_django_autocommit_outside_atomic(harness: Harness, django_ready: None) -> None:
    """Outside atomic(), Django runs in autocommit: the job commits at once, as Django's own
    queries do."""

    def body() -> None:
        from django.db import connection

        from tests.helpers.djangoshop.models import Order as DjangoOrder

        _django_table()
        DjangoOrder.objects.create(id=3, email="fay@example.com")
        job_id = ship.enqueue(django_connection(), order_id=3)
        assert job_id is not None
        later = ship.using(delay=3600).enqueue(django_connection(), order_id=4)
        assert later is not None
        # Django loads jsonb as text on its connections; the core's reads still get JSON.
        record = get_job(django_connection(), later)
        assert record is not None and record.payload == {"order_id": 4}
        ready = list_jobs(django_connection(), state="ready")  # order 3's too, if not run yet
        assert {"order_id": 4} in [j.payload for j in ready]
        assert all(isinstance(j.payload, dict) for j in ready)
        with connection.cursor() as cur:  # and Django's own cursors are as Django set them
            cur.execute("SELECT '{\"a\": 1}'::jsonb")
            assert cur.fetchone() == ('{"a": 1}',)
        connection.close()

    await asyncio.to_thread(body)
    await harness.after(True, "django_orders")


async def test_django_savepoint_rollback_removes_only_its_job(
    harness: Harness, django_ready: None
) -> None:
    """A nested atomic() is a savepoint: rolling it back takes its job with it."""

    def body() -> None:
        from django.db import connection, transaction

        from tests.helpers.djangoshop.models import Order as DjangoOrder

        _django_table()
        with transaction.atomic():
            DjangoOrder.objects.create(id=4, email="gus@example.com")
            ship.enqueue(django_connection(), order_id=4)
            try:
                with transaction.atomic():
                    ship.enqueue(django_connection(), order_id=99)
                    raise RuntimeError("inner")
            except RuntimeError:
                pass
        connection.close()

    await asyncio.to_thread(body)
    await harness.after(True, "django_orders")
    assert ran.empty(), "the job of the rolled-back savepoint ran"
