"""kill -9 of workers: claims come back after the lease expires, and the attempt counts."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.helpers.procs import Proc, wait_for

pytestmark = [pytest.mark.db, pytest.mark.slow]


def scalar(url: str, query: str) -> object:
    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()  # type: ignore[arg-type]
    return row[0] if row else None


def test_killed_workers_claims_are_completed_by_another_worker(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO pgenough.jobs (kind) SELECT 'effect' FROM generate_series(1, 5)")
    holder = Proc(worker_env, "hold", "--lease", "2", "--concurrency", "5", "--batch", "5")
    try:
        for _ in range(5):
            holder.expect("claimed")
        assert (
            scalar(database_url, "SELECT count(*) FROM pgenough.jobs WHERE state = 'running'") == 5
        )
        holder.kill()  # SIGKILL: no cleanup of any kind
    finally:
        holder.kill()

    rescuer = Proc(worker_env, "effects", "--lease", "2")
    try:
        rescuer.expect("ready")
        wait_for(
            lambda: scalar(database_url, "SELECT count(*) FROM effects") == 5,
            timeout=60,
            what="the 5 orphaned jobs to complete",
        )
    finally:
        rescuer.kill()
    with psycopg.connect(database_url) as conn:
        attempts = conn.execute("SELECT attempts FROM effects ORDER BY job_id").fetchall()
        left = conn.execute("SELECT count(*) FROM pgenough.jobs").fetchone()
    assert attempts == [(2,)] * 5  # the killed claim counted as an attempt
    assert left == (0,)


def test_a_job_that_kills_every_worker_ends_dead(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO pgenough.jobs (kind, max_attempts) VALUES ('crash', 3)")
    crashes = 0
    procs: list[Proc] = []
    try:
        while scalar(database_url, "SELECT state::text FROM pgenough.jobs") != "dead":
            assert crashes <= 3, "the poison job ran more often than max_attempts"
            proc = Proc(worker_env, "crash", "--lease", "1")
            procs.append(proc)
            proc.expect("ready")

            def settled(p: Proc = proc) -> bool:
                return (
                    p.popen.poll() is not None
                    or scalar(database_url, "SELECT state::text FROM pgenough.jobs") == "dead"
                )

            wait_for(settled, timeout=60, what="a crash or the dead letter")
            if proc.popen.poll() is not None:
                crashes += 1
                proc.expect("crashing", timeout=5)  # it died in the handler, not elsewhere
    finally:
        for proc in procs:
            proc.kill()
    assert crashes == 3
    with psycopg.connect(database_url) as conn:
        state, attempts, last_error, errors = conn.execute(
            "SELECT state::text, attempts, last_error, jsonb_array_length(errors)"
            " FROM pgenough.jobs"
        ).fetchone()  # type: ignore[misc]
    assert (state, attempts, errors) == ("dead", 3, 3)
    assert last_error.startswith("lease expired: worker worker-")
