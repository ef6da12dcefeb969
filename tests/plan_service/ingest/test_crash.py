"""Crashes during ingestion: killed process workers, a killed fetch worker, a restarted
PostgreSQL. Each ends in the state of a clean ingestion of the same snapshots."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core.db import EmbeddedServer
from pgenough_plans.ingest.fetch import FetchConfig
from pgenough_plans.ingest.process import STAGING_LOST
from pgenough_plans.ingest.runs import RunStatus
from pgenough_plans.sim.server import SimServer
from tests.helpers.embedded import restart_embedded
from tests.helpers.procs import ROOT, wait_until
from tests.plan_service.ingest.model import expected_rows
from tests.plan_service.ingest.pipeline import (
    assert_finished,
    download,
    dump,
    fetch,
    process,
    queued_chunks,
    run_row,
)

pytestmark = [pytest.mark.db, pytest.mark.slow]
PGENOUGH = str(Path(sys.executable).parent / "pgenough-plans")


def start(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [PGENOUGH, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def fast_env(worker_env: dict[str, str]) -> dict[str, str]:
    """Short leases and sweeps, so killed workers' chunks come back quickly."""
    return dict(
        worker_env,
        PGENOUGH_WORKER_LEASE="2",
        PGENOUGH_RESCUE_INTERVAL="0.5",
        PGENOUGH_WORKER_POLL_INTERVAL="0.2",
        PGENOUGH_LOG_LEVEL="WARNING",
    )


@pytest.fixture
def big_sim() -> Iterator[SimServer]:
    with SimServer(plans=100_000, seed=11) as server:
        yield server


async def test_process_workers_killed_repeatedly_lose_and_duplicate_nothing(
    db: AsyncConnectionPool, big_sim: SimServer, fast_env: dict[str, str]
) -> None:
    url = f"{big_sim.url}?version=1"
    result = await fetch(db, url, config=FetchConfig(chunk_pages=32))
    assert result.status == "STAGED"
    total = (await run_row(db, result.run_id))["chunks_total"]
    assert total >= 20
    kills = 0
    while (await run_row(db, result.run_id))["status"] != "PROCESSED":
        workers = [start(fast_env, "worker", "process", "--concurrency", "2") for _ in range(2)]
        before = (await run_row(db, result.run_id))["chunks_done"]

        async def progressed(before: int = before) -> bool:
            run = await run_row(db, result.run_id)
            return run["chunks_done"] > before or run["status"] == "PROCESSED"

        await wait_until(progressed, 120, "process workers to apply a chunk")
        await asyncio.sleep(0.3)  # kill in the middle of later chunks
        for w in workers:
            w.send_signal(signal.SIGKILL)
            w.wait(10)
        kills += len(workers)
        assert kills < 200, "no progress across kills"
    assert kills >= 4
    run = await run_row(db, result.run_id)
    assert run["chunks_done"] == run["chunks_total"] == total
    expected = expected_rows("sim", [(run["started_at"], download(url))])
    assert await dump(db) == expected


async def test_killed_fetch_worker_fails_its_run_and_a_later_fetch_succeeds(
    db: AsyncConnectionPool, big_sim: SimServer, fast_env: dict[str, str]
) -> None:
    slow = f"{big_sim.url}?version=1&fault=slow:0.05"
    fetcher = start(fast_env, "worker", "fetch", "--once", "--provider", f"sim={slow}")
    try:

        async def staging_some() -> bool:
            async with db.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM plans.runs WHERE status = 'RUNNING' AND plans_staged > 0"
                )
                row = await cur.fetchone()
            return bool(row and row[0])

        await wait_until(staging_some, 120, "the fetch worker to stage some plans")
    finally:
        fetcher.send_signal(signal.SIGKILL)
        fetcher.wait(10)
    async with db.connection() as conn:
        cur = await conn.execute("SELECT id FROM plans.runs")
        (dead_run,) = [r[0] for r in await cur.fetchall()]
    assert (await run_row(db, dead_run))["status"] == "RUNNING"  # nobody has noticed yet

    result = await fetch(db, f"{big_sim.url}?version=1")
    await process(db)
    dead = await run_row(db, dead_run)
    assert dead["status"] == "FAILED"
    assert dead["reason"] == (
        "fetch worker died or lost its database connection (its provider lock was free)"
        " while streaming the body (attempt 1 of 4)"
    )
    assert not dead["has_staging"]
    assert (await run_row(db, result.run_id))["status"] == "PROCESSED"


@pytest.mark.serial  # restarts the server the other xdist workers use
async def test_postgres_restart_mid_run_workers_reconnect_on_their_own(
    db: AsyncConnectionPool,
    big_sim: SimServer,
    fast_env: dict[str, str],
    embedded: EmbeddedServer | None,
) -> None:
    if embedded is None:
        pytest.skip("restarts the server: runs on the embedded server the suite controls")
    url = f"{big_sim.url}?version=1"
    env = dict(fast_env, PGENOUGH_PROVIDERS=f"sim={url}&fault=slow:0.01")
    fetcher = start(env, "worker", "fetch", "--interval", "1")
    processor = start(env, "worker", "process", "--concurrency", "2")
    try:

        async def some_progress() -> bool:
            async with db.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM plans.runs WHERE plans_staged > 1000"
                )
                row = await cur.fetchone()
            return bool(row and row[0])

        await wait_until(some_progress, 120, "a run to be under way")
        async with db.connection() as conn:
            cur = await conn.execute("SELECT id FROM plans.runs WHERE status = 'RUNNING'")
            cut_short = [r[0] for r in await cur.fetchall()]
        assert cut_short, "the restart must hit a run mid-stream"
        restart_embedded(embedded)

        async def processed_after_restart() -> bool:
            try:
                async with db.connection() as conn:
                    cur = await conn.execute(
                        "SELECT count(*) FROM plans.runs WHERE status = 'PROCESSED'"
                    )
                    row = await cur.fetchone()
            except Exception:  # the session pool is reconnecting too
                return False
            return bool(row and row[0])

        await wait_until(processed_after_restart, 300, "a run processed after the restart")
    finally:
        for p in (fetcher, processor):
            p.send_signal(signal.SIGTERM)
        for p in (fetcher, processor):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT status::text, count(*) FROM plans.runs GROUP BY 1 ORDER BY 1"
        )
        statuses = dict(await cur.fetchall())
        cur = await conn.execute(
            "SELECT started_at FROM plans.runs WHERE status = 'PROCESSED' ORDER BY id"
        )
        processed_times = [r[0] for r in await cur.fetchall()]
    assert statuses.get("PROCESSED", 0) >= 1
    for run_id in cut_short:
        run = await run_row(db, run_id)
        assert run["status"] == "FAILED", run
        assert not run["has_staging"]
    assert statuses.get("RUNNING", 0) <= 1  # at most the round cut short by SIGTERM
    records = download(url)
    expected = expected_rows("sim", [(t, records) for t in processed_times])
    assert await dump(db) == expected


@pytest.mark.serial  # crashes the server the other xdist workers use
async def test_a_crash_after_the_seal_fails_the_run_and_the_next_fetch_starts_over(
    db: AsyncConnectionPool, embedded: EmbeddedServer | None
) -> None:
    """Staging tables are unlogged: crash recovery (as a promoted standby) empties them. A
    run sealed before the crash must not be called PROCESSED with nothing applied: its first
    chunk fails it with the reason, and the next fetch ingests the snapshot whole."""
    if embedded is None:
        pytest.skip("crashes the server: runs on the embedded server the suite controls")
    with SimServer(plans=3_000, seed=12) as sim:
        url = f"{sim.url}?version=1"
        staged = await fetch(db, url, config=FetchConfig(chunk_pages=4))
        assert staged.status == RunStatus.STAGED
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT relpersistence FROM pg_class WHERE oid = to_regclass(%s)",
                (f"plans.staging_{staged.run_id}",),
            )
            assert await cur.fetchone() == ("u",)  # no WAL: a standby replays none of it
        await asyncio.to_thread(restart_embedded, embedded, mode="immediate")

        async def reachable() -> bool:
            try:
                async with db.connection() as conn:
                    await conn.execute("SELECT 1")
            except Exception:  # the session pool replaces its broken connections
                return False
            return True

        await wait_until(reachable, 60, "the server back after its crash")
        await process(db)
        run = await run_row(db, staged.run_id)
        assert (run["status"], run["reason"], run["has_staging"]) == ("FAILED", STAGING_LOST, False)
        assert run["chunks_done"] == 0
        assert await dump(db) == []  # nothing of it was applied, nothing claims it was
        assert await queued_chunks(db) == 0  # its other chunks saw the run failed

        again = await fetch(db, url)
        await process(db)
        await assert_finished(db, again.run_id, "PROCESSED")
        times = [(await run_row(db, again.run_id))["started_at"]]
        assert await dump(db) == expected_rows("sim", [(t, download(url)) for t in times])
