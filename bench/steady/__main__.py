"""``python -m bench.steady``: the capacity, steady, sustain and held-xmin phases in turn
(the method is ``bench.steady``'s docstring)."""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import time
from collections.abc import Sequence
from multiprocessing.context import SpawnContext
from pathlib import Path
from typing import Any

import psycopg
from bench.harness.drain import MAX_SIZINGS, MIN_DRAIN_S, grown, prepare_drain, run_drain
from bench.harness.machine import refuse_if_busy
from bench.harness.server import DEFAULT_DATA_DIR, Server, autovacuum_on, server_facts
from bench.harness.systems.base import OURS_POOL_SIZE, DrainSpec
from bench.harness.systems.ours import enqueue_ours, setup_ours
from bench.harness.systems.raw import enqueue_raw, setup_raw
from bench.steady import (
    DRAIN_SYSTEM,
    KEEP_UP,
    RAMP,
    SAMPLE,
    SETTINGS,
    SETTLE,
    SUSTAIN_PHASES,
    SUSTAIN_START,
    SUSTAIN_STEP,
    SYSTEMS,
    TABLE,
    TICK,
    SteadySystem,
)
from bench.steady import __doc__ as METHOD
from bench.steady.analysis import Run, held_steps, steady_steps, sustain_try
from bench.steady.phase import PhaseResult, PhaseSpec, Step, run_phase
from bench.steady.report import print_series, render, report

from pgenough.core.maintenance import DEFAULT_VACUUM_INTERVAL

# -- main ----------------------------------------------------------------------------------------


MIN_PHASE = 2 * SETTLE


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.steady", description=METHOD)
    parser.add_argument(
        "--quick", action="store_true", help="30 s steady phases, 20 s sustain phases, a 24 s hold"
    )
    parser.add_argument("--phase", type=float, default=None, help="steady phase s (default 90)")
    parser.add_argument(
        "--sustain",
        type=float,
        default=None,
        help="seconds of each sustained-capacity phase (default 120)",
    )
    parser.add_argument(
        "--sustain-phases",
        type=int,
        default=SUSTAIN_PHASES,
        help=f"most phases of the sustained-capacity search (default {SUSTAIN_PHASES})",
    )
    parser.add_argument("--hold", type=float, default=None, help="held snapshot s (default 60)")
    parser.add_argument("--jobs", type=int, default=None, help="capacity drain (default 20000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--batch", type=int, default=10, help="claim batch (default 10)")
    parser.add_argument("--systems", default="ours,raw", help="comma-separated: ours,raw")
    parser.add_argument("--no-steady", action="store_true", help="no 50%%/90%% phases")
    parser.add_argument("--no-sustain", action="store_true", help="no sustained-capacity search")
    parser.add_argument("--no-hold", action="store_true", help="no held-xmin run")
    parser.add_argument(
        "--vacuum-interval",
        type=float,
        default=DEFAULT_VACUUM_INTERVAL,
        help="ours: the vacuum duty's interval in s, 0 = off (default %(default)s, as deployed)",
    )
    parser.add_argument("--no-alter-system", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--json", type=Path, default=None, help="also write a summary here")
    parser.add_argument(
        "--plot-steady",
        type=Path,
        default=None,
        help="PNG of the steady phases over time (e.g. docs/img/queue-steady.png)",
    )
    parser.add_argument(
        "--plot-held",
        type=Path,
        default=None,
        help="PNG of the held-xmin runs over time (e.g. docs/img/queue-held-xmin.png)",
    )
    # Debug: the first worker of every phase raises this many seconds after its start (to see
    # a failing phase reported and the run carry on).
    parser.add_argument("--fail-worker-after", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # Each phase's figures are over what follows its first SETTLE seconds: a phase no longer
    # than that has no figures (it divided by an empty window).
    for flag, value in (("--phase", args.phase), ("--sustain", args.sustain)):
        if value is not None and value < MIN_PHASE:
            parser.error(
                f"{flag}: at least {MIN_PHASE:g} s (figures skip each phase's first"
                f" {SETTLE:g} s), got {value:g}"
            )
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        parser.error(f"--systems: unknown {', '.join(sorted(unknown))} (known: ours, raw)")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.steady")
    phase = args.phase or (30.0 if args.quick else 90.0)
    sustain = args.sustain or (20.0 if args.quick else 120.0)
    hold = args.hold or (24.0 if args.quick else 60.0)
    jobs = args.jobs or (5_000 if args.quick else 20_000)
    systems = [s for s in SYSTEMS if s in args.systems.split(",")]
    began = time.time()

    server = Server.under_test(args.data_dir)
    print(f"server: {server.description}")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"
    )
    print(
        f"plan: systems {systems}, {args.workers} worker processes, batch {args.batch}, "
        f"capacity drain {jobs:,} jobs, steady phases {phase:.0f} s at 50% and 90%, "
        f"sustained capacity: phases of {sustain:.0f} s from {SUSTAIN_START:.1f}x capacity in "
        f"steps of {SUSTAIN_STEP:.1f}x (at most {args.sustain_phases}), "
        f"hold {hold:.0f} s (ramp {RAMP} of capacity), producer tick {TICK * 1000:.0f} ms"
    )
    vacuum = f"every {args.vacuum_interval:g} s" if args.vacuum_interval else "off"
    print(f"ours' vacuum duty: {vacuum} (--vacuum-interval)")
    if args.fail_worker_after is not None:
        print(f"debug: the first worker of every phase raises after {args.fail_worker_after:g} s")
    ctx = multiprocessing.get_context("spawn")
    run = Run()
    try:
        with autovacuum_on(server.admin_url, not args.no_alter_system):
            facts = server_facts(server.admin_url, SETTINGS)
            print("settings: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
            measure(ctx, server, run, systems, args, jobs, phase, sustain, hold)
    except KeyboardInterrupt:
        run.failed["run"] = "interrupted (KeyboardInterrupt): the phases after it did not run"
        print(f"\nFAILED: {run.failed['run']}", flush=True)
    finally:
        server.drop_all()

    summary = report(run, hold)
    for path in render(run.steady, run.held, args.plot_steady, args.plot_held):
        print(f"image: {path}")
    print(f"\ntotal time {time.time() - began:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    if run.failed:
        print("\n## FAILED (the figures above are of the phases that ran to their end)")
        for name, reason in run.failed.items():
            print(f"- {name}: {reason}")
        raise SystemExit(1)


def measure(
    ctx: SpawnContext,
    server: Server,
    run: Run,
    systems: Sequence[SteadySystem],
    args: argparse.Namespace,
    jobs: int,
    phase: float,
    sustain: float,
    hold: float,
) -> None:
    """Every phase of every system, in order; a phase that fails is recorded in ``run``."""

    def phase_spec(
        system: SteadySystem, name: str, steps: tuple[Step, ...], **kw: Any
    ) -> PhaseSpec:
        return PhaseSpec(
            system,
            urls[system],
            name,
            steps,
            workers=args.workers,
            batch=args.batch,
            fail_after=args.fail_worker_after,
            vacuum_interval=args.vacuum_interval or None,
            **kw,
        )

    def phase_run(spec: PhaseSpec) -> PhaseResult:
        prepare_drain(spec.url)
        return run_phase(ctx, spec)

    urls: dict[SteadySystem, str] = {}
    for system in systems:

        def create(system: SteadySystem = system) -> None:
            urls[system] = server.database(f"steady_{system}")
            (setup_ours if system == "ours" else setup_raw)(urls[system])

        run.attempt(f"{system} setup", create)
    # 1. capacity: same run, both systems, before anything else loads the tables.
    for system in (s for s in systems if s in urls):

        def drain(system: SteadySystem = system) -> tuple[int, float]:
            """(jobs, seconds) of the first drain that lasts MIN_DRAIN_S, as bench.queue's."""
            db = urls[system]
            n = jobs
            for sizing in range(MAX_SIZINGS + 1):
                (enqueue_ours if system == "ours" else enqueue_raw)(db, n)
                prepare_drain(db)
                spec = DrainSpec.default(
                    DRAIN_SYSTEM[system],
                    db,
                    args.batch,
                    args.workers,
                    OURS_POOL_SIZE * args.workers,  # a full pool per process, as before
                )
                seconds = run_drain(ctx, spec, args.workers, n)
                if seconds >= MIN_DRAIN_S or sizing == MAX_SIZINGS:
                    break
                more = grown(n, seconds, MIN_DRAIN_S)
                print(
                    f"capacity {system:>4}: {n:,} jobs in {seconds:.2f} s, under "
                    f"{MIN_DRAIN_S:g} s: not counted; again with {more:,}",
                    flush=True,
                )
                n = more
            return n, seconds

        drained = run.attempt(f"{system} capacity", drain)
        if drained is None:
            with (
                contextlib.suppress(psycopg.Error),  # what the failed drain left
                psycopg.connect(urls[system], autocommit=True) as conn,
            ):
                conn.execute(f"DELETE FROM {TABLE[system]}")
            continue
        n, seconds = drained
        run.capacity[system] = n / seconds
        print(
            f"capacity {system:>4}: {run.capacity[system]:,.0f} jobs/s "
            f"({n:,} jobs, {seconds:.2f} s)"
        )
    measured = [s for s in systems if s in run.capacity]
    for system in systems:
        if system in urls and system not in measured:
            print(f"{system}: no burn-down capacity, so none of its load phases can run")
    # 2. steady state
    if not args.no_steady:
        for system in measured:
            for share in (0.5, 0.9):
                label = f"{share:.0%}"
                rate = share * run.capacity[system]
                spec = phase_spec(system, f"steady {label}", steady_steps(rate, phase))
                print(f"\n== {system} steady {label}: {rate:,.0f} jobs/s for {phase:.0f} s")
                r = run.attempt(f"{system} steady {label}", lambda spec=spec: phase_run(spec))
                if r is not None:
                    run.steady[(system, label)] = r
                    print_series(r, every=max(1, int(phase / SAMPLE / 12)))
    # 3. sustained capacity
    if not args.no_sustain:
        for system in measured:
            tries = run.sustain.setdefault(system, [])
            tenths, direction = round(SUSTAIN_START * 10), 0
            while len(tries) < args.sustain_phases and tenths > 0:
                share = tenths / 10
                rate = share * run.capacity[system]
                name = f"{system} sustain {share:.0%}"
                spec = phase_spec(system, f"sustain {share:.0%}", steady_steps(rate, sustain))
                print(f"\n== {name}: {rate:,.0f} jobs/s for {sustain:.0f} s")
                r = run.attempt(name, lambda spec=spec: phase_run(spec))
                if r is None:
                    break  # the search stops at a failed phase; what it found is reported
                t = sustain_try(r, share)
                tries.append(t)
                print_series(r, every=max(1, int(sustain / SAMPLE / 8)))
                print(
                    f"  {'holds' if t.holds else 'does NOT hold'}: done/s {t.done:,.0f} = "
                    f"{t.done / t.enqueued if t.enqueued else float('nan'):.3f}x enqueued/s "
                    f"{t.enqueued:,.0f} (>= {KEEP_UP}x: {'yes' if t.keeps_up else 'no'}), "
                    f"final backlog {t.final_backlog:,} (<= {t.backlog_limit:,.0f}: "
                    f"{'yes' if t.bounded else 'no'})",
                    flush=True,
                )
                if t.holds and direction >= 0:
                    direction, tenths = 1, tenths + round(SUSTAIN_STEP * 10)
                elif not t.holds and direction <= 0:
                    direction, tenths = -1, tenths - round(SUSTAIN_STEP * 10)
                else:
                    break  # the first change of outcome: the search has its answer
    # 4. held xmin
    if not args.no_hold:
        for system in measured:
            steps, window = held_steps(run.capacity[system], hold)
            spec = phase_spec(system, "held", steps, holds=(window,))
            print(
                f"\n== {system} held xmin: ramp without, then with a snapshot held "
                f"{window[0]:.0f}-{window[1]:.0f} s ({spec.length:.0f} s)"
            )
            r = run.attempt(f"{system} held xmin", lambda spec=spec: phase_run(spec))
            if r is not None:
                run.held[system] = r
                print_series(r, every=1)


# -- report --------------------------------------------------------------------------------------


if __name__ == "__main__":
    main()
