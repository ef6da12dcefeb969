"""``python -m bench.api``: load the plans, then the searches alone, during ingestion, streamed
and deep, and the summary (the method is ``bench.api``'s docstring)."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench.api import (
    CELLS,
    DEFAULT_PLANS,
    QUICK_PLANS,
    TARGET_COLD_P99_MS,
    TARGET_HOT_RATIO,
    TARGET_STREAM_RSS_GROWTH,
)
from bench.api.ingestion import during_ingestion, ingestion_summary, plot_search, search_curve
from bench.api.streaming import Streamed, deep_pages, streamed_ranges
from bench.harness.api_process import CACHE_TTL, Api
from bench.harness.machine import refuse_if_busy
from bench.harness.plan_workers import load, vacuum_plans
from bench.harness.report import down, print_target, up
from bench.harness.server import (
    DEFAULT_DATA_DIR,
    ServerUnderTest,
    autovacuum_on,
    migrate_database,
    server_facts,
)
from bench.harness.wrk import CONNECTIONS, FIXED_RATE, PAGE, Result, run_wrk, show

from pgenough.core.db import create_database, drop_database, with_database

# --- summary ----------------------------------------------------------------------------------


def summary(by: dict[str, Result], streamed: list[Streamed]) -> None:
    print("\nratios (same run) and targets:")
    small, whole = streamed
    growth = whole.rss_peak_kib / small.rss_peak_kib
    print_target(
        f"API peak RSS, every event / ~10k events <= {TARGET_STREAM_RSS_GROWTH:g} (flat)",
        growth <= TARGET_STREAM_RSS_GROWTH,
        f"{up(growth, 3)} = {whole.rss_peak_kib / 1024:.1f} / {small.rss_peak_kib / 1024:.1f} MiB"
        f" for {whole.events:,} / {small.events:,} events",
    )
    offset, cursor, near = (r for name, r in by.items() if name.startswith(("offset=", "cursor@")))
    print(
        f"  one client, p50: {offset.name} {up(offset.p50_ms, 2)} ms, {cursor.name}"
        f" {up(cursor.p50_ms, 2)} ms, {near.name} {up(near.p50_ms, 2)} ms; offset / cursor"
        f" {down(offset.p50_ms / cursor.p50_ms, 1)}x; cursor / offset=1"
        f" {up(cursor.p50_ms / near.p50_ms, 2)}x"
    )
    hot = by["hot"].ok_rps / by["trivial"].ok_rps
    print_target(
        f"hot / trivial 2xx rps >= {TARGET_HOT_RATIO}",
        hot >= TARGET_HOT_RATIO,
        f"{down(hot, 3)} = {down(by['hot'].ok_rps)} / {down(by['trivial'].ok_rps)}",
    )
    fixed = by["cold@1000"]
    print_target(
        f"cold p99 at ~1,000 rps <= {TARGET_COLD_P99_MS:g} ms, no 503",
        fixed.p99_ms <= TARGET_COLD_P99_MS and fixed.non2xx == 0,
        f"{up(fixed.p99_ms, 2)} ms at {down(fixed.rps)} rps achieved, non-2xx {fixed.non2xx}",
    )


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.api",
        description="pgenough api under wrk: trivial, hot, cold, cold at 1,000/s, cold during"
        " ingestion; see the module docstring.",
    )
    parser.add_argument("--plans", type=int, default=None, help="plans to load (default 1M)")
    parser.add_argument("--duration", type=int, default=None, help="seconds per scenario (10)")
    parser.add_argument("--quick", action="store_true", help="100k plans, 3 s per scenario")
    parser.add_argument("--keep", action="store_true", help="do not drop the database")
    parser.add_argument(
        "--skip-ingestion", action="store_true", help="leave out the during-ingestion scenarios"
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="embedded server")
    parser.add_argument(
        "--no-alter-system",
        action="store_true",
        help="stop if the server has autovacuum off instead of turning it on for the run",
    )
    parser.add_argument(
        "--skip-curve", action="store_true", help="leave out the p99 vs fetch rate curve"
    )
    parser.add_argument(
        "--placements", help="during ingestion, only these (comma-separated: shared, pinned)"
    )
    parser.add_argument(
        "--cells",
        type=int,
        default=len(CELLS),
        choices=range(1, len(CELLS) + 1),
        help="during ingestion, the first N cells per placement (1: no pacing only; 2: and"
        " the default pacing; 3: and pacing with nice)",
    )
    parser.add_argument(
        "--plot-search",
        type=Path,
        default=None,
        metavar="PNG",
        help="draw /search p99 vs fetch rate there (e.g. docs/img/boundary-search.png)",
    )
    args = parser.parse_args(argv)
    if args.plans is None:
        args.plans = QUICK_PLANS if args.quick else DEFAULT_PLANS
    if args.duration is None:
        args.duration = 3 if args.quick else 10
    if args.plans < 1 or args.duration < 1:
        parser.error("--plans and --duration must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.api")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install -y wrk)")
    server = ServerUnderTest.find(args.data_dir)
    facts = server_facts(server.admin_url)
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()
    print(
        f"pgenough api benchmark: {platform.python_implementation()}"
        f" {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()};"
        f" wrk {wrk_version[1] if len(wrk_version) > 1 else '?'} -t1 -c{CONNECTIONS};"
        f" load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"server: {server.label}; " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    print(
        f"plans {args.plans:,}; {args.duration}s per scenario; API: one process, one uvicorn"
        f" worker, defaults except PGENOUGH_API_CACHE_TTL={CACHE_TTL}",
        flush=True,
    )
    with autovacuum_on(server.admin_url, not args.no_alter_system):
        name = f"pgenough_bench_api_{uuid.uuid4().hex[:8]}"
        create_database(server.admin_url, name)
        db_url = with_database(server.admin_url, name)
        api: Api | None = None
        with tempfile.TemporaryDirectory(prefix="pgenough-bench-api-", dir="/tmp") as tmp_name:
            tmp = Path(tmp_name)
            try:
                asyncio.run(migrate_database(db_url))
                load(db_url, args.plans, tmp)
                with (tmp / "api.log").open("ab") as api_log:
                    api = Api(db_url, api_log, tmp)
                    print(f"api: {api.base} (pid {api.proc.pid})\n\nscenarios:", flush=True)
                    by: dict[str, Result] = {}
                    for rname, kind, seed, rate in (
                        ("trivial", "trivial", 0, None),
                        ("hot", "hot", 0, None),
                        ("cold", "cold", 1, None),
                        ("cold@1000", "cold", 2, FIXED_RATE),
                    ):
                        by[rname] = run_wrk(api, rname, kind, args.duration, tmp, seed, rate)
                        show(by[rname])
                    print("\nwhole ranges without limit (streamed):", flush=True)
                    streamed = streamed_ranges(api, db_url)
                    print(f"\ndeep pages (limit={PAGE}):", flush=True)
                    for r in deep_pages(api, args.duration, tmp, streamed[1].events):
                        by[r.name] = r
                    summary(by, streamed)
                    if not args.skip_ingestion:
                        print("\nduring ingestion (cold@1000 for each whole phase):", flush=True)
                        alone, cells = during_ingestion(
                            api,
                            db_url,
                            args.plans,
                            tmp,
                            args.duration,
                            frozenset(args.placements.split(",")) if args.placements else None,
                            args.cells,
                        )
                        ingestion_summary(alone, cells)
                    if not args.skip_curve:
                        print(
                            f"\n/search p99 vs fetch rate (cold@1000, {args.duration} s windows,"
                            " shared placement):",
                            flush=True,
                        )
                        points = search_curve(api, db_url, args.plans, args.duration, tmp)
                        vacuum_plans(db_url)
                        alone_now = run_wrk(
                            api, "cold@1000 alone", "cold", args.duration, tmp, 7, FIXED_RATE
                        )
                        show(alone_now)
                        if args.plot_search:
                            plot_search(args.plot_search, alone_now, points, args.plans)
            except BaseException:
                for log in sorted(tmp.glob("*.log")):
                    print(f"--- {log.name} (tail)", file=sys.stderr)
                    print(
                        "\n".join(log.read_text(errors="replace").splitlines()[-20:]),
                        file=sys.stderr,
                    )
                raise
            finally:
                if api is not None:
                    api.stop()
                if args.keep:
                    print(f"kept database {name}")
                else:
                    drop_database(server.admin_url, name)
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
