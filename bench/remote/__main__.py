"""``python -m bench.remote``: the link's own cost, then the drains and latencies at every RTT
(the method is ``bench.remote``'s docstring)."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from bench.harness.arguments import float_list, int_list
from bench.harness.drain import prepare_drain
from bench.harness.machine import refuse_if_busy
from bench.harness.report import fmt_ms, percentile_99
from bench.harness.server import DEFAULT_DATA_DIR, Server, version_of
from bench.harness.systems import SYSTEMS
from bench.harness.systems.base import OURS_POOL_SIZE
from bench.remote import (
    BATCHES,
    DRAINS,
    LATENCY_SAMPLES,
    LINK_SAMPLES,
    MIN_DRAIN,
    OVERHEAD_SAMPLES,
    RTTS,
    SYSTEM_CHOICES,
    WORKERS,
    CellKey,
    LatencyKind,
)
from bench.remote import __doc__ as METHOD
from bench.remote.drains import Cell, Plan, run_drains
from bench.remote.latency import Latency, measure_latency
from bench.remote.link import Link, round_trip_times
from bench.remote.report import report

# -- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.remote", description=(METHOD or "").split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="smoke run (about 2 minutes)")
    parser.add_argument("--rtts", type=float_list, default=None, help="ms, default 0,1,5,20")
    parser.add_argument("--batches", type=int_list, default=None, help="default 1,100")
    parser.add_argument("--workers", type=int_list, default=None, help="default 1,4")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEM_CHOICES),
        help=f"comma-separated, of {', '.join(SYSTEM_CHOICES)}",
    )
    parser.add_argument("--repeat", type=int, default=None, help=f"default {DRAINS}")
    parser.add_argument("--min-drain", type=float, default=None, help=f"default {MIN_DRAIN:g}")
    parser.add_argument(
        "--latency-samples", type=int, default=None, help=f"default {LATENCY_SAMPLES}"
    )
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument(
        "--no-prefetch",
        action="store_true",
        help="no drains of ours at twice the batch of concurrency (at the longest RTT)",
    )
    parser.add_argument("--quiet-wait", type=float, default=None, help="default 10 (quick: 0)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.remote")
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    unknown = [s for s in systems if s not in SYSTEM_CHOICES]
    if unknown or not systems:
        raise SystemExit(f"--systems: unknown {unknown} (known: {', '.join(SYSTEM_CHOICES)})")
    plan = Plan(
        rtts=args.rtts or ((0.0, 20.0) if args.quick else RTTS),
        batches=args.batches or BATCHES,
        workers=args.workers or ((1,) if args.quick else WORKERS),
        systems=tuple(s for s in SYSTEM_CHOICES if s in systems),
        repeat=max(1, args.repeat or (1 if args.quick else DRAINS)),
        min_drain_s=args.min_drain
        if args.min_drain is not None
        else (0.5 if args.quick else MIN_DRAIN),
        latency_samples=0
        if args.no_latency
        else (args.latency_samples or (20 if args.quick else LATENCY_SAMPLES)),
        quick=args.quick,
        prefetch=not args.no_prefetch,
    )
    quiet_wait = args.quiet_wait if args.quiet_wait is not None else (0.0 if args.quick else 10.0)
    server = Server.under_test(args.data_dir)
    print(f"server: {server.description}")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python"
        f" {platform.python_version()}; pgenough {version_of('pgenough')}, psycopg"
        f" {version_of('psycopg')}, uvloop {version_of('uvloop')}"
    )
    print(
        f"plan: RTTs {', '.join(f'{r:g}' for r in plan.rtts)} ms, batches {plan.batches},"
        f" workers {plan.workers}, systems {', '.join(plan.systems)}, {plan.repeat} round(s),"
        f" drains of at least {plan.min_drain_s:g} s, latency {plan.latency_samples} samples"
        f" (ours: concurrency max(10, batch), pools of {OURS_POOL_SIZE})\n"
    )
    ctx = multiprocessing.get_context("spawn")
    began = time.perf_counter()
    cells: dict[CellKey, Cell] = {}
    latencies: dict[tuple[float, LatencyKind], Latency] = {}
    links: dict[float, list[float]] = {}
    overhead: dict[str, float] = {}
    try:
        direct: dict[str, str] = {}
        for name in ("raw", "ours"):
            direct[name] = server.database(name)
            SYSTEMS["raw" if name == "raw" else "ours-batched"].setup(direct[name])

        # The proxy's own cost: a round trip direct, and through it at 0 ms.
        link = Link(server.admin_url, 0.0)
        try:
            plain, proxied = [], []
            for _ in range(4):  # interleaved: the machine's mood weighs on both alike
                plain += round_trip_times(direct["ours"], OVERHEAD_SAMPLES // 4)
                proxied += round_trip_times(link.url(direct["ours"]), OVERHEAD_SAMPLES // 4)
        finally:
            link.close()
        overhead = {
            "direct_p50": statistics.median(plain),
            "proxy_p50": statistics.median(proxied),
            "direct_p99": percentile_99(plain),
            "proxy_p99": percentile_99(proxied),
        }
        print(
            f"the link's own cost ({link.loop}): SELECT 1 p50 {fmt_ms(overhead['direct_p50'])} ms"
            f" direct, {fmt_ms(overhead['proxy_p50'])} ms through the proxy at 0 ms"
            f" ({(overhead['proxy_p50'] - overhead['direct_p50']) * 1000:+.2f}); p99"
            f" {fmt_ms(overhead['direct_p99'])} / {fmt_ms(overhead['proxy_p99'])} ms\n",
            flush=True,
        )

        for rtt in plan.rtts:
            link = Link(server.admin_url, rtt)
            try:
                links[rtt] = round_trip_times(link.url(direct["ours"]), LINK_SAMPLES)
                print(
                    f"== RTT {rtt:g} ms: SELECT 1 through the link p50"
                    f" {fmt_ms(statistics.median(links[rtt]))} ms",
                    flush=True,
                )
                link_ms = statistics.median(links[rtt]) * 1000
                run_drains(ctx, plan, server, direct, link, rtt, link_ms, cells, quiet_wait)
                if plan.latency_samples:
                    for db in direct.values():
                        prepare_drain(db)
                    urls = {"ours": link.url(direct["ours"]), "raw": link.url(direct["raw"])}
                    got = measure_latency(ctx, urls, plan.latency_samples, rtt)
                    for kind, lat in got.items():
                        latencies[(rtt, kind)] = lat
                        print(
                            f"[rtt {rtt:g} ms] latency {kind:>4}: p50 {fmt_ms(lat.p50)} ms,"
                            f" p99 {fmt_ms(lat.p99)} ms (enqueue call p50"
                            f" {fmt_ms(lat.enqueue_p50)} ms)",
                            flush=True,
                        )
            finally:
                link.close()
    finally:
        server.drop_all()

    report(plan, cells, latencies, links)
    print(f"\ntotal time {time.perf_counter() - began:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "server": server.description,
                    "settings": server.settings,
                    "plan": asdict(plan),
                    "overhead": overhead,
                    "links": {f"{k:g}": v for k, v in links.items()},
                    "cells": [
                        {
                            **asdict(c),
                            "rates": c.rates,
                            "rate": c.rate,
                            "round_trips_per_job": c.round_trips_per_job,
                        }
                        for c in cells.values()
                    ],
                    "latency": [
                        {**asdict(v), "p50": v.p50, "p99": v.p99} for v in latencies.values()
                    ],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
