"""Overload on a real uvicorn server: more slow searches than the bulkhead allows. A burst no
longer than the bulkhead's line waits its turn and is answered; the excess is refused fast with
503 TOO_BUSY, the pool is never exhausted (readiness still answers,
no connection request times out) and service resumes by itself. A search past its statement
timeout is cancelled by PostgreSQL and answered 503 TOO_BUSY.

Searches are made slow honestly: ``api_search_delay`` makes each one first sleep in
PostgreSQL (``pg_sleep``) on its pooled connection, holding a bulkhead slot and a connection
exactly as a slow query would.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.plan_service.api.helpers import (
    Plan,
    ServerThread,
    add_plans,
    api_app,
    api_settings,
    events,
    state,
)

pytestmark = pytest.mark.db

SLOW = 1.5  # seconds each search takes
LIMIT = 4  # searches at once
POOL = LIMIT + 2


async def timed_get(client: httpx.AsyncClient, path: str, **params: str) -> tuple[float, Any]:
    started = time.monotonic()
    response = await client.get(path, params=params)
    return time.monotonic() - started, response


@pytest.mark.serial  # a wall-clock bound: the parallel pass's load breaks it
async def test_the_excess_is_refused_fast_and_service_resumes(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    app = api_app(
        api_settings(
            database_url,
            pool_max_size=POOL,
            api_max_concurrent_searches=LIMIT,
            api_search_delay=SLOW,
            api_search_timeout=SLOW * 4,
        )
    )
    with ServerThread(app) as server:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:
            started = time.monotonic()
            searches = [
                asyncio.create_task(timed_get(client, "/search", offset=str(n % 2)))
                for n in range(LIMIT + 8)
            ]
            # While the bulkhead is full, the spare connections still serve readiness.
            deadline = time.monotonic() + SLOW
            while state(app).bulkhead.in_use < LIMIT:
                assert time.monotonic() < deadline, "the bulkhead never filled"
                await asyncio.sleep(0.01)
            ready_took, ready = await timed_get(client, "/health/ready")
            results = await asyncio.gather(*searches)
            total = time.monotonic() - started

            ok = [took for took, r in results if r.status_code == 200]
            busy = [(took, r) for took, r in results if r.status_code == 503]
            assert len(ok) == LIMIT, [r.status_code for _, r in results]
            assert len(busy) == 8
            for took, response in busy:
                assert took < SLOW / 3, took  # refused at once, not queued
                assert response.json()["error"]["code"] == "TOO_BUSY"
                assert response.headers["retry-after"] == "1"
            assert all(took >= SLOW for took in ok)
            assert total < SLOW * 2.5  # the four ran side by side
            assert ready.status_code == 200 and ready_took < SLOW / 2

            stats = state(app).pool.get_stats()
            assert stats.get("requests_errors", 0) == 0  # no connection request timed out
            assert stats.get("pool_max") == POOL
            assert state(app).bulkhead.rejected == 8
            assert state(app).bulkhead.in_use == 0

            # Service resumes by itself: the same load, one at a time, all answered.
            for n in range(3):
                took, response = await timed_get(client, "/search", offset=str(n))
                assert response.status_code == 200
            metrics = (await client.get("/metrics")).text
            assert "pgenough_api_bulkhead_rejections_total" in metrics


async def test_a_burst_within_the_line_waits_its_turn_and_is_answered(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    short = 0.4
    app = api_app(
        api_settings(
            database_url,
            pool_max_size=POOL,
            api_max_concurrent_searches=LIMIT,
            api_search_delay=short,
            api_bulkhead_wait=short * 5,
        )
    )
    with ServerThread(app) as server:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:
            searches = [
                asyncio.create_task(timed_get(client, "/search", offset=str(n % 2)))
                for n in range(LIMIT * 2)
            ]
            results = await asyncio.gather(*searches)
    assert [r.status_code for _, r in results] == [200] * (LIMIT * 2)
    took = sorted(t for t, _ in results)
    assert all(t >= short * 2 for t in took[LIMIT:])  # the second half waited for the first
    assert state(app).bulkhead.rejected == 0


async def test_a_search_past_its_timeout_is_too_busy_and_the_connection_survives(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    app = api_app(api_settings(database_url, api_search_delay=30.0, api_search_timeout=0.3))
    with ServerThread(app) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            took, response = await timed_get(client, "/search")
            assert response.status_code == 503
            error = response.json()["error"]
            assert error == {
                "code": "TOO_BUSY",
                "message": "the search did not finish within 0.3 s;"
                " retry later or narrow the range",
            }
            assert 0.25 < took < 5
            assert (await client.get("/health/ready")).status_code == 200
            assert state(app).bulkhead.in_use == 0
            assert state(app).pool.get_stats().get("requests_errors", 0) == 0


async def test_searches_within_the_timeout_answer(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    app = api_app(api_settings(database_url, api_search_delay=0.2, api_search_timeout=2))
    with ServerThread(app) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            assert len(events(await client.get("/search"))) == 1
