"""How the claim is planned: the cost of each way to keep it off a cached generic plan.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.claim_plans \\
        [--jobs 30000] [--rounds 3] [--batch 10]

The trap (issue 20): psycopg prepares a statement after 5 executions and PostgreSQL then keeps
a generic plan when it costs no more than the custom ones did; built while the jobs table was
empty, the claim's is a Seq Scan + Sort of the whole table, kept until an ANALYZE. The ways
out, each measured here on the product's own claim statement (``core/sql/queue.sql``), one
synchronous loop on one connection draining ``--jobs`` no-op jobs (claim ``--batch``,
acknowledging the previous batch in the same statement, as the worker does), in a database of
its own, the modes taking turns in each of ``--rounds`` rounds:

- ``prepared, planned full``: psycopg's default, the table full and analysed when the plan
  was cached: the generic plan is the index plan, the best case a prepared statement gets;
- ``force_custom_plan``: prepared, the session's ``plan_cache_mode = force_custom_plan``
  (planned at each execution, parsed once) and ``enable_sort = off``: what pgenough's claim
  loop does on the connection it holds (``worker._executor.Executor._hold``);
- ``unprepared``: ``prepare=False`` (``PLAN_EACH_TIME``): parsed and planned at each
  execution, no session setting: what pgenough does for its other hot statements;
- ``prepared, planned empty``: the trap: primed on the empty analysed table, then the burst;
  only a few claims are timed (each reads the whole table), under a statement timeout.

Per mode: jobs/s (median of the rounds, each drain's seconds shown) and the CPU time of the
connection's backend per job (``/proc``: the server must run on this machine), and the ratio
to the first mode. Speed is never asserted; figures go to docs/benchmarks.md with this
command.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from bench.harness.machine import refuse_if_busy
from bench.harness.systems.raw import RAW_OPTIONS

from pgenough.core import migrate
from pgenough.core._sql import load
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.core.queue import int_array

_Q = load("queue")
MODES = ("prepared, planned full", "force_custom_plan", "unprepared")
TRAP = "prepared, planned empty"
TRAP_CLAIMS = 5
TRAP_TIMEOUT = 60.0


@dataclass
class Figures:
    rates: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    cpu_per_job: list[float] = field(default_factory=list)


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) the backend ``pid`` has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_jobs(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE pgenough.jobs")
        conn.execute(
            "INSERT INTO pgenough.jobs (kind) SELECT 'noop' FROM generate_series(1, %s)", (n,)
        )
        conn.execute("VACUUM ANALYZE pgenough.jobs")


def claim(conn: psycopg.Connection[Any], params: dict[str, Any], prepare: bool | None) -> int:
    rows = conn.execute(_Q["claim"], params, prepare=prepare).fetchall()
    params["done_ids"] = int_array(r[0] for r in rows)
    params["done_attempts"] = int_array(r[5] for r in rows)
    # As text, like the ids: one parameter type for every execution of the statement.
    params["done_created"] = "{" + ",".join(f'"{r[8].isoformat()}"' for r in rows) + "}"
    return len(rows)


def params_for(batch: int) -> dict[str, Any]:
    return {
        "done_ids": "{}",
        "done_attempts": "{}",
        "done_created": "{}",
        "queue": "default",
        "limit": batch,
        "lease": 30.0,
        "worker": "bench",
    }


def drain(url: str, mode: str, jobs: int, batch: int) -> tuple[float, float, float]:
    """(jobs/s, seconds, backend CPU seconds per job) of one drain in ``mode``."""
    load_jobs(url, jobs)
    # As the worker's claim loop holds its connection (executor's _hold), and as the raw
    # ceiling of bench.queue does.
    options = RAW_OPTIONS if mode == "force_custom_plan" else ""
    prepare = False if mode == "unprepared" else None
    with psycopg.connect(url, autocommit=True, options=options) as conn:
        pid = conn.info.backend_pid
        params = params_for(batch)
        cpu0, t0, done = backend_cpu(pid), time.perf_counter(), 0
        while n := claim(conn, params, prepare):
            done += n
        claim(conn, params, prepare)  # the last acknowledgements
        seconds = time.perf_counter() - t0
        cpu = backend_cpu(pid) - cpu0
    return done / seconds, seconds, cpu / done


def trap(url: str, jobs: int, batch: int) -> tuple[float, int]:
    """Median seconds per claim on a plan cached while the table was empty; claims timed."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE pgenough.jobs")
        conn.execute("ANALYZE pgenough.jobs")
    with psycopg.connect(
        url, autocommit=True, options=f"-c statement_timeout={int(TRAP_TIMEOUT * 1000)}"
    ) as conn:
        params = params_for(batch)
        for _ in range(12):  # prepared at the 6th, the generic plan cached at the 11th
            claim(conn, params, None)
        with psycopg.connect(url, autocommit=True) as other:
            other.execute(
                "INSERT INTO pgenough.jobs (kind) SELECT 'noop' FROM generate_series(1, %s)",
                (jobs,),
            )
        took = []
        for _ in range(TRAP_CLAIMS):
            t0 = time.perf_counter()
            try:
                claim(conn, params, None)
            except psycopg.errors.QueryCanceled:
                took.append(TRAP_TIMEOUT)
                break
            took.append(time.perf_counter() - t0)
    return statistics.median(took), len(took)


async def _migrate(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.claim_plans", description=__doc__)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args(argv)
    refuse_if_busy("bench.claim_plans")
    admin = with_database(os.environ.get("DATABASE_URL") or "", "postgres")
    if not os.environ.get("DATABASE_URL"):
        raise SystemExit("set DATABASE_URL to a server on this machine (its backend's CPU is read)")
    name = f"bench_claim_plans_{os.getpid()}"
    create_database(admin, name)
    url = with_database(admin, name)
    try:
        asyncio.run(_migrate(url))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE pgenough.jobs SET (autovacuum_enabled = false)")
            version = conn.execute("SHOW server_version").fetchone()
        print(f"server: PostgreSQL {version[0] if version else '?'}; {args.jobs:,} jobs a drain,")
        print(f"batch {args.batch}, {args.rounds} rounds, autovacuum off for the table")
        figures = {mode: Figures() for mode in MODES}
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                rate, seconds, cpu = drain(url, mode, args.jobs, args.batch)
                f = figures[mode]
                f.rates.append(rate)
                f.seconds.append(seconds)
                f.cpu_per_job.append(cpu)
                print(f"  round {r + 1} {mode:<24} {rate:>9,.0f} jobs/s in {seconds:.2f} s")
        base = figures[MODES[0]]
        print()
        print(f"| mode | jobs/s (median) | drains (s) | backend CPU µs/job | vs {MODES[0]} |")
        print("| --- | ---: | --- | ---: | ---: |")
        for mode, f in figures.items():
            rate, cpu = statistics.median(f.rates), statistics.median(f.cpu_per_job)
            ratio = rate / statistics.median(base.rates)
            drains = ", ".join(f"{s:.2f}" for s in f.seconds)
            print(f"| {mode} | {rate:,.0f} | {drains} | {cpu * 1e6:.1f} | {ratio:.2f}x |")
        per_claim, n = trap(url, args.jobs, args.batch)
        print(
            f"| {TRAP} | {args.batch / per_claim:,.0f} | {n} claims timed, median"
            f" {per_claim * 1000:,.0f} ms each | - | "
            f"{args.batch / per_claim / statistics.median(base.rates):.4f}x |"
        )
    finally:
        drop_database(admin, name)


if __name__ == "__main__":
    main()
