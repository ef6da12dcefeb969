"""/search as a client of the Fever spec (no paging) and of RFC 9110 sees it, over real HTTP
against the real uvicorn server: every event without ``limit``, streamed from one snapshot
and cut visibly when it must be; ``Link`` pages with a validated cursor; HEAD; no redirect
built from the Host header; ignored unknown parameters; bounded metric labels."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api import metrics
from pgenough_plans.api.search import STREAM_PAGE
from tests.plan_service.api.helpers import PROVIDER, ServerThread, api_app, api_settings, state

pytestmark = pytest.mark.db

WAIT = 30.0
TERMINATOR = b"\r\n0\r\n\r\n"  # the last chunk of a complete chunked body
LARGE = 100_000  # events: ~22 MB of body, more than the socket buffers hold (~10 MB here)

ADD_MANY = """
INSERT INTO plans.plans (provider, base_plan_id, plan_id, id, title, sell_mode, starts_at,
                            ends_at, sold_out, min_price, max_price, ever_online)
SELECT %(provider)s, 'many', 'm' || n, plans.plan_uuid(%(provider)s, 'many', 'm' || n),
       'Plan number ' || n, 'online',
       -- three plans start at each minute: ties that only the id orders, across pages
       timestamptz '2030-01-01 00:00:00+00' + (n / 3) * interval '1 minute',
       timestamptz '2030-01-01 00:00:00+00' + (n / 3) * interval '1 minute' + interval '2 h',
       false, 10.50, 99.99, true
FROM generate_series(1, %(count)s) AS n
"""
ORDERED_IDS = "SELECT id::text FROM plans.plans WHERE ever_online ORDER BY starts_at, id"


async def add_many(pool: AsyncConnectionPool, count: int) -> list[str]:
    """``count`` plans; their ids in /search order."""
    async with pool.connection() as conn:
        await conn.execute(ADD_MANY, {"provider": PROVIDER, "count": count})
        cur = await conn.execute(ORDERED_IDS)
        return [row[0] for row in await cur.fetchall()]


@contextlib.asynccontextmanager
async def server(
    database_url: str, http: str = "auto", **overrides: Any
) -> AsyncIterator[ServerThread]:
    with ServerThread(api_app(api_settings(database_url, **overrides)), http=http) as running:
        yield running


def ids(body: bytes | str) -> list[str]:
    parsed = json.loads(body)
    assert parsed["error"] is None
    return [e["id"] for e in parsed["data"]["events"]]


# --- a raw client: it reads when it likes, and sees the bytes as sent -----------------------


@contextlib.contextmanager
def raw_get(port: int, target: str) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: api\r\n\r\n".encode())
    try:
        yield sock
    finally:
        sock.close()


def read_to_close(sock: socket.socket) -> bytes:
    data = bytearray()
    while chunk := sock.recv(65536):
        data += chunk
    return bytes(data)


async def api_sessions(pool: AsyncConnectionPool) -> list[str]:
    """The states of the API pool's sessions that are inside a transaction."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT state FROM pg_stat_activity WHERE application_name = 'pgenough-api'"
            " AND datname = current_database()"
            " AND (state LIKE 'idle in transaction%%' OR xact_start IS NOT NULL)"
            " AND pid <> pg_backend_pid()"
        )
        return [row[0] for row in await cur.fetchall()]


async def until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.02)


async def streaming_snapshot_open(pool: AsyncConnectionPool) -> bool:
    return "idle in transaction" in await api_sessions(pool)


# --- every event, streamed -------------------------------------------------------------------


async def test_every_event_of_a_range_larger_than_a_page_in_one_response(
    db: AsyncConnectionPool, database_url: str
) -> None:
    expected = await add_many(db, STREAM_PAGE * 2 + 500)
    async with server(database_url) as api, httpx.AsyncClient(base_url=api.url) as client:
        response = await client.get("/search")
        small = await client.get("/search", params={"ends_at": "2030-01-01T00:30:00Z"})
    assert response.status_code == 200
    assert "content-length" not in response.headers  # streamed: chunked
    assert response.headers["transfer-encoding"] == "chunked"
    assert ids(response.content) == expected
    # A range that fits one page is sent in one piece, with its length.
    assert small.headers["content-length"] == str(len(small.content))
    assert ids(small.content) == expected[: len(ids(small.content))]


async def test_a_stream_reads_one_snapshot_whatever_commits_meanwhile(
    db: AsyncConnectionPool, database_url: str
) -> None:
    expected = await add_many(db, LARGE)
    async with server(database_url) as api:
        with raw_get(api.port, "/search") as sock:
            head = sock.recv(1024)
            assert head.startswith(b"HTTP/1.1 200"), head
            # The server is now held by this client not reading, mid-stream, in its snapshot.
            await until(lambda: streaming_snapshot_open(db), "the stream holds its snapshot")
            async with db.connection() as conn:
                await conn.execute("DELETE FROM plans.plans")  # committed underneath
            data = head + await asyncio.to_thread(read_to_close_or_complete, sock)
    body = dechunk(data)
    assert ids(body) == expected  # neither the deletion nor a mix of before and after


def read_to_close_or_complete(sock: socket.socket) -> bytes:
    data = bytearray()
    while not data.endswith(TERMINATOR) and (chunk := sock.recv(65536)):
        data += chunk
    return bytes(data)


def dechunk(response: bytes) -> bytes:
    """The body of a complete chunked response; AssertionError when it was cut."""
    _, _, rest = response.partition(b"\r\n\r\n")
    body = bytearray()
    while True:
        size_line, sep, rest = rest.partition(b"\r\n")
        assert sep, "the chunked body ends without its last chunk: the transfer was cut"
        size = int(size_line, 16)
        if size == 0:
            return bytes(body)
        assert len(rest) >= size + 2, "the chunked body was cut mid-chunk"
        body += rest[:size]
        rest = rest[size + 2 :]


async def test_a_stream_past_its_timeout_is_cut_visibly_and_frees_everything(
    db: AsyncConnectionPool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What a client sees when a stream is cut: a transfer without its last chunk and a body
    that is not JSON, never a shorter list that looks whole."""
    await add_many(db, LARGE)
    cut = metrics.STREAMS_CUT.labels("timeout")
    before = cut._value.get()
    async with server(database_url, api_stream_timeout=1.0) as api:
        with raw_get(api.port, "/search") as sock:
            head = sock.recv(1024)
            assert head.startswith(b"HTTP/1.1 200")
            await until(lambda: _above(cut, before), "the stream is cut")
            data = head + await asyncio.to_thread(read_to_close, sock)
        assert not data.endswith(TERMINATOR)
        with pytest.raises(AssertionError, match="cut"):
            dechunk(data)
        await until(lambda: _released(api, db), "the slot and the snapshot are released")
        # And the API serves the next search as usual.
        async with httpx.AsyncClient(base_url=api.url) as client:
            ok = await client.get("/search", params={"limit": "3"})
            assert ok.status_code == 200 and len(ids(ok.content)) == 3
            with pytest.raises(httpx.RemoteProtocolError):
                async with asyncio.timeout(WAIT):
                    # httpx, a polite client, raises rather than hand over a cut body.
                    async with client.stream("GET", "/search") as response:
                        await asyncio.sleep(1.5)  # not reading, past the stream timeout
                        await response.aread()
    logged = [r.getMessage() for r in caplog.records]
    assert any("search stream cut" in m and "STREAM_TIMEOUT" in m for m in logged), logged
    assert not any("without completing" in m for m in logged)  # no uvicorn error besides


async def _above(counter: Any, value: float) -> bool:
    return bool(counter._value.get() > value)


async def _released(api: ServerThread, db: AsyncConnectionPool) -> bool:
    return state(api.app).bulkhead.in_use == 0 and not await api_sessions(db)


async def test_a_database_lost_mid_stream_cuts_it_visibly(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_many(db, LARGE)
    cut = metrics.STREAMS_CUT.labels("database")
    before = cut._value.get()
    async with server(database_url) as api:
        with raw_get(api.port, "/search") as sock:
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
            await until(lambda: streaming_snapshot_open(db), "the stream holds its snapshot")
            async with db.connection() as conn:
                cur = await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'pgenough-api' AND xact_start IS NOT NULL"
                    " AND datname = current_database()"
                    " AND pid <> pg_backend_pid()"
                )
                assert await cur.fetchall() == [(True,)]
            data = await asyncio.to_thread(read_to_close, sock)
        assert not data.endswith(TERMINATOR)
        assert cut._value.get() == before + 1
        await until(lambda: _released(api, db), "the slot is released")


async def test_a_client_that_leaves_mid_stream_frees_its_slot_and_snapshot(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_many(db, LARGE)
    async with server(database_url) as api:
        with raw_get(api.port, "/search") as sock:
            assert sock.recv(1024).startswith(b"HTTP/1.1 200")
            await until(lambda: streaming_snapshot_open(db), "the stream holds its snapshot")
            assert state(api.app).bulkhead.in_use == 1
        await until(lambda: _released(api, db), "the slot and the snapshot are released")


# --- pages with a cursor ---------------------------------------------------------------------


async def test_link_pages_cover_the_range_exactly_and_never_use_the_host_header(
    db: AsyncConnectionPool, database_url: str
) -> None:
    expected = await add_many(db, 100)
    bounds = {"starts_at": "2030-01-01T00:00:00+00:00", "ends_at": "2030-01-02"}
    async with server(database_url) as api, httpx.AsyncClient(base_url=api.url) as client:
        everything = ids((await client.get("/search", params=bounds)).content)
        assert everything == expected
        paged: list[str] = []
        url: str | None = "/search?" + httpx.QueryParams({**bounds, "limit": "7"}).__str__()
        pages = 0
        while url is not None:
            response = await client.get(url, headers={"host": "evil.example"})
            assert response.status_code == 200, response.text
            paged += ids(response.content)
            pages += 1
            link = response.headers.get("link")
            if link is None:
                url = None
                continue
            target, rel = link.split(";")
            assert rel.strip() == 'rel="next"'
            assert target.startswith("</search?"), link  # relative: no Host in it
            url = urljoin(str(response.url), target.strip("<> "))
            query = parse_qs(urlsplit(url).query)
            assert query["limit"] == ["7"] and "offset" not in query
    assert paged == expected
    assert pages == 15  # 100 = 14 * 7 + 2: the last page has no Link


async def test_a_cursor_is_validated(db: AsyncConnectionPool, database_url: str) -> None:
    await add_many(db, 20)
    async with server(database_url) as api, httpx.AsyncClient(base_url=api.url) as client:
        first = await client.get("/search", params={"limit": "5", "starts_at": "2030-01-01"})
        after = parse_qs(urlsplit(first.headers["link"].split(";")[0].strip("<>")).query)["after"]
        cursor = after[0]
        good = await client.get(
            "/search", params={"limit": "5", "starts_at": "2030-01-01", "after": cursor}
        )
        assert good.status_code == 200 and len(ids(good.content)) == 5
        flipped = cursor[:10] + ("A" if cursor[10] != "A" else "B") + cursor[11:]
        for bad, says in [
            (cursor[:-1], "not a cursor"),
            (flipped, "not a cursor"),
            (cursor + "A", "not a cursor"),
            ("%00" * 4, "not a cursor"),
        ]:
            response = await client.get(
                "/search", params={"limit": "5", "starts_at": "2030-01-01", "after": bad}
            )
            assert response.status_code == 400, (bad, response.text)
            assert says in response.json()["error"]["message"]
        other = await client.get(
            "/search", params={"limit": "5", "starts_at": "2030-01-02", "after": cursor}
        )
        assert other.status_code == 400 and "other starts_at" in other.text
        both = await client.get("/search", params={"limit": "5", "offset": "5", "after": cursor})
        assert both.status_code == 400 and "after and offset" in both.text


# --- HTTP semantics --------------------------------------------------------------------------


async def test_head_answers_as_get_without_a_body(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_many(db, STREAM_PAGE + 10)
    async with server(database_url) as api, httpx.AsyncClient(base_url=api.url) as client:
        for params in (
            {},  # streamed
            {"ends_at": "2030-01-01T01:00:00Z"},  # one piece
            {"limit": "5"},  # a page with a Link
            {"limit": "0"},  # 400
        ):
            get = await client.get("/search", params=params)
            head = await client.head("/search", params=params)
            assert head.status_code == get.status_code, params
            assert head.content == b""
            for name in ("content-type", "content-length", "link"):
                assert head.headers.get(name) == get.headers.get(name), (params, name)
            # RFC 9110 9.3.2 lets a server leave out of a HEAD answer the fields set only
            # while it generates the content; httptools does, so a stream says it itself.
            assert head.headers.get("transfer-encoding") == get.headers.get("transfer-encoding")


async def test_a_trailing_slash_is_answered_not_redirected_by_host(
    db: AsyncConnectionPool, database_url: str
) -> None:
    expected = await add_many(db, 3)
    async with server(database_url) as api, httpx.AsyncClient(base_url=api.url) as client:
        response = await client.get("/search/", headers={"host": "evil.example"})
        assert response.status_code == 200 and "location" not in response.headers
        assert ids(response.content) == expected
        other = await client.get("/health/live/", headers={"host": "evil.example"})
        assert other.status_code == 404 and "location" not in other.headers


async def test_unknown_parameters_are_ignored_and_repeated_ones_refused(
    db: AsyncConnectionPool, database_url: str
) -> None:
    expected = await add_many(db, 5)
    async with server(database_url) as api, httpx.AsyncClient(base_url=api.url) as client:
        busted = await client.get("/search?_=1622505600000&starts_at=2030-01-01&callback=x")
        assert busted.status_code == 200 and ids(busted.content) == expected
        repeated = await client.get("/search?_=1&starts_at=2030-01-01&starts_at=2030-01-02")
        assert repeated.status_code == 400 and "more than once" in repeated.text
        # An unknown parameter may repeat: it is not ours.
        assert (await client.get("/search?_=1&_=2")).status_code == 200


async def test_invented_methods_and_paths_add_no_metric_series(
    db: AsyncConnectionPool, database_url: str
) -> None:
    async with server(database_url) as api, httpx.AsyncClient(base_url=api.url) as client:

        async def series() -> set[str]:
            text = (await client.get("/metrics")).text
            return {
                line.rsplit(" ", 1)[0]
                for line in text.splitlines()
                if line.startswith("pgenough_api_request_duration_seconds")
            }

        # The baseline: one of each kind of request the loop sends.
        await client.request("PROPFIND", "/search")
        await client.request("BREW", f"/random/{uuid.uuid4().hex}")
        await client.get(f"/nope-{uuid.uuid4().hex}")
        before = await series()
        for n in range(100):
            # An invented method: uvicorn's C parser (httptools) refuses it with a bare 400
            # before the app sees it; on h11 the app answers 405. A registered method the
            # app does not route (WebDAV's, PURGE) reaches it and is counted as "other".
            invented = await client.request(f"X{uuid.uuid4().hex[:8].upper()}", "/search")
            assert invented.status_code in (400, 405), invented
            known = ("PROPFIND", "MKCOL", "LOCK", "PURGE")[n % 4]
            assert (await client.request(known, "/search")).status_code == 405
            await client.request(f"M{n}", f"/random/{uuid.uuid4().hex}")
            await client.get(f"/nope-{uuid.uuid4().hex}")
        after = await series()
    grown = after - before
    assert all('route="/metrics"' in s for s in grown), sorted(grown)[:5]
    methods = {s.split('method="')[1].split('"')[0] for s in after if 'method="' in s}
    assert methods <= metrics.METHODS | {metrics.OTHER_METHOD}, methods
    assert metrics.OTHER_METHOD in methods
