"""``python -m bench.queue``: the plan, the drains and the latency, then the report (the
method is ``bench.queue``'s docstring)."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench.harness.arguments import int_list
from bench.harness.drain import (
    MAX_SIZINGS,
    MIN_DRAIN_S,
    DrainResult,
    grown,
    one_drain,
    prepare_drain,
)
from bench.harness.latency import (
    LATENCY_SETUP,
    LATENCY_SYSTEMS,
    LatencyResult,
    LatencySystem,
    measure_latency,
)
from bench.harness.machine import fmt_busy, refuse_if_busy, wait_quiet
from bench.harness.report import fmt_ms
from bench.harness.server import DEFAULT_DATA_DIR, Server, version_of
from bench.harness.systems import BROKER_URLS, SYSTEMS, available_systems
from bench.harness.systems.base import GRAPHILE_CONCURRENCY, OURS, PROCRASTINATE_CONCURRENCY, System
from bench.harness.systems.graphile import GRAPHILE_LOCAL_QUEUE, graphile_version
from bench.queue import __doc__ as METHOD
from bench.queue.plan import (
    ALL_SYSTEMS,
    DRAINS,
    REFERENCE_BATCH,
    SYSTEM_ALIASES,
    UNBATCHED,
    Plan,
    parse_systems,
)
from bench.queue.report import plot_drain, report


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.queue", description=METHOD.split("\n\n")[0] if METHOD else None
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="first size of every cell, grown while its drains are too short (default 20000)",
    )
    parser.add_argument(
        "--min-drain",
        type=float,
        default=None,
        help=f"seconds a counted drain lasts at least (default {MIN_DRAIN_S:g})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2,000 jobs, drains of 0.5 s, 1 round, 1 and 4 workers, 50 samples",
    )
    parser.add_argument(
        "--workers", type=int_list, default=None, help="worker processes, e.g. 1,2,4,8,16"
    )
    parser.add_argument("--batches", type=int_list, default=None, help="default 1,100")
    parser.add_argument(
        "--systems",
        default="all",
        help=f"comma-separated, of {', '.join(ALL_SYSTEMS)} or {', '.join(SYSTEM_ALIASES)} "
        "(default all)",
    )
    parser.add_argument(
        "--skip-peers", action="store_true", help="only ours and raw (no peers, no brokers)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help=f"rounds of the throughput matrix: counted drains per cell (default {DRAINS})",
    )
    parser.add_argument("--latency-samples", type=int, default=None, help="default 200")
    parser.add_argument("--no-latency", action="store_true", help="skip add-to-start latency")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="embedded server")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=30.0,
        help="before each measurement, wait up to this many seconds for an idle machine",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help=f"PNG of drain jobs/s vs worker processes at batch {REFERENCE_BATCH}",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.queue")
    selected = parse_systems(args.systems)
    if args.skip_peers:
        print("peers and brokers: skipped (--skip-peers)")
        selected = tuple(s for s in selected if s == "raw" or s in OURS)
    workers = args.workers or ((1, 4) if args.quick else (1, 2, 4))
    min_drain = (
        args.min_drain if args.min_drain is not None else (0.5 if args.quick else MIN_DRAIN_S)
    )
    systems = available_systems(selected)
    plan = Plan(
        jobs=args.jobs or (2_000 if args.quick else 20_000),
        min_drain_s=min_drain,
        workers=workers,
        batches=args.batches or (1, REFERENCE_BATCH),
        pgqueuer_batches=(10, REFERENCE_BATCH),
        procrastinate_workers=tuple(w for w in workers if w in ((1,) if args.quick else (1, 4)))
        or workers[:1],
        latency_samples=args.latency_samples or (50 if args.quick else 200),
        repeat=max(1, args.repeat or (1 if args.quick else DRAINS)),
        systems=systems,
    )

    server = Server.under_test(args.data_dir)
    print(f"server: {server.description}")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
    if server.settings["synchronous_commit"] != "on":
        print("WARNING: synchronous_commit is not on; figures are not comparable to the docs")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"
        f"; pgenough {version_of('pgenough')}, psycopg {version_of('psycopg')}, pgqueuer "
        f"{version_of('pgqueuer')}, asyncpg {version_of('asyncpg')}, procrastinate "
        f"{version_of('procrastinate')}, uvloop {version_of('uvloop')}, graphile-worker "
        f"{graphile_version()}, nats-py {version_of('nats-py')}, aiormq "
        f"{version_of('aiormq')}"
    )
    print(
        f"plan: {plan.jobs:,} jobs per cell first (grown while a drain lasts under "
        f"{plan.min_drain_s:g} s), systems {', '.join(plan.systems) or '-'}, workers "
        f"{plan.workers}, batches {plan.batches}, pgqueuer batches {plan.pgqueuer_batches}, "
        f"procrastinate workers {plan.procrastinate_workers} (concurrency "
        f"{PROCRASTINATE_CONCURRENCY}), graphile-worker concurrency {GRAPHILE_CONCURRENCY} "
        f"local queue {GRAPHILE_LOCAL_QUEUE}, {plan.repeat} round(s), latency "
        f"{0 if args.no_latency else plan.latency_samples} samples\n"
    )

    ctx = multiprocessing.get_context("spawn")
    began = time.perf_counter()
    drains: dict[tuple[System, int, int], DrainResult] = {}
    latencies: dict[LatencySystem, LatencyResult] = {}
    drain_no = 0
    failure: str | None = None
    try:
        urls: dict[str, str] = {}
        for system, _, _ in plan.configurations():
            ops = SYSTEMS[system]
            if ops.database is not None and ops.database not in urls:
                urls[ops.database] = server.database(ops.database)
                ops.setup(urls[ops.database])

        try:
            sizes: dict[tuple[System, int, int], int] = {}
            for round_no in range(1, plan.repeat + 1):
                for system, workers, batch in plan.configurations():
                    ops = SYSTEMS[system]
                    target = urls[ops.database] if ops.database else BROKER_URLS[system]
                    cell = (system, workers, batch)
                    shown = "  -" if system in UNBATCHED else f"{batch:>3}"
                    where = f"[round {round_no}] {system:>14} workers={workers} batch={shown}"
                    for sizing in range(MAX_SIZINGS + 1):
                        jobs = sizes.setdefault(cell, plan.jobs)
                        drain_no += 1
                        name = f"bench_{server.tag}_{drain_no}" if ops.database is None else ""
                        enqueue_s, drain_s, busy = one_drain(
                            ctx, server, system, target, name, batch, workers, jobs, args.quiet_wait
                        )
                        line = (
                            f"{where}: {jobs:>9,} jobs, drain {jobs / drain_s:>9,.0f} jobs/s "
                            f"({drain_s:6.2f} s), enqueue {jobs / enqueue_s:>9,.0f} jobs/s, "
                            f"before: {fmt_busy(busy)}"
                        )
                        if drain_s < plan.min_drain_s and sizing < MAX_SIZINGS:
                            sizes[cell] = grown(jobs, drain_s, plan.min_drain_s)
                            print(
                                f"{line}: under {plan.min_drain_s:g} s, not counted; the cell "
                                f"now loads {sizes[cell]:,} jobs",
                                flush=True,
                            )
                            continue
                        r = drains.setdefault(cell, DrainResult(system, workers, batch))
                        r.jobs.append(jobs)
                        r.enqueue_s.append(enqueue_s)
                        r.drain_s.append(drain_s)
                        r.busy_before.append(busy)
                        r.short.append(drain_s < plan.min_drain_s)
                        note = f" SHORT (under {plan.min_drain_s:g} s)" if r.short[-1] else ""
                        print(line + note, flush=True)
                        break
        except Exception as exc:
            # A drain that cannot run (the server out of connections, a broker gone or
            # refusing a request) ends the measuring, not the report: what was measured
            # before it is printed.
            failure = f"{type(exc).__name__}: {exc}"
            print(f"\nINCOMPLETE, measuring stopped: {failure}", flush=True)

        if not args.no_latency and failure is None:
            latency_urls: dict[LatencySystem, str] = {}
            for lsys in LATENCY_SYSTEMS:
                if lsys != "ours" and lsys not in plan.systems:
                    continue
                if lsys not in urls:  # its throughput runs were not in the plan
                    urls[lsys] = server.database(lsys)
                    LATENCY_SETUP[lsys](urls[lsys])
                latency_urls[lsys] = urls[lsys]
                prepare_drain(urls[lsys])
            busy = wait_quiet(args.quiet_wait)
            latencies = measure_latency(ctx, latency_urls, plan.latency_samples)
            for lsys, result in latencies.items():
                result.busy_before = busy
                print(
                    f"latency {lsys:>13}: p50 {fmt_ms(result.p50)} ms, p99 {fmt_ms(result.p99)} ms"
                    f", before: {fmt_busy(busy)}",
                    flush=True,
                )
    finally:
        server.drop_all()

    report(plan, drains, latencies)
    if args.plot:
        plot_drain(plan, drains, args.plot, server)
    print(f"\ntotal time {time.perf_counter() - began:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "server": server.description,
                    "settings": server.settings,
                    "plan": asdict(plan),
                    "incomplete": failure,
                    "drains": [
                        {**asdict(r), "rates": r.rates, "median_rate": r.median_rate}
                        for r in drains.values()
                    ],
                    "latency": {
                        s: {"p50": r.p50, "p99": r.p99, **asdict(r)} for s, r in latencies.items()
                    },
                },
                indent=2,
            )
        )
    if failure:
        raise SystemExit(f"INCOMPLETE (the figures above are partial): {failure}")


if __name__ == "__main__":
    main()
