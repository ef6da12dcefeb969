"""The live overview: one shared subscription, fanned out over server-sent events; fresh
snapshots on new work, ticks and gaps; clients and shutdown that leave nothing behind."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue
from pgenough.dashboard.live import Event, LiveFeed
from tests.dashboard.helpers import ui_settings
from tests.dashboard.server import UiServer, sse

DEADLINE = 20.0


async def until(condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def listeners(database_url: str) -> int:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'pgenough-subscriber'"
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


def landed(overview: dict[str, Any], queue: str) -> bool:
    return [(q["queue"], q["ready"]) for q in overview["queues"]] == [(queue, 1)]


@pytest.mark.db
async def test_new_work_reaches_every_browser_through_one_subscription(
    db: AsyncConnectionPool, database_url: str
) -> None:
    # A long tick: whatever arrives after the new job was caused by it, not by the clock.
    with UiServer(ui_settings(database_url, ui_tick=60.0)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=DEADLINE) as client:
            async with (
                client.stream("GET", "/ui/events") as one,
                client.stream("GET", "/ui/events") as two,
            ):
                assert one.headers["content-type"].startswith("text/event-stream")
                streams = [sse(one), sse(two)]
                for events in streams:
                    name, first = await anext(events)  # the snapshot each newcomer gets
                    assert name == "overview" and first["queues"] == []
                assert server.ui.feed.clients == 2
                assert await listeners(database_url) == 1  # not one per browser

                async with db.connection() as conn:
                    await enqueue(conn, "send_mail", {"to": "ann"}, queue="live")
                for events in streams:
                    async with asyncio.timeout(DEADLINE):
                        async for name, data in events:
                            if name == "overview" and landed(data, "live"):
                                break
            # Both browsers went away: their queues are gone with them.
            await until(lambda: server.ui.feed.clients == 0)


@pytest.mark.db
async def test_a_gap_in_the_subscription_resyncs(
    db: AsyncConnectionPool, database_url: str
) -> None:
    with UiServer(ui_settings(database_url, ui_tick=60.0)) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=DEADLINE) as client,
            client.stream("GET", "/ui/events") as stream,
        ):
            events = sse(stream)
            await anext(events)
            before = server.ui.feed.snapshots
            async with db.connection() as conn:
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database()"
                    " AND application_name = 'pgenough-subscriber'"
                )
            async with asyncio.timeout(DEADLINE):
                name, _ = await anext(events)
            assert name == "overview"
            assert server.ui.feed.gaps >= 1 and server.ui.feed.snapshots > before


@pytest.mark.db
async def test_shutdown_ends_open_streams(db: AsyncConnectionPool, database_url: str) -> None:
    server = UiServer(ui_settings(database_url))
    with server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=DEADLINE) as client,
            client.stream("GET", "/ui/events") as stream,
        ):
            events = sse(stream)
            await anext(events)
            started = time.monotonic()
            server.server.should_exit = True
            async with asyncio.timeout(DEADLINE):
                rest = [e async for e in events]  # the stream ends: no hang
            assert all(name == "overview" for name, _ in rest)
            await asyncio.to_thread(server.thread.join, DEADLINE)
            assert not server.thread.is_alive()
            assert time.monotonic() - started < 5
    assert server.ui.feed.closed and server.ui.feed.clients == 0


async def test_bursts_coalesce_and_ticks_refresh() -> None:
    taken = 0

    async def snapshot() -> Event:
        nonlocal taken
        taken += 1
        await asyncio.sleep(0.01)
        return Event("overview", str(taken))

    feed = LiveFeed(snapshot, tick=0.2, max_clients=2, min_interval=0.05)
    publisher = asyncio.create_task(feed.publish())
    try:
        assert feed.snapshots == 0
        queue = feed.attach()
        first = await asyncio.wait_for(queue.get(), 5)
        assert first is not None
        for _ in range(200):  # a burst of changes
            feed.mark_stale()
        await asyncio.sleep(0.1)
        assert taken <= 3  # not 200
        after_burst = taken
        await until(lambda: taken >= after_burst + 2, 5)  # the tick refreshes, unprompted
        feed.attach()
        with pytest.raises(Exception, match="already follow"):
            feed.attach()
        feed.close()
        assert await asyncio.wait_for(publisher, 5) is None
        while not queue.empty():
            last = queue.get_nowait()
        assert last is None  # the stream's end marker
        closed = feed.attach()
        assert closed.get_nowait() is None
    finally:
        publisher.cancel()
