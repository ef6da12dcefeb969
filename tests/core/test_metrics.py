"""Connection pools are read at scrape time; queue gauges follow the table."""

from __future__ import annotations

import gc
import uuid

import pytest
from prometheus_client import REGISTRY
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue, open_pool, refresh_queue_metrics

pytestmark = pytest.mark.db


def pool_sample(metric: str, pool: str) -> float | None:
    return REGISTRY.get_sample_value(metric, {"pool": pool})


async def test_the_pool_collector_reports_connections_in_use(database_url: str) -> None:
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    pool = await open_pool(database_url, min_size=2, max_size=3, name=name)
    try:
        assert pool_sample("pgenough_db_pool_max", name) == 3
        assert pool_sample("pgenough_db_pool_connections_in_use", name) == 0
        requests = pool_sample("pgenough_db_pool_requests_total", name) or 0.0
        async with pool.connection():
            assert pool_sample("pgenough_db_pool_connections_in_use", name) == 1
            assert pool_sample("pgenough_db_pool_size", name) == 2
            assert pool_sample("pgenough_db_pool_connections_idle", name) == 1
            assert pool_sample("pgenough_db_pool_requests_waiting", name) == 0
        assert pool_sample("pgenough_db_pool_connections_in_use", name) == 0
        # Scraping reads the pool's counters without resetting them (get_stats, not pop_stats).
        assert pool_sample("pgenough_db_pool_requests_total", name) == requests + 1
        assert pool_sample("pgenough_db_pool_requests_total", name) == requests + 1
    finally:
        await pool.close()
    assert pool_sample("pgenough_db_pool_size", name) is None  # closed pools disappear


async def test_a_dropped_pool_is_not_kept_alive_by_the_collector(database_url: str) -> None:
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    pool = await open_pool(database_url, max_size=1, name=name)
    await pool.close()
    del pool
    gc.collect()
    from pgenough.core.metrics import _POOLS

    assert all(p.name != name for p in _POOLS)


async def test_queue_gauges_drop_to_zero_when_a_queue_empties(db: AsyncConnectionPool) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with db.connection() as conn:
        await enqueue(conn, "noop", queue=queue)
        await enqueue(conn, "noop", queue=queue)
        await refresh_queue_metrics(conn)
        depth = REGISTRY.get_sample_value(
            "pgenough_queue_depth", {"queue": queue, "state": "ready"}
        )
        assert depth == 2
        await conn.execute("DELETE FROM pgenough.jobs WHERE queue = %s", (queue,))
        await refresh_queue_metrics(conn)
    depth = REGISTRY.get_sample_value("pgenough_queue_depth", {"queue": queue, "state": "ready"})
    assert depth == 0
