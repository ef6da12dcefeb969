"""Principle 1: /search reads PostgreSQL only. While every fetch fails, or a fetch hangs on a
slow provider, the answers do not change and do not slow down."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.sim.server import SimServer
from tests.plan_service.api.helpers import api_settings, events, serving
from tests.plan_service.ingest.pipeline import fetch, ingest, process, run_row

pytestmark = pytest.mark.db

QUERIES = [
    {"limit": "500"},
    {"starts_at": "2000-01-01", "limit": "20", "offset": "10"},
    {"ends_at": "2100-01-01T00:00:00+02:00", "limit": "3"},
]


async def answers(client: httpx.AsyncClient) -> list[bytes]:
    return [(await client.get("/search", params=q)).content for q in QUERIES]


async def test_search_is_unchanged_while_every_fetch_fails(
    db: AsyncConnectionPool, database_url: str
) -> None:
    with SimServer(plans=200, seed=3) as sim:
        await ingest(db, sim.url + "?version=1")
        async with serving(api_settings(database_url)) as (_, client):
            before = await answers(client)
            assert len(events(await client.get("/search", params=QUERIES[0]))) > 50
            for fault in ("503", "reset:0.5", "truncate:0.5", "hostile:laughs", "404"):
                sim.set_faults([fault] * 4)
                result = await fetch(db, sim.url, max_attempts=4)
                assert result.status == "FAILED", fault
                assert (await run_row(db, result.run_id))["status"] == "FAILED"
                await process(db)
                assert await answers(client) == before, fault
            assert sim.stats()["requests"] >= 5


async def test_search_is_fast_and_unchanged_while_a_provider_is_slow(
    db: AsyncConnectionPool, database_url: str
) -> None:
    with SimServer(plans=200, seed=3) as sim:
        await ingest(db, sim.url + "?version=1")
        async with serving(api_settings(database_url)) as (_, client):
            before = await answers(client)
            requests = sim.stats()["requests"]
            slow = asyncio.create_task(
                fetch(db, sim.url + "?version=2&fault=latency:3", read_timeout=10)
            )
            deadline = time.monotonic() + 10
            while sim.stats()["requests"] == requests:  # until the fetch waits on the provider
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            for _ in range(5):
                started = time.monotonic()
                assert await answers(client) == before
                assert time.monotonic() - started < 1.0
            assert not slow.done()
            assert (await slow).status == "STAGED"
