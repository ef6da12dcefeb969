"""8 worker processes drain 5,000 jobs, 20 times: every effect exactly once, nothing left."""

from __future__ import annotations

import json
import os

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.helpers.procs import Proc

# serial: 8 processes on the machine's cores for minutes, alone (after the parallel pass).
pytestmark = [pytest.mark.db, pytest.mark.slow, pytest.mark.serial]

WORKERS = 8
JOBS = 5_000
ROUNDS = int(os.environ.get("PGENOUGH_CONTENTION_ROUNDS", "20"))
ROUND_TIMEOUT = 240.0
"""Seconds a round's processes get to report: ~9 s quiet, many times that on a loaded machine."""


# Bound per round, by events (each process's report), not by the suite's 300 s for a test:
# 20 rounds take ~3 minutes on a quiet machine and went past 300 s on a loaded one.
@pytest.mark.timeout(ROUNDS * ROUND_TIMEOUT + 60)
def test_eight_processes_share_the_backlog_exactly_once(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        for round_no in range(1, ROUNDS + 1):
            conn.execute(
                "INSERT INTO pgenough.jobs (kind) SELECT 'effect' FROM generate_series(1, %s)",
                (JOBS,),
            )
            procs = [
                Proc(worker_env, "effects", "--until-idle", "--concurrency", "4", "--batch", "10")
                for _ in range(WORKERS)
            ]
            reports = []
            try:
                for proc in procs:
                    reports.append(json.loads(proc.expect("{", timeout=ROUND_TIMEOUT)))
                    assert proc.wait() == 0, proc.stderr
            finally:
                for proc in procs:
                    proc.kill()
            # Handler invocations, counted outside any transaction, catch double claims
            # that the effects table's primary key would otherwise turn into retries.
            assert sum(r["invocations"] for r in reports) == JOBS, reports
            assert sum(r["failed"] for r in reports) == 0, reports
            effects, distinct = conn.execute(
                "SELECT count(*), count(DISTINCT job_id) FROM effects"
            ).fetchone()  # type: ignore[misc]
            assert effects == distinct == JOBS * round_no
            assert conn.execute("SELECT count(*) FROM pgenough.jobs").fetchone() == (0,)
            # More than one process took part, or this tests nothing about contention.
            assert sum(1 for r in reports if r["completed"]) > 1
