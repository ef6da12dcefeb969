"""The headline benchmarks still run: each as its documented command, at a smoke size, on the
test server. Figures are not looked at (speed is measured in bench/, never asserted in tests);
what this catches is a benchmark that no longer starts, as bench.ingest did for a whole issue
after the plan service's commands moved to ``pgenough-plans`` (issue 33)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench.harness.machine import ALLOW_BUSY

pytestmark = [pytest.mark.db, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600.0


def bench(server_url: str, module: str, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": server_url, ALLOW_BUSY: "1"}
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.timeout(TIMEOUT + 60)
def test_the_ingestion_benchmark_runs_the_plan_services_workers(server_url: str) -> None:
    out = bench(server_url, "ingest", "--sizes", "2000", "--repeat", "1")
    assert "e2e: run                          PROCESSED" in out, out[-3000:]
    assert "checks                            ok" in out, out[-3000:]


@pytest.mark.timeout(TIMEOUT + 60)
def test_the_queue_benchmark_drains_ours_and_the_raw_loop(server_url: str) -> None:
    out = bench(
        server_url,
        "queue",
        "--quick",
        "--systems",
        "ours-batched,raw",
        "--workers",
        "1",
        "--batches",
        "100",
        "--no-latency",
        # No waiting for a quiet machine before each drain: the figures are not read here.
        "--quiet-wait",
        "0",
    )
    assert "ours-batched" in out and "raw" in out, out[-3000:]
