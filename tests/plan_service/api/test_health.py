"""Liveness, readiness (and its recovery when the database comes back), metrics, and the
start-up checks of the configuration."""

from __future__ import annotations

import asyncio
import time

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api import ApiConfigError
from tests.helpers.netproxy import Proxy
from tests.plan_service.api.helpers import Plan, add_plans, api_app, api_settings, events, serving

pytestmark = pytest.mark.db

WAIT = 30.0


async def test_live_and_ready(db: AsyncConnectionPool, database_url: str) -> None:
    async with serving(api_settings(database_url)) as (_, client):
        live = await client.get("/health/live")
        assert live.json() == {"data": {"status": "live"}, "error": None}
        ready = await client.get("/health/ready")
        assert ready.status_code == 200
        assert ready.json() == {"data": {"status": "ready"}, "error": None}


async def test_metrics_expose_the_api_and_the_core(
    db: AsyncConnectionPool, database_url: str
) -> None:
    async with serving(api_settings(database_url)) as (_, client):
        await client.get("/search")
        await client.get("/nope")
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert (
        'pgenough_api_request_duration_seconds_count{method="GET",route="/search",status="200"}'
        in text
    )
    assert 'route="unmatched",status="404"' in text
    for name in (
        "pgenough_api_bulkhead_rejections_total",
        "pgenough_api_cache_hits_total",
        "pgenough_api_cache_misses_total",
        "pgenough_api_search_timeouts_total",
        "pgenough_api_searches_in_flight",
        "pgenough_jobs_enqueued",  # the core's, from the same registry
        "pgenough_pubsub_gaps_total",
    ):
        assert name in text, name


async def test_not_ready_while_the_database_is_unreachable_then_ready_again(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    proxy = Proxy(database_url)
    async with proxy.running():
        settings = api_settings(proxy.url, api_ready_timeout=0.5, api_pool_timeout=0.5)
        async with serving(settings) as (_, client):
            assert (await client.get("/health/ready")).status_code == 200
            await proxy.cut()

            started = time.monotonic()
            ready = await client.get("/health/ready")
            assert time.monotonic() - started < 3
            assert ready.status_code == 503
            assert ready.headers["retry-after"] == "1"
            assert ready.json()["error"]["code"] == "UNAVAILABLE"
            assert (await client.get("/health/live")).status_code == 200
            search = await client.get("/search")
            assert search.status_code == 503
            assert search.json()["error"]["code"] == "UNAVAILABLE"

            await proxy.start()
            deadline = time.monotonic() + WAIT
            while (await client.get("/health/ready")).status_code != 200:
                assert time.monotonic() < deadline, "not ready again after the database returned"
                await asyncio.sleep(0.1)
            assert len(events(await client.get("/search"))) == 1


def test_a_bulkhead_wider_than_the_pool_is_refused(database_url: str) -> None:
    with pytest.raises(ApiConfigError, match=r"at most pool_max_size - 2 \(4\)"):
        api_app(api_settings(database_url, pool_max_size=6, api_max_concurrent_searches=5))
    api_app(api_settings(database_url, pool_max_size=6, api_max_concurrent_searches=4))
