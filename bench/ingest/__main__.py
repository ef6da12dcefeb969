"""``python -m bench.ingest``: per size a fresh database, the ceilings, the end-to-end runs and
what they are checked against, then the summary (the method is ``bench.ingest``'s
docstring)."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from bench.harness.machine import refuse_if_busy
from bench.harness.plan_workers import PROCESS_CONCURRENCY
from bench.harness.report import down, up
from bench.harness.server import DEFAULT_DATA_DIR, ServerUnderTest, migrate_database, server_facts
from bench.ingest import DEFAULT_SIZES, QUICK_SIZES
from bench.ingest.ceilings import Ceilings, measure_ceilings
from bench.ingest.end_to_end import EndToEnd, Processing, end_to_end
from bench.ingest.report import SizeResult, print_size, print_summary

from pgenough.core.db import create_database, drop_database, with_database

# --- end to end -------------------------------------------------------------------------------


def verify(plans: int, ceilings: Ceilings, run: EndToEnd) -> list[str]:
    problems = []
    if run.status != "PROCESSED":
        problems.append(f"run {run.run_id} is {run.status}, not PROCESSED")
    if run.plans_staged + run.plans_skipped != plans:
        problems.append(
            f"plans_staged + plans_skipped = {run.plans_staged} + {run.plans_skipped} != {plans}"
        )
    if run.plans_staged != ceilings.records:
        problems.append(f"plans_staged {run.plans_staged} != parsed records {ceilings.records}")
    if run.bytes != ceilings.size_bytes:
        problems.append(f"run bytes {run.bytes} != snapshot file {ceilings.size_bytes}")
    if run.plans_in_table != ceilings.distinct_keys:
        problems.append(
            f"plans.plans has {run.plans_in_table} rows, expected {ceilings.distinct_keys}"
            " distinct (base_plan_id, plan_id)"
        )
    if run.rows_failed:
        problems.append(f"{run.rows_failed} row(s) failed")
    return problems


# --- one size ---------------------------------------------------------------------------------


def bench_size(
    server: ServerUnderTest, plans: int, args: argparse.Namespace, tmp: Path
) -> SizeResult | None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n== {plans:,} plans (load average {load})", flush=True)
    names: list[str] = []
    work = tmp / f"n{plans}"
    work.mkdir()
    snapshot = work / "snapshot.xml"
    try:
        name = f"pgenough_bench_ingest_{plans}_{uuid.uuid4().hex[:8]}"
        create_database(server.admin_url, name)
        names.append(name)
        url = with_database(server.admin_url, name)
        asyncio.run(migrate_database(url))
        ceilings = measure_ceilings(url, snapshot, plans, args.repeat)
        snapshot.unlink()
        result = SizeResult(plans, name, ceilings)
        for i in range(args.e2e_repeat):
            if i:  # every end-to-end repetition ingests into a fresh, empty database
                name = f"pgenough_bench_ingest_{plans}_{uuid.uuid4().hex[:8]}"
                create_database(server.admin_url, name)
                names.append(name)
                url = with_database(server.admin_url, name)
                asyncio.run(migrate_database(url))
            logs = work / f"e2e{i + 1}"
            logs.mkdir()
            processing = Processing(args.process_workers, args.process_concurrency)
            run, problems = end_to_end(url, plans, logs, logs, args.timeout, processing)
            if run is None:
                result.problems += problems
                _show_logs(logs)
                break
            problems = verify(plans, ceilings, run)
            result.problems += problems
            result.runs.append(run)
            print(
                f"  e2e #{i + 1}: fetch {run.fetch_s:.2f}s + process {run.process_s:.2f}s ="
                f" {run.e2e_s:.2f}s, {down(plans / run.e2e_s)} plans/s, fetch RSS"
                f" {up(run.fetch_rss_kib / 1024)} MiB, checks {'FAILED' if problems else 'ok'}",
                flush=True,
            )
        return result
    finally:
        snapshot.unlink(missing_ok=True)
        if args.keep:
            print(f"  kept database(s): {', '.join(names)}")
        else:
            for name in names:
                drop_database(server.admin_url, name)


def _show_logs(logs: Path) -> None:
    for log in sorted(logs.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-15:]
        print(f"  --- tail of {log.name}:")
        for line in lines:
            print(f"    {line}")


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ingest",
        description="End-to-end ingestion benchmark (fetch + process) with parse and COPY"
        " ceilings; see the module docstring.",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="comma-separated snapshot sizes in plans (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="sizes 10000,50000 (smoke run)")
    parser.add_argument("--keep", action="store_true", help="do not drop the databases")
    parser.add_argument(
        "--repeat", type=int, default=3, help="repetitions of each ceiling (median; default 3)"
    )
    parser.add_argument(
        "--e2e-repeat",
        type=int,
        default=1,
        help="end-to-end repetitions per size, each on a fresh database (median; default 1)",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds allowed to each worker process"
    )
    parser.add_argument(
        "--process-workers",
        type=int,
        default=1,
        help="process worker processes, started together after the fetch (default 1)",
    )
    parser.add_argument(
        "--process-concurrency",
        type=int,
        default=PROCESS_CONCURRENCY,
        help="chunk tasks per process worker (default %(default)s)",
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="embedded server")
    args = parser.parse_args(argv)
    raw = ",".join(str(s) for s in QUICK_SIZES) if args.quick else args.sizes
    try:
        args.size_list = [int(s.replace("_", "")) for s in raw.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes: expected comma-separated integers, got {raw!r}")
    if not args.size_list or min(args.size_list) < 1 or args.repeat < 1 or args.e2e_repeat < 1:
        parser.error("sizes, --repeat and --e2e-repeat must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.ingest")
    server = ServerUnderTest.find(args.data_dir)
    facts = server_facts(server.admin_url)
    print(
        f"pgenough ingest benchmark: {platform.python_implementation()}"
        f" {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}"
    )
    print(f"server: {server.label}; " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    print(
        f"sizes {args.size_list}; ceilings x{args.repeat} (median), end to end"
        f" x{args.e2e_repeat}; {args.process_workers} process worker(s) start after the"
        f" fetch, concurrency {args.process_concurrency} each"
    )
    results: list[SizeResult] = []
    with tempfile.TemporaryDirectory(prefix="pgenough-bench-ingest-", dir="/tmp") as tmp:
        for plans in args.size_list:
            result = bench_size(server, plans, args, Path(tmp))
            if result is not None:
                results.append(result)
                print_size(result)
    ok = print_summary(results)
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if not ok:
        print("\nSOME CHECKS FAILED")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
