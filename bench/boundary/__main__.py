"""``python -m bench.boundary [fanout|connections]``: the sub-benchmarks on the server under
test, their reports and images (the method is ``bench.boundary``'s docstring)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from bench.boundary import __doc__ as METHOD
from bench.boundary.connections import ConnPoint, connections, report_connections
from bench.boundary.fanout import FanoutPoint, fanout, report_fanout
from bench.boundary.plots import plot_connections, plot_fanout
from bench.harness.machine import refuse_if_busy
from bench.harness.server import DEFAULT_DATA_DIR, Server, version_of

# -- main ------------------------------------------------------------------------------------------

SUBBENCHMARKS = ("fanout", "connections")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.boundary", description=METHOD.split("\n\n")[0] if METHOD else None
    )
    parser.add_argument(
        "which",
        nargs="*",
        default=[],
        help="sub-benchmarks to run: fanout, connections (default: both)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 200 messages, subscribers 1,4,16; workers 1,4; 1,000 jobs",
    )
    parser.add_argument("--messages", type=int, default=None, help="per fan-out point (2000)")
    parser.add_argument(
        "--seconds", type=float, default=None, help="most publishing per fan-out point (5)"
    )
    parser.add_argument("--jobs", type=int, default=None, help="per drain (default 5000)")
    parser.add_argument("--pool-size", type=int, default=8, help="PgBouncer default_pool_size")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="embedded server")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=10.0,
        help="before each measurement, wait up to this many seconds for an idle machine",
    )
    parser.add_argument(
        "--plot-fanout",
        type=Path,
        default=None,
        help="PNG of the fan-out (e.g. docs/img/boundary-fanout.png); none without it",
    )
    parser.add_argument(
        "--plot-connections",
        type=Path,
        default=None,
        help="PNG of connections vs workers (e.g. docs/img/boundary-connections.png)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument(
        "--replot",
        type=Path,
        default=None,
        help="only render the images asked for (--plot-*) from a --json file",
    )
    return parser.parse_args(argv)


@contextlib.contextmanager
def open_server(data_dir: Path) -> Iterator[Server]:
    server = Server.under_test(data_dir)
    try:
        yield server
    finally:
        server.drop_all()


def replot(path: Path, fanout_png: Path | None, connections_png: Path | None) -> None:
    """Render the images asked for again from a ``--json`` file, without measuring anything."""
    if not fanout_png and not connections_png:
        sys.exit("--replot draws what --plot-fanout / --plot-connections name: give one")
    saved = json.loads(path.read_text())
    note = saved.get("note", "")
    fanout_fields = {f.name for f in fields(FanoutPoint)}
    conn_fields = {f.name for f in fields(ConnPoint)}
    if "fanout" in saved and fanout_png:
        points = [
            FanoutPoint(**{k: v for k, v in p.items() if k in fanout_fields})
            for p in saved["fanout"]["points"]
        ]
        plot_fanout(points, fanout_png, note)
    if "connections" in saved and connections_png:
        cpoints = [
            ConnPoint(**{k: v for k, v in p.items() if k in conn_fields})
            for p in saved["connections"]["points"]
        ]
        plot_connections(
            cpoints,
            connections_png,
            int(saved["settings"]["max_connections"]),
            int(saved["connections"].get("pool_size", 8)),
            note,
        )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.boundary")
    if args.replot:
        replot(args.replot, args.plot_fanout, args.plot_connections)
        return
    which = args.which or list(SUBBENCHMARKS)
    unknown = set(which) - set(SUBBENCHMARKS)
    if unknown:
        sys.exit(f"unknown sub-benchmark(s) {sorted(unknown)}; choose from {SUBBENCHMARKS}")
    subscribers = (1, 4, 16) if args.quick else (1, 2, 4, 8, 16, 32, 64)
    messages = args.messages or (200 if args.quick else 2_000)
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    workers = (1, 4) if args.quick else (1, 2, 4, 8, 16)
    jobs = args.jobs or (1_000 if args.quick else 5_000)
    note = f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}"
    results: dict[str, Any] = {"note": note}
    with open_server(args.data_dir) as server:
        print(f"server: {server.description}")
        print("settings: " + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
        print(
            f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python "
            f"{platform.python_version()}; pgenough {version_of('pgenough')}, psycopg "
            f"{version_of('psycopg')}, nats-py {version_of('nats-py')}, matplotlib "
            f"{version_of('matplotlib')}\n"
        )
        results["settings"] = server.settings
        if "fanout" in which:
            began = time.perf_counter()
            points = fanout(server, subscribers, messages, seconds, args.quiet_wait)
            report_fanout(points)
            if args.plot_fanout:
                plot_fanout(points, args.plot_fanout, note)
            took = time.perf_counter() - began
            print(f"fanout took {took:.0f} s\n")
            results["fanout"] = {
                "messages": messages,
                "publish_seconds": seconds,
                "seconds": took,
                "points": [
                    {
                        **asdict(p),
                        "delivered_rate": p.delivered_rate,
                        "publish_rate": p.publish_rate,
                    }
                    for p in points
                ],
            }
        if "connections" in which:
            began = time.perf_counter()
            cpoints, checks, bouncer = connections(
                server, workers, jobs, args.pool_size, args.quiet_wait
            )
            report_connections(cpoints, checks, server.settings["max_connections"])
            if args.plot_connections:
                plot_connections(
                    cpoints,
                    args.plot_connections,
                    int(server.settings["max_connections"]),
                    args.pool_size,
                    note,
                )
            took = time.perf_counter() - began
            print(f"connections took {took:.0f} s")
            results["connections"] = {
                "jobs": jobs,
                "pool_size": args.pool_size,
                "seconds": took,
                "pgbouncer": bouncer,
                "points": [{**asdict(p), "rate": p.rate} for p in cpoints],
                "checks": asdict(checks) if checks else None,
            }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
