"""Pub/sub: delivered on commit only, oversize payloads intact, survives a killed session."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Gap, Message, Subscription, publish, subscribe
from pgenough.core.pubsub import REF_PREFIX

pytestmark = pytest.mark.db


async def collect(sub: Subscription, out: asyncio.Queue[Any]) -> None:
    async for item in sub:
        await out.put(item)


async def test_only_committed_messages_are_delivered(
    db: AsyncConnectionPool, database_url: str
) -> None:
    received: asyncio.Queue[Any] = asyncio.Queue()
    async with subscribe(database_url, "orders") as sub:
        reader = asyncio.create_task(collect(sub, received))
        async with db.connection() as conn:
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await publish(conn, "orders", "rolled back")
                    raise RuntimeError
            async with conn.transaction():
                await publish(conn, "orders", "committed")
                await publish(conn, "elsewhere", "not subscribed")
        first = await asyncio.wait_for(received.get(), 10)
        reader.cancel()
    assert first == Message("orders", "committed")
    assert received.empty()


async def test_oversize_and_prefix_payloads_arrive_intact(
    db: AsyncConnectionPool, database_url: str
) -> None:
    big = "ünïcødé " * 20_000  # far beyond NOTIFY's 8000 bytes
    tricky = REF_PREFIX + "42"  # looks like a reference; must not be taken for one
    edge = "x" * 7998
    received: asyncio.Queue[Any] = asyncio.Queue()
    async with subscribe(database_url, "big") as sub:
        reader = asyncio.create_task(collect(sub, received))
        async with db.connection() as conn:
            for payload in (big, tricky, edge, edge + "yz"):
                await publish(conn, "big", payload)
        got = [await asyncio.wait_for(received.get(), 10) for _ in range(4)]
        reader.cancel()
    assert [m.payload for m in got] == [big, tricky, edge, edge + "yz"]


async def test_subscriber_survives_terminated_backend_and_reports_the_gap(
    db: AsyncConnectionPool, database_url: str
) -> None:
    received: asyncio.Queue[Any] = asyncio.Queue()
    async with subscribe(database_url, "events", ping_interval=0.5) as sub:
        reader = asyncio.create_task(collect(sub, received))
        async with db.connection() as conn:
            await publish(conn, "events", "before")
            assert await asyncio.wait_for(received.get(), 10) == Message("events", "before")
            old_pid = sub.backend_pid
            cur = await conn.execute("SELECT pg_terminate_backend(%s)", (old_pid,))
            assert await cur.fetchone() == (True,)
            gap = await asyncio.wait_for(received.get(), 30)
            assert isinstance(gap, Gap)
            assert gap.channels == ("events",) and gap.since <= gap.until
            assert sub.backend_pid != old_pid
            await publish(conn, "events", "after")
            assert await asyncio.wait_for(received.get(), 10) == Message("events", "after")
        reader.cancel()
