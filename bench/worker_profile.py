"""Where the worker's client time goes: one in-process drain, its client CPU per job, a profile.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.worker_profile
    python -m bench.worker_profile --batch 1 --jobs 5000 --profile 25

For each of ``--modes`` (default: ``raw``, ``claim-sql``, ``batched``, ``batch-tx``) it loads
``--jobs`` no-op jobs into a fresh database (COPY), runs ``VACUUM ANALYZE`` and then drains them
from THIS process, reporting jobs/s and the process's CPU (``getrusage``, user + system) per
job during the drain. The modes:

- ``raw``: the raw loop of ``bench.queue`` (sync psycopg, ``DELETE ... RETURNING``, sent
  unprepared);
- ``claim-sql``: pgenough's own ``claim`` statement in a sync psycopg loop that acknowledges
  the previous batch, building no ``Job`` and running no handler: the SQL's cost;
- ``batched``: ``Worker(pool, {kind: noop}, WorkerConfig(batch_size=B, concurrency=max(10, B),
  maintenance=None)).run(until_idle=True)``, as ``bench.queue``'s ``ours-batched``;
- ``batch-tx``: the same with a no-op ``BatchHandler``;
- ``batched-asyncio``: ``batched`` on asyncio's own event loop. The Worker modes above run on
  the loop ``pgenough worker`` runs on by default (``pgenough.eventloop``: uvloop when it is
  installed); this one is what a library user running the Worker inside an asyncio
  application gets.

``--dispatch-only`` measures, without a database, the worker's own path from claimed rows
to acknowledged jobs (``Executor._dispatch`` with no-op handlers, ``--jobs`` jobs in batches
of ``--batch``; min of ``--rounds``): CPU that no SQL shares, so it compares across versions
even on a busy machine.

``--profile N`` runs each drain under ``cProfile`` as well (a second, separate drain, so the
timings above stay unprofiled; timed with the process's CPU clock, so waiting is not counted)
and prints its top N entries by own CPU time. ``--rounds R`` repeats
every mode R times, interleaved. Run time: about 5-20 s per mode and round at the defaults.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]  # `python bench/worker_profile.py`: keep the stdlib's `queue` importable

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import random
import resource
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import psycopg
from bench.harness.machine import refuse_if_busy
from bench.harness.systems.raw import RAW_OPTIONS

from pgenough import eventloop
from pgenough.core import BatchHandler, Job, NewJob, Worker, WorkerConfig, enqueue_many, migrate
from pgenough.core import open_pool as open_pgenough_pool
from pgenough.core._sql import load
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.eventloop import DEFAULT_EVENT_LOOP, EventLoopChoice

QUEUE = "default"
KIND = "noop"
MODES = ("raw", "claim-sql", "batched", "batch-tx", "batched-asyncio")

RAW_SCHEMA = """
CREATE TABLE raw_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL, kind text NOT NULL, payload jsonb NOT NULL DEFAULT 'null'::jsonb,
    priority integer NOT NULL DEFAULT 0, state text NOT NULL DEFAULT 'ready',
    attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL DEFAULT 20,
    run_at timestamptz NOT NULL DEFAULT now(), created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX raw_jobs_claim_idx ON raw_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready';
"""
RAW_TAKE = """
DELETE FROM raw_jobs WHERE id IN (
    SELECT id FROM raw_jobs WHERE queue = %(queue)s AND state = 'ready' AND run_at <= now()
    ORDER BY priority DESC, run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id, queue, kind, payload, priority, attempts, max_attempts, run_at, created_at
"""


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_jobs(url: str, mode: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        if mode == "raw":
            conn.execute(RAW_SCHEMA)
            with conn.cursor().copy("COPY raw_jobs (queue, kind, payload) FROM STDIN") as copy:
                for i in range(n):
                    copy.write_row((QUEUE, KIND, json.dumps({"n": i})))
        conn.execute("VACUUM ANALYZE")
    if mode != "raw":
        asyncio.run(_load_ours(url, n))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")


async def _load_ours(url: str, n: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)
        await enqueue_many(conn, [NewJob(KIND, {"n": i}, queue=QUEUE) for i in range(n)])


def drain_raw(url: str, batch: int) -> int:
    done = 0
    # Planned each time, as bench.harness.systems.raw.RAW_OPTIONS says why (a cached generic plan).
    with psycopg.connect(url, autocommit=True, options=RAW_OPTIONS) as conn:
        params = {"queue": QUEUE, "limit": batch}
        while rows := conn.execute(RAW_TAKE, params).fetchall():
            done += len(rows)
    return done


def drain_claim_sql(url: str, batch: int) -> int:
    claim = load("queue")["claim"]
    done = 0
    acks: list[tuple[int, int, datetime]] = []
    # As the worker's claim loop holds its connection: prepared, planned each time.
    with psycopg.connect(url, autocommit=True, options=RAW_OPTIONS) as conn:
        while True:
            params = {
                "done_ids": [a[0] for a in acks],
                "done_attempts": [a[1] for a in acks],
                "done_created": [a[2] for a in acks],
                "queue": QUEUE,
                "limit": batch,
                "lease": 30.0,
                "worker": "profile",
            }
            rows = conn.execute(claim, params).fetchall()
            acks = [(row[0], row[5], row[8]) for row in rows]
            if not rows:
                return done
            done += len(rows)


def drain_worker(
    url: str, batch: int, transactional: bool, loop: EventLoopChoice = DEFAULT_EVENT_LOOP
) -> int:
    async def noop(job: Job) -> None:
        pass

    async def noop_batch(conn: psycopg.AsyncConnection[Any], jobs: Sequence[Job]) -> None:
        pass

    async def go() -> int:
        pool = await open_pgenough_pool(url, min_size=10, max_size=10, name="profile")
        try:
            handler = BatchHandler(noop_batch) if transactional else noop
            config = WorkerConfig(
                queue=QUEUE, batch_size=batch, concurrency=max(10, batch), maintenance=None
            )
            stats = await Worker(pool, {KIND: handler}, config).run(until_idle=True)
            return stats.completed
        finally:
            await pool.close()

    return eventloop.run(go, loop)


def dispatch_cost(batch: int, batches: int) -> float:
    """Client CPU µs per job of the worker's own path from claimed rows to acknowledged jobs
    (Job objects, dispatch, no-op handlers run, metrics, bookkeeping), with no database:
    the part of a drain that is the worker's alone, measurable on a busy machine."""
    from psycopg_pool import AsyncConnectionPool

    from pgenough.core.statements import record_maker

    try:
        from pgenough.core.worker._executor import Executor
    except ImportError:  # before the worker became a package (issue 34)
        from pgenough.core.worker import _Executor as Executor  # type: ignore[attr-defined,no-redef]

    async def noop(job: Job) -> None:
        pass

    async def go() -> float:
        pool = AsyncConnectionPool("dbname=unused", open=False)
        config = WorkerConfig(
            queue=QUEUE, batch_size=batch, concurrency=max(10, batch), maintenance=None
        )
        executor = Executor(pool, {KIND: noop}, config, name="profile", rng=random.Random())
        now = datetime.now(UTC)
        rows = [(i, QUEUE, KIND, {"n": i}, 0, 1, 20, now, now) for i in range(batch)]
        job_from_row = record_maker(Job, [f.name for f in fields(Job)])
        # Its in-hand state: a Flight since issue 34, the executor's own attributes before.
        flight = getattr(executor, "flight", None)
        inflight = flight.inflight if flight else executor._inflight
        report = flight.report if flight else getattr(executor, "_report", lambda: None)
        cpu0 = cpu()
        for _ in range(batches):
            jobs = [job_from_row(row) for row in rows]
            jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
            executor._dispatch(jobs)
            while inflight:  # noqa: ASYNC110 - turn the loop until handlers ran
                await asyncio.sleep(0)
            if flight:
                assert len(flight.done) == batch
                flight.done = []
            else:
                assert len(executor._done) == batch
                executor._done = []
            report()
        return (cpu() - cpu0) / (batch * batches) * 1e6

    return asyncio.run(go())


def drainer(mode: str) -> Callable[[str, int], int]:
    if mode == "raw":
        return drain_raw
    if mode == "claim-sql":
        return drain_claim_sql
    if mode == "batched-asyncio":
        return lambda url, batch: drain_worker(url, batch, transactional=False, loop="asyncio")
    return lambda url, batch: drain_worker(url, batch, transactional=mode == "batch-tx")


def measure(
    admin_url: str, mode: str, n: int, batch: int, profile: cProfile.Profile | None
) -> tuple[float, float]:
    """One drain in a fresh database: (jobs/s, client CPU µs per job)."""
    name = f"pgenough_profile_{uuid.uuid4().hex[:8]}"
    create_database(admin_url, name)
    url = with_database(admin_url, name)
    try:
        load_jobs(url, mode, n)
        drain = drainer(mode)
        cpu0, t0 = cpu(), time.perf_counter()
        if profile is not None:
            profile.enable()
        done = drain(url, batch)
        if profile is not None:
            profile.disable()
        elapsed, used = time.perf_counter() - t0, cpu() - cpu0
        assert done == n, (mode, done, n)
        return n / elapsed, used / n * 1e6
    finally:
        drop_database(admin_url, name)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    parser.add_argument("--profile", type=int, default=0, help="top N entries by own time")
    parser.add_argument(
        "--dispatch-only",
        action="store_true",
        help="only the worker's client path, no database: min client CPU per job of --rounds",
    )
    args = parser.parse_args(argv)
    refuse_if_busy("bench.worker_profile")
    if args.dispatch_only:
        costs = [
            dispatch_cost(args.batch, max(1, args.jobs // args.batch)) for _ in range(args.rounds)
        ]
        print(
            f"dispatch path, batch {args.batch}: client CPU per job min {min(costs):.2f} us"
            f" (rounds: {', '.join(f'{c:.2f}' for c in costs)})"
        )
        return
    admin_url = os.environ.get("DATABASE_URL")
    if not admin_url:
        sys.exit("set DATABASE_URL to a PostgreSQL server this benchmark may create databases on")
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        sys.exit(f"unknown modes: {', '.join(sorted(unknown))}")
    print(f"jobs {args.jobs}, batch {args.batch}, in one process")
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            rate, per_job = measure(admin_url, mode, args.jobs, args.batch, None)
            results[mode].append((rate, per_job))
            print(f"  {mode:>10}: {rate:>9,.0f} jobs/s  client CPU {per_job:6.1f} us/job")
    if args.rounds > 1:
        print("best of rounds:")
        for mode, rows in results.items():
            rate = max(r for r, _ in rows)
            per_job = min(c for _, c in rows)
            print(f"  {mode:>10}: {rate:>9,.0f} jobs/s  client CPU {per_job:6.1f} us/job")
    if args.profile:
        for mode in modes:
            # CPU time, not wall: a send() that wakes the server can lose the core to it.
            profile = cProfile.Profile(time.process_time)
            measure(admin_url, mode, args.jobs, args.batch, profile)
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.profile)
            print(f"\n== profile: {mode}, batch {args.batch} (sorted by own time) ==")
            print(out.getvalue().split("\n", 4)[-1].rstrip())


if __name__ == "__main__":
    main()
