"""The raw-SQL ceiling (*raw*): a table with the queue's columns and claim index, loaded by
COPY, drained by a ``DELETE ... FOR UPDATE SKIP LOCKED ... RETURNING`` loop with nothing else
to do."""

from __future__ import annotations

import json
import time
from multiprocessing.synchronize import Barrier
from typing import Any

import psycopg
from bench.harness.systems.base import BARRIER_TIMEOUT, KIND, QUEUE, DrainSpec

RAW_SCHEMA = """
CREATE TYPE job_state AS ENUM ('ready', 'running', 'dead', 'cancelled');
CREATE TABLE raw_jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text NOT NULL DEFAULT 'default',
    kind          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT 'null'::jsonb,
    priority      integer NOT NULL DEFAULT 0,
    state         job_state NOT NULL DEFAULT 'ready',
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL DEFAULT 20 CHECK (max_attempts > 0),
    run_at        timestamptz NOT NULL DEFAULT now(),
    created_at    timestamptz NOT NULL DEFAULT now(),
    claimed_at    timestamptz,
    lease_until   timestamptz,
    worker        text,
    finished_at   timestamptz,
    dedupe_key    text,
    last_error    text,
    errors        jsonb NOT NULL DEFAULT '[]'::jsonb,
    CHECK (state <> 'running' OR lease_until IS NOT NULL)
);
CREATE INDEX raw_jobs_claim_idx ON raw_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready';
"""
RAW_COPY = "COPY raw_jobs (queue, kind, payload) FROM STDIN"
RAW_TAKE = """
DELETE FROM raw_jobs
WHERE id IN (
    SELECT id FROM raw_jobs
    WHERE queue = %(queue)s AND state = 'ready' AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, queue, kind, payload, priority, attempts, max_attempts, run_at, created_at
"""
RAW_OPTIONS = "-c plan_cache_mode=force_custom_plan -c enable_sort=off"
"""The raw loop's sessions: ``RAW_TAKE`` is prepared (parsed once), planned at every
execution, with its values and the table's current size, and never with a Sort, so always on
the claim index, as the product's claim loop holds its connection
(``worker._executor.Executor._hold``, which says why a Sort is ruled out: a vacuum between two
bursts leaves statistics under which a Seq Scan and a Sort of the table look cheaper). psycopg
prepares a statement after 5 executions, and PostgreSQL may then cache a *generic* plan, built for
no particular values while ``raw_jobs`` was empty or tiny: a nested-loop semi join over seq scans,
O(rows²) per claim (claims ran for minutes in steady state; forced generic, one claim on 20,000
rows took 33 s and, rescanning the SKIP LOCKED subquery per outer row, deleted all 20,000).
Unprepared instead, the claim costs about 0.88x the rate (``python -m bench.claim_plans``): not
a ceiling."""


def raw_connect(url: str) -> psycopg.Connection[Any]:
    """A connection of the raw loop (autocommit, ``RAW_OPTIONS``)."""
    return psycopg.connect(url, autocommit=True, options=RAW_OPTIONS)


def raw_take(conn: psycopg.Connection[Any], batch: int) -> list[tuple[Any, ...]]:
    """One claim of the raw loop, on a ``raw_connect`` connection: up to ``batch`` jobs
    deleted and returned."""
    params = {"queue": QUEUE, "limit": batch}
    return conn.execute(RAW_TAKE, params).fetchall()


def setup_raw(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RAW_SCHEMA)


def enqueue_raw(url: str, n: int) -> float:
    with psycopg.connect(url) as conn:
        start = time.perf_counter()
        with conn.cursor().copy(RAW_COPY) as copy:
            for i in range(n):
                copy.write_row((QUEUE, KIND, json.dumps({"n": i})))
        conn.commit()
        return time.perf_counter() - start


def _raw_handler(row: tuple[Any, ...]) -> None:
    """The raw loop's no-op handler."""


def drain_raw(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    done = 0
    with raw_connect(spec.url) as conn:
        conn.execute("SELECT 1")
        barrier.wait(BARRIER_TIMEOUT)
        while rows := raw_take(conn, spec.batch):
            for row in rows:
                _raw_handler(row)
            done += len(rows)
        return time.time(), done
