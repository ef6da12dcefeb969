"""``/search`` through a real PgBouncer in transaction pooling mode (tests/helpers/pgbouncer.py),
with ``PGENOUGH_DIRECT_DATABASE_URL`` for the cache's LISTEN and the dashboard.

The statement timeout still holds (PgBouncer 1.18 refuses the ``options`` startup parameter
that sets it per session, so each search sets it for its own transaction) and leaves nothing
on the server connections others get next; repeated searches and streamed ones work with
statements unprepared; the cache is invalidated through the direct listener.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from tests.helpers.pgbouncer import Bouncer, bouncer
from tests.plan_service.api.helpers import Plan, add_plans, api_settings, events, serving, state

pytestmark = [pytest.mark.db, pytest.mark.slow]
WAIT = 30.0


@pytest.fixture
def pgb(server_url: str) -> Iterator[Bouncer]:
    # One server connection: every transaction of every client shares it, so a session
    # setting left by one search would be met by the next statement, whoever sends it.
    with bouncer(server_url, pool_size=1) as b:
        yield b


@pytest.fixture
def pooled_url(pgb: Bouncer, database_url: str) -> str:
    return pgb.url(conninfo_to_dict(database_url)["dbname"])


def plan(n: int) -> Plan:
    return Plan(f"p{n}", f"2030-01-01 00:{n // 60 % 60:02d}:{n % 60:02d}+00", None)


async def test_a_search_through_the_pooler_past_its_timeout_is_too_busy_and_leaves_nothing(
    db: AsyncConnectionPool, database_url: str, pooled_url: str
) -> None:
    await add_plans(db, plan(1))
    settings = api_settings(
        pooled_url,
        direct_database_url=database_url,
        api_search_delay=30.0,
        api_search_timeout=0.3,
    )
    assert settings.behind_pooler and not settings.prepare()
    async with serving(settings) as (app, client):
        started = time.monotonic()
        response = await client.get("/search")
        took = time.monotonic() - started
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "TOO_BUSY"
        assert 0.25 < took < 5
        assert (await client.get("/health/ready")).status_code == 200
        assert state(app).bulkhead.in_use == 0
    # The one server connection behind the pooler carries no timeout of the search's.
    async with await psycopg.AsyncConnection.connect(pooled_url, autocommit=True) as conn:
        cur = await conn.execute("SHOW statement_timeout")
        assert await cur.fetchone() == ("0",)


async def test_searches_through_the_pooler_repeated_and_streamed(
    db: AsyncConnectionPool, database_url: str, pooled_url: str
) -> None:
    """More searches than psycopg's prepare threshold, and one streamed in pages (more than
    one page: ``STREAM_PAGE`` is 1,000), from one snapshot, through the one server
    connection."""
    await add_plans(db, *(plan(n) for n in range(2500)))
    settings = api_settings(pooled_url, direct_database_url=database_url)
    async with serving(settings) as (_, client):
        for _ in range(8):
            response = await client.get("/search", params={"limit": "5"})
            assert response.status_code == 200, response.text
            assert len(events(response)) == 5
        streamed = await client.get("/search")
        assert streamed.status_code == 200
        assert len(events(streamed)) == 2500


async def test_the_cache_is_invalidated_through_the_direct_listener(
    db: AsyncConnectionPool, database_url: str, pooled_url: str
) -> None:
    await add_plans(db, plan(1))
    settings = api_settings(pooled_url, direct_database_url=database_url, api_cache_ttl=3600.0)
    async with serving(settings) as (app, client):
        cache = state(app).cache
        assert len(events(await client.get("/search"))) == 1
        assert len(cache) == 1
        # The listener is a direct session, not the pooler's one server connection.
        async with await psycopg.AsyncConnection.connect(pooled_url, autocommit=True) as conn:
            cur = await conn.execute("SELECT pg_backend_pid()")
            assert cache.listener_pid not in (None, *(await cur.fetchall())[0])
        seen = cache.invalidations
        await add_plans(db, plan(2), notify=True)
        await asyncio.wait_for(cache.wait_invalidations(seen + 1), WAIT)
        assert len(events(await client.get("/search"))) == 2
