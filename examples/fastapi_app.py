"""A FastAPI app on SQLAlchemy's asyncio ORM: the job is enqueued in the request's transaction.

Install: ``pip install . fastapi uvicorn httpx 'sqlalchemy[asyncio]>=2'`` (from a checkout)

1. ``POST /orders`` adds an ``Order`` in the request's ``AsyncSession`` (a FastAPI
   dependency) and enqueues ``confirm_order`` on the psycopg connection under it
   (``await sqlalchemy_async_connection(session)``): both commit with the session's
   transaction, or neither does: an out-of-stock order answers 409 and leaves no order and
   no job.
2. The worker (``app.worker(pool)``, or ``pgenough worker run examples.fastapi_app:app``)
   confirms the order in an ``AsyncSession`` of its own and completes the job in the same
   transaction: exactly once.

``python examples/fastapi_app.py`` serves it with uvicorn on a free port, places a few orders
over HTTP, runs the worker until they are confirmed and prints what happened
(``--keep-running`` leaves the API up). docs/guides/sqlalchemy.md walks through the same code.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated
from urllib.parse import quote

import httpx
import uvicorn
from fastapi import Depends, FastAPI, HTTPException
from psycopg.conninfo import conninfo_to_dict
from pydantic import BaseModel, Field
from sqlalchemy import String, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from pgenough.core import App, TaskContext, complete, database_url, migrate, open_pool
from pgenough.core.orm import sqlalchemy_async_connection

app = App()
Session = async_sessionmaker(expire_on_commit=False)  # bound to the engine at start-up
OUT_OF_STOCK = "sold-out-item"


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "fastapi_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(200))
    quantity: Mapped[int]
    status: Mapped[str] = mapped_column(String(20), default="PENDING")


@app.task(queue="orders", max_attempts=5, pass_context=True)
async def confirm_order(ctx: TaskContext, order_id: int) -> None:
    async with Session() as session, session.begin():
        order = await session.get(Order, order_id, with_for_update=True)
        if order is not None and order.status == "PENDING":
            order.status = "CONFIRMED"
        await session.flush()  # the UPDATE, before the completion in the same transaction
        await complete(await sqlalchemy_async_connection(session), ctx.job)


def sqlalchemy_url(url: str) -> str:
    """DATABASE_URL (a URL or a key=value string) for SQLAlchemy's psycopg 3 dialect."""
    pg = conninfo_to_dict(url)
    user = quote(str(pg.get("user", "")), safe="")
    password = f":{quote(str(pg['password']), safe='')}" if pg.get("password") else ""
    query = f"?host={quote(str(pg['host']), safe='')}" if pg.get("host") else ""
    port = f"&port={pg['port']}" if pg.get("port") and query else ""
    return f"postgresql+psycopg://{user}{password}@/{pg.get('dbname', '')}{query}{port}"


async def get_session() -> AsyncIterator[AsyncSession]:
    async with Session() as session:
        yield session


class OrderIn(BaseModel):
    item: str = Field(min_length=1, max_length=200)
    quantity: int = Field(default=1, ge=1, le=1000)


class OrderOut(BaseModel):
    id: int
    status: str
    job_id: int | None


def create_api(url: str) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine = create_async_engine(sqlalchemy_url(url))
        Session.configure(bind=engine)
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        yield
        await engine.dispose()

    api = FastAPI(title="pgenough FastAPI example", lifespan=lifespan)

    @api.post("/orders", status_code=202)
    async def place_order(
        order: OrderIn, session: Annotated[AsyncSession, Depends(get_session)]
    ) -> OrderOut:
        async with session.begin():  # commits at the end of the block, or rolls back
            row = Order(item=order.item, quantity=order.quantity)
            session.add(row)
            await session.flush()  # the INSERT, so the order has its id
            job_id = await confirm_order.using(dedupe_key=f"confirm:{row.id}").enqueue(
                await sqlalchemy_async_connection(session), order_id=row.id
            )
            if order.item == OUT_OF_STOCK:
                # Raised inside the transaction: the order and its job roll back together.
                raise HTTPException(409, f"{order.item} is out of stock")
        return OrderOut(id=row.id, status=row.status, job_id=job_id)

    return api


async def run(url: str, *, orders: int, port: int, keep_running: bool) -> int:
    pool = await open_pool(url, max_size=4, name="fastapi-example")
    async with pool.connection() as conn:
        await migrate(conn)
    try:
        sock = socket.create_server(("127.0.0.1", port))
    except OSError as exc:
        await pool.close()
        print(f"error: cannot listen on 127.0.0.1:{port}: {exc.strerror}", file=sys.stderr)
        return 1
    server = uvicorn.Server(uvicorn.Config(create_api(url), log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                return 1
            await asyncio.sleep(0.05)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        print(f"API on {base} (docs: {base}/docs)")
        placed: list[int] = []
        async with httpx.AsyncClient(base_url=base) as client:
            for n in range(1, orders + 1):
                resp = await client.post("/orders", json={"item": f"ticket-{n}", "quantity": n})
                resp.raise_for_status()
                placed.append(resp.json()["id"])
                print(f"placed: order {resp.json()['id']} PENDING (job {resp.json()['job_id']})")
            resp = await client.post("/orders", json={"item": OUT_OF_STOCK})
            print(f"refused: {resp.status_code} {resp.json()['detail']} (no order, no job)")
        stats = await app.worker(pool).run(until_idle=True)
        print(f"worker: {stats.completed} completed")
        async with Session() as session:
            found = await session.scalars(select(Order.status).where(Order.id.in_(placed)))
        print(f"orders placed: {len(placed)}, confirmed: {list(found).count('CONFIRMED')}")
        if keep_running:
            print(f"try: curl -X POST {base}/orders -H 'content-type: application/json'", end="")
            print(' -d \'{"item": "book"}\'   (Ctrl-C to stop)')
            await serving
    finally:
        server.should_exit = True
        await asyncio.gather(serving, return_exceptions=True)
        await pool.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=3)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--keep-running", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        return asyncio.run(
            run(
                database_url(os.environ.get("DATABASE_URL")),
                orders=args.orders,
                port=args.port,
                keep_running=args.keep_running,
            )
        )
    except KeyboardInterrupt:  # Ctrl-C: uvicorn stopped, run() closed the pool
        return 130


if __name__ == "__main__":
    sys.exit(main())
