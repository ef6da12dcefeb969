"""Connection pools are read at scrape time; queue gauges follow the table; a worker counts
every job's outcome."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    BatchHandler,
    GiveUp,
    Job,
    RetryIn,
    Worker,
    WorkerConfig,
    enqueue,
    open_pool,
)
from pgenough.core.admin import refresh_queue_metrics

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


async def test_a_drain_counts_every_job_outcome(db: AsyncConnectionPool) -> None:
    """The worker resolves its labelled metrics once and adds completions once per claim: the
    counters must still come out as one per job, by outcome, when ``run`` returns."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with db.connection() as conn:
        for i in range(7):
            await enqueue(conn, "ok", i, queue=queue)
        for _ in range(2):
            await enqueue(conn, "later", None, queue=queue)
        await enqueue(conn, "hopeless", None, queue=queue)
        await enqueue(conn, "spent", None, queue=queue, max_attempts=1)
        for i in range(3):
            await enqueue(conn, "batch", i, queue=queue)

    async def ok(job: Job) -> None:
        await asyncio.sleep(0.001 * (job.payload % 2))  # some suspend, some finish at once

    async def later(job: Job) -> None:
        raise RetryIn(3600)

    async def hopeless(job: Job) -> None:
        raise GiveUp("malformed")

    async def spent(job: Job) -> None:
        raise ValueError("boom")

    async def batch(conn: psycopg.AsyncConnection[Any], jobs: Sequence[Job]) -> None:
        pass

    def sample(metric: str) -> float:
        return REGISTRY.get_sample_value(metric, {"queue": queue}) or 0.0

    handlers = {
        "ok": ok,
        "later": later,
        "hopeless": hopeless,
        "spent": spent,
        "batch": BatchHandler(batch),
    }
    config = WorkerConfig(queue=queue, batch_size=4, concurrency=4, maintenance=None)
    stats = await Worker(db, handlers, config).run(until_idle=True)
    assert (stats.claimed, stats.completed, stats.failed) == (14, 10, 4)
    assert sample("pgenough_jobs_claimed_total") == 14
    assert sample("pgenough_jobs_completed_total") == 10
    assert sample("pgenough_jobs_failed_total") == 4
    assert sample("pgenough_jobs_retried_total") == 2
    assert sample("pgenough_jobs_dead_total") == 2
    # One observation per plain job and one per batch run (the 3 batch jobs: 1 to 3 runs).
    assert 11 + 1 <= sample("pgenough_job_duration_seconds_count") <= 11 + 3
