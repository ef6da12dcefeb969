"""``python -m bench.replica``: a durable primary and hot standby, the plans loaded, then the
searches on each alone and during ingestion, judged (the method is ``bench.replica``'s
docstring)."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.harness.api_process import Api
from bench.harness.machine import refuse_if_busy
from bench.harness.plan_workers import last_run, load, process_phase, vacuum_plans, worker_env
from bench.harness.processes import Simulator, plans_command
from bench.harness.report import down, up
from bench.harness.server import migrate_database, server_facts
from bench.harness.under_load import Cell, Placement, ingest_cell
from bench.harness.wrk import Result, run_wrk, show
from bench.replica import (
    DEFAULT_PLANS,
    QUICK_PLANS,
    RATES,
    STANDBY_FACTS,
    TARGET_P99_MS,
    TARGET_RATIO,
)
from bench.replica import __doc__ as METHOD
from bench.replica.sampling import DurablePair, LagSamples, pin_tree, sampling
from tests.helpers.standby import BIN, missing


def sustained_rate(
    api: Api, pair: DurablePair, placement: Placement, duration: int, tmp: Path
) -> tuple[Result, LagSamples]:
    """The first of RATES the API answers alone with p99 <= TARGET_P99_MS and no 503, and
    what was sampled through it."""
    r: Result | None = None
    for i, rate in enumerate(RATES):
        vacuum_plans(pair.primary_url)
        with sampling(pair.primary_url, api, pair) as samples:
            r = run_wrk(
                api, f"cold@{rate} alone [{placement.name}]", "cold", duration, tmp, 6 + i, rate,
                cpus=placement.api,
            )  # fmt: skip
        show(r)
        if r.p99_ms <= TARGET_P99_MS and r.non2xx == 0 and r.socket_errors == 0:
            r.note = f"  [rate {rate}]"
            return r, samples
    assert r is not None
    r.note = f"  [rate {RATES[-1]}: not sustained]"
    return r, samples


def rate_of(r: Result) -> int:
    m = re.search(r"cold@(\d+)", r.name)
    assert m is not None
    return int(m[1])


def ingest_only(url: str, plans: int, version: int, cpus: frozenset[int] | None, tmp: Path) -> Cell:
    """Snapshot ``version`` fetched and processed with no searches, on ``cpus``."""
    env = worker_env(url)
    cmd = plans_command()

    def placed() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    with (tmp / "ingest-only.log").open("ab") as log:
        sim = Simulator(plans, log, env, tmp)
        try:
            pin_tree(sim.proc.pid, cpus)
            provider = f"sim={sim.url}?version={version}"
            subprocess.run([cmd, "worker", "fetch", "--once", "--provider", provider],
                           stdout=log, stderr=log, env=env, cwd=tmp, check=True,
                           preexec_fn=placed)  # fmt: skip
        finally:
            sim.stop()
        if process_phase(url, env, log, tmp, cpus, serve=True).join(1800) != 0:
            raise RuntimeError(f"process of version {version} failed")
    run = last_run(url)
    if run[1] != "PROCESSED":
        raise RuntimeError(f"run {run[0]} of version {version} is {run[1]}: {run[4]}")
    none = Result("-", 0, 1.0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return Cell("-", 0.0, 0, none, none, float(run[5]), float(run[6]), int(run[2]))


def verdict(what: str, met: bool, measured: str) -> bool:
    print(f"  [{'met' if met else 'NOT MET'}] {what}: {measured}", flush=True)
    return met


def judge(label: str, alone: Result, cell: Cell) -> None:
    worst = max(cell.fetch.p99_ms, cell.process.p99_ms)
    refused = cell.fetch.non2xx + cell.process.non2xx
    errors = cell.fetch.socket_errors + cell.process.socket_errors
    verdict(
        f"{label}: p99 <= {TARGET_RATIO:g}x alone and no 503 at {rate_of(alone)}/s through a"
        " whole ingestion",
        worst <= TARGET_RATIO * alone.p99_ms and refused == 0 and errors == 0,
        f"alone p99 {up(alone.p99_ms, 2)} ms; during fetch {up(cell.fetch.p99_ms, 2)} ms"
        f" ({up(cell.fetch.p99_ms / alone.p99_ms, 2)}x), process {up(cell.process.p99_ms, 2)} ms"
        f" ({up(cell.process.p99_ms / alone.p99_ms, 2)}x); 503s {refused}; socket errors"
        f" {errors}; ingestion {down(cell.rate)} plans/s",
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.replica", description=METHOD.split("\n\n")[0] if METHOD else None
    )
    parser.add_argument("--plans", type=int, default=None, help="plans to load (default 1M)")
    parser.add_argument("--duration", type=int, default=None, help="seconds per baseline (10)")
    parser.add_argument("--quick", action="store_true", help="100k plans, 3 s baselines")
    parser.add_argument(
        "--max-replica-lag",
        type=float,
        default=None,
        help="PGENOUGH_API_MAX_REPLICA_LAG of the isolated API (default: the product's, 5 s)",
    )
    parser.add_argument(
        "--hot-standby-feedback",
        action="store_true",
        help="hot_standby_feedback = on on the standby (default: off, PostgreSQL's)",
    )
    parser.add_argument(
        "--isolated-only",
        action="store_true",
        help="the isolated placement only (no WAL-cost and shared steps)",
    )
    args = parser.parse_args(argv)
    if args.plans is None:
        args.plans = QUICK_PLANS if args.quick else DEFAULT_PLANS
    if args.duration is None:
        args.duration = 3 if args.quick else 10
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.replica")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install -y wrk)")
    if (why := missing()) is not None:
        raise SystemExit(f"no primary and standby can be made here: {why}")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"the isolated placement needs 2 CPUs; this process may use {cpus}")
    primary_cpus, replica_cpus = frozenset(cpus[:1]), frozenset(cpus[1:2])
    isolated = Placement("isolated", api=replica_cpus, ingest=primary_cpus)
    shared = Placement("shared")
    print(
        f"pgenough replica benchmark: {platform.python_implementation()}"
        f" {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; PostgreSQL"
        f" from {BIN}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    pair = DurablePair("hot_standby_feedback = on\n" if args.hot_standby_feedback else "")
    api: Api | None = None
    with tempfile.TemporaryDirectory(prefix="pgenough-bench-replica-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        try:
            pair.start()
            primary, standby = pair.primary_url, pair.standby_url
            facts = server_facts(primary)
            print("primary: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
            standby_facts = server_facts(standby, STANDBY_FACTS)
            print("standby: " + ", ".join(f"{k}={v}" for k, v in standby_facts.items()))
            print(f"plans {args.plans:,}; {args.duration} s per baseline", flush=True)
            asyncio.run(migrate_database(primary))
            load(primary, args.plans, tmp)
            vacuum_plans(primary)
            pair.wait_replayed(timeout=600)
            # Pinned after the load: the load is set-up, not measured.
            pin_tree(pair.postmaster(pair.primary_dir), primary_cpus)
            pin_tree(pair.postmaster(pair.standby_dir), replica_cpus)
            api_log = (tmp / "api.log").open("ab")
            api_env = {"PGENOUGH_API_READ_URL": standby}
            if args.max_replica_lag is not None:
                api_env["PGENOUGH_API_MAX_REPLICA_LAG"] = f"{args.max_replica_lag:g}"
            api = Api(primary, api_log, tmp, env=api_env)
            print(f"\nisolated: api {api.base} reading the standby\n", flush=True)
            alone_iso, alone_samples = sustained_rate(api, pair, isolated, args.duration, tmp)
            print(f"  replica through it: {alone_samples.summary()}", flush=True)
            # The sustained rate keeps the replica's core nearly busy with searches alone;
            # the next lower rate leaves it room for the replay. Both are measured.
            rates = [rate_of(alone_iso)]
            if rates[0] != RATES[-1]:
                rates.append(RATES[RATES.index(rates[0]) + 1])
            version = 2
            isolated_cells: dict[int, tuple[Result, Cell, LagSamples]] = {}
            for rate in rates:
                if rate == rates[0]:
                    alone = alone_iso
                else:
                    vacuum_plans(primary)
                    pair.wait_replayed(timeout=600)
                    alone = run_wrk(api, f"cold@{rate} alone [isolated]", "cold", args.duration,
                                    tmp, 20 + version, rate, cpus=isolated.api)  # fmt: skip
                    show(alone)
                vacuum_plans(primary)
                pair.wait_replayed(timeout=600)
                with sampling(primary, api, pair) as lag:
                    cell = ingest_cell(
                        api, primary, args.plans, version, isolated, 0.0, 0, tmp, rate,
                        serve=True,
                    )  # fmt: skip
                version += 1
                print(f"  replica over the ingestion at {rate}/s: {lag.summary()}", flush=True)
                isolated_cells[rate] = (alone, cell, lag)
            api.stop()
            api = None
            if args.isolated_only:
                for rate in rates:
                    alone, cell, lag = isolated_cells[rate]
                    print(f"\nsummary at {rate}/s:")
                    judge("isolated (replica)", alone, cell)
                    print(f"  replica over the isolated ingestion: {lag.summary()}")
                return

            print("\nthe WAL streaming cost (no searches; ingestion on CPU 0):", flush=True)
            vacuum_plans(primary)
            pair.wait_replayed(timeout=600)
            with sampling(primary, None, pair) as lag_alone:
                with_replica = ingest_only(primary, args.plans, version, primary_cpus, tmp)
            print(f"  v{version} with the standby streaming: {down(with_replica.rate)} plans/s"
                  f" (fetch {up(with_replica.fetch_s, 1)} s, process"
                  f" {up(with_replica.process_s, 1)} s)", flush=True)  # fmt: skip
            print(f"  replica over it: {lag_alone.summary()}", flush=True)
            pair.stop_standby()
            vacuum_plans(primary)
            without = ingest_only(primary, args.plans, version + 1, primary_cpus, tmp)
            print(f"  v{version + 1} with no standby:           {down(without.rate)} plans/s"
                  f" (fetch {up(without.fetch_s, 1)} s, process {up(without.process_s, 1)} s)"
                  f" -> with / without {down(with_replica.rate / without.rate, 2)}x",
                  flush=True)  # fmt: skip
            version += 2

            print("\nshared: one server, api reading the primary, no pinning\n", flush=True)
            pin_tree(pair.postmaster(pair.primary_dir), None)
            api = Api(primary, api_log, tmp)
            shared_cells: dict[int, tuple[Result, Cell]] = {}
            for rate in rates:
                vacuum_plans(primary)
                alone_shared = run_wrk(api, f"cold@{rate} alone [shared]", "cold",
                                       args.duration, tmp, 30 + version, rate)  # fmt: skip
                show(alone_shared)
                cell_shared = ingest_cell(
                    api, primary, args.plans, version, shared, 0.0, 0, tmp, rate, serve=True
                )
                version += 1
                shared_cells[rate] = (alone_shared, cell_shared)

            for rate in rates:
                alone, cell, lag = isolated_cells[rate]
                alone_shared, cell_shared = shared_cells[rate]
                chosen = "the rate step 1 chose" if rate == rates[0] else "the next lower rate"
                print(f"\nsummary at {rate}/s ({chosen}):")
                judge("isolated (replica)", alone, cell)
                judge("shared (one server)", alone_shared, cell_shared)
                print(
                    f"  isolated alone p99 {up(alone.p99_ms, 2)} ms against shared alone"
                    f" {up(alone_shared.p99_ms, 2)} ms; ingestion under searches: isolated"
                    f" {down(cell.rate)} plans/s, shared {down(cell_shared.rate)} plans/s"
                    f" ({down(cell.rate / cell_shared.rate, 2)}x)"
                )
                print(f"  replica over the isolated ingestion: {lag.summary()}")
            print(f"\n  replica over the ingestion with no searches: {lag_alone.summary()}")
        except BaseException:
            for log in sorted(tmp.glob("*.log")):
                print(f"--- {log.name} (tail)", file=sys.stderr)
                print("\n".join(log.read_text(errors="replace").splitlines()[-20:]),
                      file=sys.stderr)  # fmt: skip
            raise
        finally:
            if api is not None:
                api.stop()
            pair.close()
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
