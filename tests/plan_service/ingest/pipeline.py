"""Drive the real pipeline from tests: fetch over real HTTP, process with real workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Backoff, WorkerConfig, WorkerStats
from pgenough.core.locks import lock_key
from pgenough_plans.ingest.feed import PlanRecord
from pgenough_plans.ingest.fetch import FetchConfig, RunResult, fetch_provider, provider_client
from pgenough_plans.ingest.process import process_worker
from pgenough_plans.ingest.provider import ProviderConfig
from tests.helpers.procs import wait_until
from tests.plan_service.ingest.model import DUMP
from tests.plan_service.ingest.records import parse_bytes

FAST_RETRIES = Backoff(base=0.01, cap=0.05)


def provider(url: str, name: str = "sim", **kw: Any) -> ProviderConfig:
    kw.setdefault("backoff", FAST_RETRIES)
    kw.setdefault("read_timeout", 10.0)
    return ProviderConfig(name=name, url=url, **kw)


async def fetch(
    pool: AsyncConnectionPool,
    url: str,
    name: str = "sim",
    config: FetchConfig | None = None,
    **kw: Any,
) -> RunResult:
    async with provider_client() as client:
        result = await fetch_provider(
            pool,
            client,
            provider(url, name, **kw),
            config or FetchConfig(chunk_pages=16),
            owner="test-fetch",
        )
    assert result is not None
    return result


async def process(pool: AsyncConnectionPool, concurrency: int = 2) -> WorkerStats:
    config = WorkerConfig(concurrency=concurrency, batch_size=1, maintenance=None)
    return await process_worker(pool, config).run(until_idle=True)


async def ingest(pool: AsyncConnectionPool, url: str, name: str = "sim") -> RunResult:
    result = await fetch(pool, url, name)
    await process(pool)
    return result


async def dump(pool: AsyncConnectionPool, provider: str | None = None) -> list[tuple[Any, ...]]:
    async with pool.connection() as conn:
        cur = await conn.execute(DUMP)  # type: ignore[arg-type]
        rows = await cur.fetchall()
    return [r for r in rows if provider is None or r[0] == provider]


async def dump_bytes(pool: AsyncConnectionPool) -> bytes:
    async with pool.connection() as conn:
        out = bytearray()
        async with conn.cursor().copy(f"COPY ({DUMP}) TO STDOUT") as copy:  # type: ignore[arg-type]
            async for block in copy:
                out += block
        return bytes(out)


async def run_row(pool: AsyncConnectionPool, run_id: int) -> dict[str, Any]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT status::text, reason, attempts, plans_staged, plans_skipped, skip_samples,"
            " plans_duplicate, chunks_total, chunks_done, started_at, staged_at, processed_at,"
            " to_regclass('plans.staging_' || id) IS NOT NULL AS has_staging"
            " FROM plans.runs WHERE id = %s",
            (run_id,),
        )
        names = [d.name for d in cur.description or []]
        row = await cur.fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


async def assert_finished(
    pool: AsyncConnectionPool, run_id: int, status: str, reason: str | None = None
) -> dict[str, Any]:
    """The run ended as ``status`` (with ``reason`` in its reason, or none), and nothing of
    any run is left behind: no RUNNING run, no staging table, no queued chunk."""
    run = await run_row(pool, run_id)
    assert run["status"] == status, run
    if reason is None:
        assert run["reason"] is None, run["reason"]
    else:
        assert reason in str(run["reason"]), run["reason"]
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT id FROM plans.runs WHERE status = 'RUNNING'")
        assert await cur.fetchall() == []
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'plans'"
            " AND tablename LIKE 'staging\\_%'"
        )
        assert await cur.fetchall() == []
    assert await queued_chunks(pool) == 0
    return run


async def queued_chunks(pool: AsyncConnectionPool) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM pgenough.jobs WHERE queue = 'plans'")
        row = await cur.fetchone()
    return int(row[0]) if row else 0


def download(url: str) -> list[PlanRecord]:
    """The records a snapshot URL serves (pin its version!), parsed independently."""
    records, _ = parse_bytes(httpx.get(url, timeout=60).content)
    return records


async def break_chunks(pool: AsyncConnectionPool) -> None:
    """Make counting a chunk on its run fail, as a constraint or a full disk would: a real
    database error, so chunk jobs fail, retry and are dead-lettered for real."""
    async with pool.connection() as conn:
        await conn.execute(
            "CREATE OR REPLACE FUNCTION test_break_chunks() RETURNS trigger LANGUAGE plpgsql"
            " AS $$ BEGIN RAISE EXCEPTION 'disk full (test)'; END $$"
        )
        await conn.execute("DROP TRIGGER IF EXISTS test_break_chunks ON plans.runs")
        await conn.execute(
            "CREATE TRIGGER test_break_chunks BEFORE UPDATE OF chunks_done ON plans.runs"
            " FOR EACH ROW EXECUTE FUNCTION test_break_chunks()"
        )


async def heal_chunks(pool: AsyncConnectionPool) -> None:
    """Undo ``break_chunks``."""
    async with pool.connection() as conn:
        await conn.execute("DROP TRIGGER IF EXISTS test_break_chunks ON plans.runs")
        await conn.execute("DROP FUNCTION IF EXISTS test_break_chunks()")


async def loose_ends(db: AsyncConnectionPool) -> tuple[int, int]:
    """(runs still RUNNING, staging tables of runs not STAGED): a fetch that ended leaves
    neither (a STAGED run keeps its staging until it is processed)."""
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM plans.runs WHERE status = 'RUNNING'),"
            " (SELECT count(*) FROM pg_tables t WHERE schemaname = 'plans'"
            "  AND tablename LIKE 'staging\\_%' AND NOT EXISTS (SELECT 1 FROM plans.runs r"
            "  WHERE t.tablename = 'staging_' || r.id AND r.status = 'STAGED'))"
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def advisory_holders(db: AsyncConnectionPool, name: str) -> list[int]:
    """Backends holding the advisory lock of ``name``."""
    key = lock_key(name) & 0xFFFFFFFFFFFFFFFF
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid = %s AND objid = %s AND objsubid = 1",
            (key >> 32, key & 0xFFFFFFFF),
        )
        return [int(r[0]) for r in await cur.fetchall()]


async def phase_of(db: AsyncConnectionPool, provider_name: str) -> str | None:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT phase FROM plans.runs WHERE provider = %s AND status = 'RUNNING'",
            (provider_name,),
        )
        row = await cur.fetchone()
    return None if row is None else row[0]


async def until_phase(
    db: AsyncConnectionPool, name: str, prefix: str, alive: Callable[[], None]
) -> None:
    """Wait until the running run of ``name`` is in a phase starting with ``prefix``;
    ``alive`` raises if whatever fetches it has ended meanwhile."""

    async def reached() -> bool:
        alive()
        return (await phase_of(db, name) or "").startswith(prefix)

    await wait_until(reached, 30, f"the run of {name} to be {prefix!r}")


def running(task: asyncio.Task[Any]) -> Callable[[], None]:
    def alive() -> None:
        assert not task.done(), task

    return alive
