"""Order checkout on PostgreSQL alone: the example pgenough grew from.

1. An HTTP handler (``POST /orders``) saves the order as PENDING and enqueues the
   ``confirm_order`` task *in the same transaction*: there is never an order without its job,
   nor a job without its order. An order that cannot be taken (out of stock) rolls back with
   its job: neither exists.
2. A worker (``app.worker(pool)``) runs the task: it marks the order CONFIRMED, publishes
   ``orders-confirmed`` and completes the job - again in one transaction, so the confirmation
   happens exactly once.
3. A subscriber prints each confirmation as it is committed.

The same story on a SQLAlchemy ORM model: ``examples/checkout_sqlalchemy.py``.

Run it with no set-up (an embedded PostgreSQL starts when ``DATABASE_URL`` is unset)::

    python examples/checkout.py            # or: pgenough demo
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys

import httpx
import uvicorn
from fastapi import FastAPI, HTTPException
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, Field

from pgenough.core import (
    App,
    Gap,
    TaskContext,
    WorkerConfig,
    complete,
    database_url,
    migrate,
    open_pool,
    publish,
    subscribe,
)

app = App()
OUT_OF_STOCK = "sold-out-item"

SCHEMA = """
CREATE SCHEMA IF NOT EXISTS checkout;
CREATE TABLE IF NOT EXISTS checkout.orders (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item          text NOT NULL,
    quantity      integer NOT NULL CHECK (quantity > 0),
    status        text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'CONFIRMED')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    confirmed_at  timestamptz
)
"""


class OrderIn(BaseModel):
    item: str = Field(min_length=1, max_length=200)
    quantity: int = Field(default=1, ge=1, le=1000)


class OrderOut(BaseModel):
    id: int
    status: str
    job_id: int | None


@app.task(queue="orders", max_attempts=5, pass_context=True)
async def confirm_order(ctx: TaskContext, order_id: int) -> None:
    async with ctx.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "UPDATE checkout.orders SET status = 'CONFIRMED', confirmed_at = now()"
            " WHERE id = %s AND status = 'PENDING' RETURNING item, quantity",
            (order_id,),
        )
        row = await cur.fetchone()
        if row is not None:
            message = {"order_id": order_id, "item": row[0], "quantity": row[1]}
            await publish(conn, "orders-confirmed", json.dumps(message))
        await complete(conn, ctx.job)  # commits with the update and the message, or not at all


def create_api(pool: AsyncConnectionPool) -> FastAPI:
    api = FastAPI(title="pgenough checkout example")

    @api.post("/orders", status_code=202)
    async def place_order(order: OrderIn) -> OrderOut:
        async with pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "INSERT INTO checkout.orders (item, quantity) VALUES (%s, %s) RETURNING id",
                (order.item, order.quantity),
            )
            row = await cur.fetchone()
            assert row is not None
            # A dedupe key: a client retrying the request never confirms twice.
            job_id = await confirm_order.using(dedupe_key=f"confirm:{row[0]}").enqueue(
                conn, order_id=row[0]
            )
            if order.item == OUT_OF_STOCK:
                # Raised inside the transaction: the order and its job roll back together.
                raise HTTPException(409, f"{order.item} is out of stock")
        return OrderOut(id=row[0], status="PENDING", job_id=job_id)

    return api


async def run(url: str, *, orders: int, port: int, keep_running: bool) -> int:
    pool = await open_pool(url, max_size=10, name="checkout")
    async with pool.connection() as conn:
        await migrate(conn)
        await conn.execute(SCHEMA)

    try:
        sock = socket.create_server(("127.0.0.1", port))
    except OSError as exc:
        await pool.close()
        print(f"error: cannot listen on 127.0.0.1:{port}: {exc.strerror}", file=sys.stderr)
        return 1
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_api(pool), log_level="warning"))
    worker = app.worker(pool, config=WorkerConfig(poll_interval=1))
    confirmed: asyncio.Queue[dict[str, object]] = asyncio.Queue()

    async def print_confirmations() -> None:
        async with subscribe(url, "orders-confirmed") as sub:
            subscribed.set()
            async for item in sub:
                if isinstance(item, Gap):
                    print(f"subscriber reconnected; messages may be missing since {item.since}")
                    continue
                order = json.loads(item.payload)
                print(f"  confirmed: order {order['order_id']}", end=" ")
                print(f"({order['quantity']} x {order['item']})")
                await confirmed.put(order)

    subscribed = asyncio.Event()
    tasks = [
        asyncio.create_task(server.serve(sockets=[sock])),
        asyncio.create_task(worker.run()),
        asyncio.create_task(print_confirmations()),
    ]
    try:
        await asyncio.wait_for(subscribed.wait(), 30)
        while not server.started:
            await asyncio.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        print(f"checkout API on {base} (docs: {base}/docs)")
        async with httpx.AsyncClient(base_url=base) as client:
            for n in range(1, orders + 1):
                resp = await client.post("/orders", json={"item": f"ticket-{n}", "quantity": n})
                resp.raise_for_status()
                print(f"placed: order {resp.json()['id']} PENDING (job {resp.json()['job_id']})")
            resp = await client.post("/orders", json={"item": OUT_OF_STOCK})
            print(f"refused: {resp.status_code} {resp.json()['detail']} (no order, no job)")
        for _ in range(orders):
            await asyncio.wait_for(confirmed.get(), 60)
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT (SELECT count(*) FROM checkout.orders WHERE item = %s),"
                " (SELECT count(*) FROM pgenough.jobs WHERE kind = %s)",
                (OUT_OF_STOCK, confirm_order.name),
            )
            row = await cur.fetchone()
        assert row is not None
        print(f"out-of-stock orders stored: {row[0]}; confirm_order jobs left: {row[1]}")
        print(f"all {orders} orders confirmed exactly once.")
        if keep_running:
            print(
                f"try: curl -X POST {base}/orders -H 'content-type: application/json'"
                ' -d \'{"item": "book"}\'   (Ctrl-C to stop)'
            )
            await tasks[0]
    finally:
        server.should_exit = True
        worker.stop()
        await asyncio.gather(tasks[0], tasks[1], return_exceptions=True)
        tasks[2].cancel()
        await asyncio.gather(tasks[2], return_exceptions=True)
        await pool.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=5)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--keep-running", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    return asyncio.run(
        run(
            database_url(os.environ.get("DATABASE_URL")),
            orders=args.orders,
            port=args.port,
            keep_running=args.keep_running,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
