"""Real states for the dashboard to show: ingestions over real HTTP from the simulator, a
failed run, and chunks dead-lettered by a real database error (a trigger that makes counting
a chunk on its run fail, as a constraint or a full disk would)."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from pgenough.core import JobRecord
from pgenough.plans import inspect
from pgenough.plans.fetch import RunResult
from pgenough.plans.sim import SimServer
from tests.plans.pipeline import break_chunks, fetch, heal_chunks, ingest, process


@dataclass(frozen=True)
class Scene:
    ok: RunResult
    """Ingested and processed (with some malformed records skipped)."""
    failed: RunResult
    """Failed: the provider answered 404."""
    stuck: RunResult
    """Staged, its chunks dead-lettered."""
    dead: list[JobRecord]


async def dead_chunks(pool: AsyncConnectionPool, sim: SimServer, name: str) -> RunResult:
    """A staged run of ``name`` whose chunk jobs are all dead ('disk full (test)')."""
    await break_chunks(pool)
    try:
        staged = await fetch(pool, f"{sim.url}?version=1", name=name)
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
