"""The cost of one cold ``/search``: API and PostgreSQL CPU per request, capacity, and what
is answered at 1,000 requests/s, for the code before and after each change, in one run.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.search_cost \\
        [--plans 1000000] [--reuse DBNAME] [--before-src PATH] [--rounds 2] [--duration 8]

One database of ``--plans`` simulator plans, ingested through the real commands as
``bench.api`` does (``--reuse`` an already loaded database instead; ``--keep`` leaves the
new one for that), then, per round, each variant in turn (the order reversed every other
round), each its own ``pgenough api`` process (one uvicorn worker, as bench.api runs it).
The variants add one change each, so each row's ratio to the one above is that change:

- ``before`` (only with ``--before-src``: a checkout of the code before, run from its sources
  through ``PYTHONPATH``, ``PGENOUGH_API_MIGRATE=0``): plans_search_idx as migration 0001
  built it, h11, asyncio's loop;
- ``handlers``: this code with the index, the HTTP parser and the loop of ``before``: its
  error handlers on the event loop, request ids without uuid4, the pool's check without a
  round trip;
- ``+ index``: and migration 0007's covering index;
- ``+ uvloop``: and the default event loop (``PGENOUGH_EVENT_LOOP=auto``);
- ``this code``: and httptools, uvicorn's C parser (what the ``service`` extra installs):
  everything at its default.

httptools is hidden from a variant that predates it by a directory first on its
``PYTHONPATH`` whose ``httptools.py`` raises ImportError, so uvicorn falls back to h11.
The index is rebuilt (then ``VACUUM ANALYZE``) when a variant needs the other one. Per variant
(``--duration`` seconds each; wrk as in bench.api, the same Lua scripts):

- ``trivial``: ``GET /health/live`` with 64 connections: the framework's ceiling, the
  baseline of the same run;
- ``cold c8``: the random cold searches of bench.api with 8 connections: as many as the
  bulkhead has slots, so nothing is refused and the rate is the capacity; with the CPU time
  the API process and every ``postgres`` process used (``/proc``), per request. The server
  must run on this machine (its processes are read from ``/proc``) and nothing else should
  use it meanwhile;
- ``cold@1000``: the same searches at a fixed 1,000 requests/s with 64 connections: answered
  per second, the 503 share, p99.

Speed is never asserted; figures go to docs/plan-service/benchmarks.md with this command.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from bench.harness.api_process import Api
from bench.harness.machine import refuse_if_busy
from bench.harness.plan_workers import load
from bench.harness.server import migrate_database, server_facts
from bench.harness.wrk import FIXED_RATE, Result, run_wrk, show

from pgenough.core.db import create_database, drop_database, with_database

MIGRATION_0007 = (
    Path(__file__).resolve().parents[1]
    / "src/pgenough/plans/migrations/0007_search_covering_index.sql"
)
OLD_INDEX = """
CREATE INDEX plans_search_old_idx ON plans.plans (starts_at, id) WHERE ever_online;
DROP INDEX plans.plans_search_idx;
ALTER INDEX plans.plans_search_old_idx RENAME TO plans_search_idx;
"""
"""plans_search_idx as migration 0001 created it."""


@dataclass(frozen=True)
class Variant:
    name: str
    covering: bool
    env: dict[str, str]


@dataclass
class Measured:
    variant: str
    round: int
    trivial: Result
    cold: Result
    api_ms: float
    """API process CPU per cold request, ms."""
    pg_ms: float
    """CPU of every postgres process per cold request, ms."""
    fixed: Result


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu() -> float:
    """CPU seconds of every live process named postgres (the server's, on this machine)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "postgres":
                total += proc_cpu(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile
    return total


def index_is_covering(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes"
            " WHERE schemaname = 'plans' AND indexname = 'plans_search_idx'"
        ).fetchone()
    assert row is not None, "no plans_search_idx"
    return "INCLUDE" in str(row[0])


def set_index(url: str, covering: bool) -> None:
    if index_is_covering(url) == covering:
        return
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(MIGRATION_0007.read_text() if covering else OLD_INDEX)
        conn.execute("VACUUM ANALYZE plans.plans")
    print(
        f"  (plans_search_idx rebuilt {'covering' if covering else 'as in 0001'}"
        f" in {time.perf_counter() - t0:.1f} s)",
        flush=True,
    )


def measure(
    url: str, variant: Variant, rnd: int, duration: int, tmp: Path, log_path: Path
) -> Measured:
    set_index(url, variant.covering)
    with log_path.open("ab") as log:
        api = Api(url, log, tmp, variant.env)
        try:
            trivial = run_wrk(api, f"{variant.name}: trivial", "trivial", duration, tmp, 0)
            show(trivial)
            seed = 100 * rnd
            api0, pg0 = proc_cpu(api.proc.pid), postgres_cpu()
            cold = run_wrk(
                api, f"{variant.name}: cold c8", "cold", duration, tmp, seed + 1, None, 8
            )
            api1, pg1 = proc_cpu(api.proc.pid), postgres_cpu()
            show(cold)
            api_ms = (api1 - api0) / cold.requests * 1000
            pg_ms = (pg1 - pg0) / cold.requests * 1000
            print(f"    CPU per cold search: API {api_ms:.3f} ms, PostgreSQL {pg_ms:.3f} ms")
            fixed = run_wrk(
                api, f"{variant.name}: cold@1000", "cold", duration, tmp, seed + 2, FIXED_RATE
            )
            show(fixed)
        finally:
            api.stop()
    return Measured(variant.name, rnd, trivial, cold, api_ms, pg_ms, fixed)


def report(rows: list[Measured], variants: list[Variant]) -> None:
    base = variants[0].name
    print(
        "\nper variant, median of the rounds (every round above); ratios to "
        f"'{base}' of the same run\n"
    )
    head = (
        f"| {'variant':>12} | trivial rps | cold c8 rps | API ms/search | PG ms/search |"
        " cold@1000 answered/s | 503 share | p99 ms | c8 rps / base | answered / base |"
    )
    print(head)
    print("|" + "|".join("-" * (len(c) + 0) for c in head.split("|")[1:-1]) + "|")
    med: dict[str, dict[str, float]] = {}
    for v in variants:
        mine = [r for r in rows if r.variant == v.name]
        med[v.name] = {
            "trivial": statistics.median(r.trivial.rps for r in mine),
            "c8": statistics.median(r.cold.rps for r in mine),
            "api": statistics.median(r.api_ms for r in mine),
            "pg": statistics.median(r.pg_ms for r in mine),
            "ok": statistics.median(r.fixed.ok_rps for r in mine),
            "share": statistics.median(r.fixed.non2xx / max(1, r.fixed.requests) for r in mine),
            "p99": statistics.median(r.fixed.p99_ms for r in mine),
        }
    for v in variants:
        m, b = med[v.name], med[base]
        print(
            f"| {v.name:>12} | {m['trivial']:11,.0f} | {m['c8']:11,.0f} | {m['api']:13.3f} |"
            f" {m['pg']:12.3f} | {m['ok']:20,.0f} | {m['share']:9.1%} | {m['p99']:6.1f} |"
            f" {m['c8'] / b['c8']:12.2f}x | {m['ok'] / max(1e-9, b['ok']):14.2f}x |"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--plans", type=int, default=1_000_000)
    p.add_argument("--reuse", help="an already loaded database on the same server")
    p.add_argument("--keep", action="store_true", help="leave the new database (for --reuse)")
    p.add_argument("--before-src", type=Path, help="the src/ of a checkout of the code before")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=int, default=8)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.search_cost")
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("set DATABASE_URL to a PostgreSQL server on this machine")
    admin = with_database(url, "postgres")
    print(f"server: {', '.join(f'{k}={v}' for k, v in server_facts(admin).items())}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    hide = Path(tempfile.mkdtemp(prefix="pgenough-bench-no-httptools-"))
    (hide / "httptools.py").write_text("raise ImportError('hidden by bench/search_cost.py')\n")
    h11 = {"PYTHONPATH": str(hide)}
    variants: list[Variant] = []
    if args.before_src:
        before = os.pathsep.join((str(hide), str(args.before_src.resolve())))
        variants.append(
            Variant("before", False, {"PYTHONPATH": before, "PGENOUGH_API_MIGRATE": "0"})
        )
    variants += [
        Variant("handlers", False, {**h11, "PGENOUGH_EVENT_LOOP": "asyncio"}),
        Variant("+ index", True, {**h11, "PGENOUGH_EVENT_LOOP": "asyncio"}),
        Variant("+ uvloop", True, h11),
        Variant("this code", True, {}),
    ]
    name = args.reuse or f"pgenough_bench_search_{uuid.uuid4().hex[:8]}"
    db_url = with_database(admin, name)
    with tempfile.TemporaryDirectory(prefix="pgenough-bench-search-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        try:
            if not args.reuse:
                create_database(admin, name)
                asyncio.run(migrate_database(db_url))
                load(db_url, args.plans, tmp)
            else:
                asyncio.run(migrate_database(db_url))
            rows: list[Measured] = []
            for rnd in range(1, args.rounds + 1):
                print(f"\nround {rnd}", flush=True)
                for v in variants if rnd % 2 else list(reversed(variants)):
                    rows.append(measure(db_url, v, rnd, args.duration, tmp, tmp / "api.log"))
            report(rows, variants)
        finally:
            if not args.reuse and not args.keep:
                drop_database(admin, name)
            elif not args.reuse:
                print(f"kept database {name} (--reuse {name})")
            if args.reuse:
                set_index(db_url, True)


if __name__ == "__main__":
    main()
