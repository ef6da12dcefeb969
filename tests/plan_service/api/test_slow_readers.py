"""Clients that stop reading, over real HTTP against the real uvicorn server: a stalled stream
gives up its slot, its connection and its snapshot within the stall bound; streams hold at
most their share of the slots, so first pages keep answering; and readiness says when every
slot has been taken for too long."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api import metrics
from tests.plan_service.api.helpers import state
from tests.plan_service.api.test_spec_clients import (
    LARGE,
    TERMINATOR,
    WAIT,
    _above,
    _released,
    add_many,
    server,
    streaming_snapshot_open,
    until,
)

pytestmark = pytest.mark.db

SMALL_BUFFER = 4096  # bytes: the client's receive buffer, so the server's sends block soon


@contextlib.contextmanager
def stalled_get(port: int, target: str = "/search") -> Iterator[socket.socket]:
    """A GET whose client reads nothing after the first bytes of the answer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
    sock.settimeout(WAIT)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: api\r\n\r\n".encode())
    try:
        yield sock
    finally:
        sock.close()


def read_until_reset(sock: socket.socket) -> tuple[bytes, bool]:
    """What is left to read, and whether the connection ended with a reset."""
    data = bytearray()
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        return bytes(data), True
    return bytes(data), False


async def snapshots_held(pool: AsyncConnectionPool) -> int:
    """API sessions holding back the xmin horizon (a snapshot vacuum must respect)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgenough-api'"
            " AND datname = current_database()"
            " AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()"
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize("http", ["auto", "h11"])
async def test_a_client_that_stops_reading_is_cut_within_the_stall_bound(
    db: AsyncConnectionPool, database_url: str, caplog: pytest.LogCaptureFixture, http: str
) -> None:
    """Not after the 120 s of the stream timeout: within the stall timeout, the slot, the
    connection and the snapshot are freed and the client's connection is reset (a close would
    wait for it to read what is buffered, which it never does), on either HTTP parser."""
    await add_many(db, LARGE)
    stall = 1.0
    cut = metrics.STREAMS_CUT.labels("stall")
    before = cut._value.get()
    async with server(database_url, http, api_stream_stall_timeout=stall) as api:
        with stalled_get(api.port) as sock:
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
            await until(lambda: streaming_snapshot_open(db), "the stream holds its snapshot")
            assert await snapshots_held(db) == 1
            opened = time.monotonic()
            await until(lambda: _above(cut, before), "the stalled stream is cut")
            # Loopback fills the buffers within milliseconds; then the stall bound runs.
            assert time.monotonic() - opened < stall + 2.0
            await until(lambda: _released(api, db), "the slot and the snapshot are released")
            assert await snapshots_held(db) == 0
            connections = api.server.server_state.connections

            async def reset() -> bool:
                return not connections

            await until(reset, "the server let go of the client's connection")
            rest, was_reset = await asyncio.to_thread(read_until_reset, sock)
            assert was_reset or not rest.endswith(TERMINATOR)
        async with httpx.AsyncClient(base_url=api.url) as client:
            ok = await client.get("/search", params={"limit": "3"})
            assert ok.status_code == 200
    logged = [r.getMessage() for r in caplog.records]
    assert any("search stream cut" in m and "STALL_TIMEOUT" in m for m in logged), logged


async def test_streams_hold_at_most_their_share_and_first_pages_keep_answering(
    db: AsyncConnectionPool, database_url: str
) -> None:
    """Eight sockets that ask for everything and never read took every slot; now half of them
    are refused at once and the other half of the slots answers first pages."""
    await add_many(db, LARGE)
    refused = metrics.STREAMS_REFUSED
    before = refused._value.get()
    async with server(database_url, api_stream_stall_timeout=60.0) as api:
        bulkhead = state(api.app).bulkhead
        assert (bulkhead.limit, bulkhead.max_streams) == (8, 4)
        with contextlib.ExitStack() as stack:
            socks = [stack.enter_context(stalled_get(api.port)) for _ in range(8)]
            heads = [await asyncio.to_thread(s.recv, 1024) for s in socks]
            statuses = sorted(h.split(b" ", 2)[1] for h in heads)
            assert statuses == [b"200"] * 4 + [b"503"] * 4, heads
            busy_sock = next(s for s, h in zip(socks, heads, strict=True) if b" 503 " in h[:16])
            busy = heads[socks.index(busy_sock)]
            while not busy.endswith(b"}"):  # the body may come in a segment of its own
                busy += await asyncio.to_thread(busy_sock.recv, 1024)
            assert b"TOO_BUSY" in busy and b"streaming at once" in busy
            assert refused._value.get() == before + 4
            assert bulkhead.streams == 4 and bulkhead.in_use == 4
            async with httpx.AsyncClient(base_url=api.url, timeout=WAIT) as client:
                pages = []
                for round_ in range(4):  # as many at once as the slots streams leave free
                    pages += await asyncio.gather(
                        *(
                            client.get("/search", params={"limit": "5", "offset": str(i)})
                            for i in range(4 * round_, 4 * round_ + 4)
                        )
                    )
                assert [p.status_code for p in pages] == [200] * 16
                assert all(len(json.loads(p.content)["data"]["events"]) == 5 for p in pages)
                ready = await client.get("/health/ready")
                assert ready.status_code == 200
        await until(lambda: _released(api, db), "every slot is released")
        assert bulkhead.streams == 0


async def test_readiness_says_when_every_slot_has_been_taken_too_long(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_many(db, LARGE)
    async with server(
        database_url,
        api_max_concurrent_searches=2,
        api_max_concurrent_streams=2,
        api_stream_stall_timeout=60.0,
        api_ready_full_after=0.5,
    ) as api:
        bulkhead = state(api.app).bulkhead
        async with httpx.AsyncClient(base_url=api.url, timeout=WAIT) as client:
            assert (await client.get("/health/ready")).status_code == 200
            with stalled_get(api.port) as one, stalled_get(api.port) as two:
                for sock in (one, two):
                    assert (await asyncio.to_thread(sock.recv, 1024)).startswith(b"HTTP/1.1 200")

                async def full_long_enough() -> bool:
                    return bulkhead.full_for() > 0.5

                await until(full_long_enough, "the bulkhead has been full for 0.5 s")
                ready = await client.get("/health/ready")
                assert ready.status_code == 503, ready.text
                error = ready.json()["error"]
                assert error["code"] == "UNAVAILABLE"
                assert "every search slot" in error["message"]
            await until(lambda: _released(api, db), "the slots are released")
            assert (await client.get("/health/ready")).status_code == 200
