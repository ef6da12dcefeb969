"""Concurrent fetch workers: one run per provider at a time, providers independent."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.ingest.fetch import FetchConfig, fetch_all
from pgenough_plans.sim.server import SimServer
from tests.helpers.procs import ROOT
from tests.plan_service.ingest.pipeline import provider, run_row

pytestmark = [pytest.mark.db, pytest.mark.slow]
PGENOUGH = str(Path(sys.executable).parent / "pgenough-plans")


def run_together(n: int, env: dict[str, str], url: str) -> tuple[list[int], list[tuple[str, str]]]:
    """Start ``n`` fetch workers at once and wait for all of them."""
    procs = [
        subprocess.Popen(
            [PGENOUGH, "worker", "fetch", "--once", "--provider", f"sim={url}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    return [p.returncode for p in procs], outputs


async def test_four_fetch_workers_on_one_provider_make_exactly_one_run(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    with SimServer(plans=500, seed=3) as sim:
        # The provider takes 5 s to answer, so the four workers overlap whatever their
        # start-up times.
        url = f"{sim.url}?version=1&fault=latency:5"
        codes, outputs = await asyncio.to_thread(run_together, 4, worker_env, url)
        requests = sim.stats()["paths"]
    assert codes == [0, 0, 0, 0], outputs
    skipped = [err for _, err in outputs if "being fetched by another worker; skipped" in err]
    assert len(skipped) == 3
    assert requests == {"/planList": 1}
    async with db.connection() as conn:
        cur = await conn.execute("SELECT status::text FROM plans.runs")
        assert await cur.fetchall() == [("STAGED",)]


async def test_two_providers_are_fetched_concurrently(db: AsyncConnectionPool) -> None:
    with SimServer(plans=3_000, seed=5) as sim:
        slow = f"{sim.url}?version=1&fault=slow:0.05"
        results = await fetch_all(
            db,
            [provider(slow, "alpha"), provider(slow, "beta")],
            FetchConfig(),
            owner="test",
        )
    assert [r.status for r in results if r] == ["STAGED", "STAGED"]
    a, b = [await run_row(db, r.run_id) for r in results if r]
    # Each started before the other finished: they overlapped in time.
    assert a["started_at"] < b["staged_at"]
    assert b["started_at"] < a["staged_at"]
