"""Periodic tasks: at most once per period across replicas."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Periodic
from pgenough.core.periodic import PeriodicTask, seconds_to_next_period
from tests.helpers.procs import Proc


def test_seconds_to_next_period() -> None:
    assert seconds_to_next_period(100.25, 1.0) == pytest.approx(0.75)
    assert seconds_to_next_period(120.0, 60.0) == pytest.approx(60.0)
    with pytest.raises(ValueError, match="positive"):
        PeriodicTask("x", 0, lambda: None)  # type: ignore[arg-type,return-value]


@pytest.mark.db
async def test_one_claim_per_period(db: AsyncConnectionPool) -> None:
    runs: list[str] = []
    a, b = Periodic(db, replica="a"), Periodic(db, replica="b")

    async def fn() -> None:
        runs.append("ran")

    for p in (a, b):
        p.every(3600, "hourly", fn)
    task = PeriodicTask("hourly", 3600, fn)
    results = [await p.run_once(task) for p in (a, b, a)]
    assert [claimed for _, claimed in results] == [True, False, False]
    assert runs == ["ran"]


@pytest.mark.db
@pytest.mark.slow
def test_three_replicas_run_a_one_second_task_about_ten_times_in_ten_seconds(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    procs = [
        Proc(worker_env, "periodic", "--seconds", "10", "--period", "1", "--name", "tick")
        for _ in range(3)
    ]
    try:
        for proc in procs:
            proc.expect("ready")
        for proc in procs:
            proc.expect("done", timeout=60)
    finally:
        for proc in procs:
            proc.kill()
    with psycopg.connect(database_url) as conn:
        runs, periods, replicas = conn.execute(
            "SELECT count(*), count(DISTINCT period), count(DISTINCT replica) FROM ticks"
        ).fetchone()  # type: ignore[misc]
    assert runs == periods  # never twice in one period
    # The replicas started at slightly different times within those 10 s: 9 to 12 periods.
    assert 9 <= runs <= 12, runs
    assert replicas >= 1
