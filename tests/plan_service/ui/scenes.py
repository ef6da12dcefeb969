"""Real states for the plan service's pages of the dashboard: ingestions over real HTTP from
the simulator, a failed run, and chunks dead-lettered by a real database error (a trigger
that makes counting a chunk on its run fail, as a constraint or a full disk would). The
queue's own scenes are the library's (tests/dashboard/scenes.py)."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from pgenough.core import JobRecord
from pgenough_plans.ingest import inspect
from pgenough_plans.ingest.fetch import FetchConfig, RunResult
from pgenough_plans.sim.server import SimServer
from tests.plan_service.ingest.pipeline import break_chunks, fetch, heal_chunks, ingest, process


@dataclass(frozen=True)
class Scene:
    ok: RunResult
    """Ingested and processed (with some malformed records skipped)."""
    failed: RunResult
    """Failed: the provider answered 404."""
    stuck: RunResult
    """Staged, its chunks dead-lettered."""
    dead: list[JobRecord]


DEAD_CHUNKS = FetchConfig(chunk_pages=4)


async def dead_chunks(pool: AsyncConnectionPool, sim: SimServer, name: str) -> RunResult:
    """A staged run of ``name`` whose chunk jobs are all dead ('disk full (test)')."""
    await break_chunks(pool)
    try:
        # Small chunks, so the run has several (the tests retry one, then the rest in bulk)
        # whatever the server's page layout: 600 plans in 16-page chunks made 2 on one
        # PostgreSQL and 3 on another.
        staged = await fetch(pool, f"{sim.url}?version=1", name=name, config=DEAD_CHUNKS)
        async with pool.connection() as conn:
            # One attempt each, so the failing chunks are dead-lettered at once.
            await conn.execute("UPDATE pgenough.jobs SET max_attempts = 1 WHERE state = 'ready'")
        await process(pool)
    finally:
        await heal_chunks(pool)
    return staged


async def build(pool: AsyncConnectionPool, sim: SimServer) -> Scene:
    ok = await ingest(pool, f"{sim.url}?version=1&fault=malformed:0.02", name="alpha")
    failed = await fetch(pool, f"{sim.url}?fault=404", name="beta")
    stuck = await dead_chunks(pool, sim, "gamma")
    async with pool.connection() as conn:
        dead = await inspect.failed_jobs(conn)
    assert dead and all(j.state == "dead" for j in dead)
    return Scene(ok, failed, stuck, dead)
