"""Fleet-wide limits under contention, with real processes: 8 worker processes of
concurrency 4 drain a limited queue while some are killed with SIGKILL. Under a running limit
a sampler reading the jobs table as fast as it can never sees more jobs of the queue running
than the limit (a killed worker's jobs count until the rescuer takes them back); under a
rate, the handlers' starts (each recorded by the handler, committed at once) never crowd a
window of the interval past the rate. Every job's effect commits exactly once (the effect and
the completion are one transaction, the effect's key the job's id), and nothing is left."""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Final, LiteralString

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core.limits import set_queue_limit
from tests.core.test_limits import most_in_a_window
from tests.helpers.procs import Proc

# serial: 8 processes on the machine's cores, alone (after the parallel pass).
pytestmark = [pytest.mark.db, pytest.mark.slow, pytest.mark.serial]

QUEUE = "partner"
LIMIT = 3
WORKERS = 8
KILLS = 3
JOBS = 300
LEASE = 2.0
"""Short, so that the killed workers' jobs come back within seconds (the rescuer runs every
lease / 2 in these processes)."""
DEADLINE = 240.0


def _count(conn: psycopg.Connection[Any], query: LiteralString, *params: object) -> int:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


RUNNING: Final = "SELECT count(*) FROM pgenough.jobs WHERE queue = %s AND state = 'running'"
EFFECTS: Final = "SELECT count(*) FROM effects"
LEFT: Final = "SELECT count(*) FROM pgenough.jobs WHERE queue = %s"


def drain_with_kills(
    env: dict[str, str], url: str, jobs: int, rng: random.Random, *extra: str
) -> None:
    """``jobs`` jobs of ``QUEUE`` (``effect``) drained by ``WORKERS`` processes, ``KILLS`` of
    them killed with SIGKILL at even steps of the way (each while it may hold running jobs:
    its slots stay taken until their leases expire); returns once every effect committed,
    each once (``effects.job_id`` is its key), and nothing is left of the queue."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgenough.jobs (queue, kind) SELECT %s, 'effect'"
            " FROM generate_series(1, %s)",
            (QUEUE, jobs),
        )
    args = ("--queue", QUEUE, "--concurrency", "4", "--batch", "10", "--lease", str(LEASE))
    procs = [Proc(env, "effects", *args, "--work", "0.05", *extra) for _ in range(WORKERS)]
    killed: list[Proc] = []
    try:
        for proc in procs:
            proc.expect("ready", timeout=60)
        deadline = time.monotonic() + DEADLINE
        with psycopg.connect(url, autocommit=True) as conn:
            while (done := _count(conn, EFFECTS)) < jobs:
                assert time.monotonic() < deadline, f"{done} of {jobs} effects"
                if len(killed) < KILLS and done >= jobs * (len(killed) + 1) // (KILLS + 1):
                    victim = rng.choice([p for p in procs if p not in killed])
                    victim.popen.kill()
                    killed.append(victim)
                time.sleep(0.05)
            assert _count(conn, EFFECTS) == jobs
            while _count(conn, LEFT, QUEUE):  # the last acknowledgements land
                assert time.monotonic() < deadline, "jobs left"
                time.sleep(0.05)
    finally:
        for proc in procs:
            proc.kill()
    assert len(killed) == KILLS


@pytest.mark.timeout(DEADLINE + 60)
def test_the_limit_holds_across_eight_processes_with_kills(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        set_queue_limit(conn, QUEUE, LIMIT)
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(database_url, autocommit=True) as conn:
            while not stop.is_set():
                samples.append(_count(conn, RUNNING, QUEUE))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        drain_with_kills(worker_env, database_url, JOBS, random.Random(34))
    finally:
        stop.set()
        sampler.join(30)
    assert len(samples) > 100, "the sampler barely ran"
    assert max(samples) == LIMIT, f"peak {max(samples)} of {len(samples)} samples"


RATE = 20
PER = 1.0
RATE_JOBS = 100
MARGIN = 0.3
"""Seconds between a claim and its handler's recorded start (same process, a round trip):
windows of ``PER - MARGIN`` of the starts are checked against the rate."""


@pytest.mark.timeout(DEADLINE + 60)
def test_a_rate_holds_across_eight_processes_with_kills(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS starts"
            " (job_id bigint, at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        conn.execute("TRUNCATE starts")
        set_queue_limit(conn, QUEUE, starts=RATE, per=PER)
    drain_with_kills(worker_env, database_url, RATE_JOBS, random.Random(35), "--record-starts")
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT extract(epoch FROM at) FROM starts ORDER BY at").fetchall()
        assert _count(conn, "SELECT count(DISTINCT job_id) FROM starts") == RATE_JOBS
    starts = [float(r[0]) for r in rows]
    assert most_in_a_window(starts, PER - MARGIN) <= RATE, "a window crowded past the rate"
    # The rate held them: a hundred starts at 20 a second take at least four seconds.
    assert starts[-1] - starts[0] >= (RATE_JOBS / RATE - 1) * PER - MARGIN
