"""Instructions per unit of the client's hot paths, counted by callgrind: a regression gate that
holds on a noisy machine (wall-clock figures drift with the neighbours; instruction counts do
not).

    .venv/bin/python -m bench.instructions                  # count, compare, exit 1 past the margin
    .venv/bin/python -m bench.instructions --update "why"   # count, write the new baseline

Each workload runs twice under ``valgrind --tool=callgrind``, in a process of its own, at ``n``
and at ``2n`` units; per unit = (I(2n) - I(n)) / n, so interpreter start-up, imports and every
first-use cost cancel out. ``PYTHONHASHSEED=0`` makes the two runs' dict and set orders the same;
the counted process runs with the garbage collector off and a clock that advances 1 µs per
reading, so the count is the same on a loaded machine as on a quiet one (checked: identical
counts with two CPU burners on both cores, and run to run).
The workloads need no database: what is counted is this process's own work.

- ``dispatch-10``, ``dispatch-100``: the worker's own path from claimed rows to acknowledged jobs
  (``bench.worker_profile.dispatch_cost``: the rows made ``Job``s, dispatched, no-op handlers
  run, the outcomes recorded for acknowledgement), per job, in batches of 10 and 100;
- ``parse``: the feed parser as the fetch worker runs it (``FeedParser(copy_text=True)``: each
  plan a line of COPY text) on the simulator's snapshot, per plan;

The apply's client side has no per-plan work to count: a process worker sends one statement per
chunk (a range of staging pages) and PostgreSQL does the rest, so its regressions are the
server's, which ``bench.ingest`` and ``make bench-ab`` measure.

The baseline is ``bench/instructions.json``: per workload the instructions per unit, the
commit and the reason it was last set. ``--margin`` (default 3%) is how much a count may rise
before the gate fails; a count that falls by more than the margin is reported (set the new,
lower baseline deliberately with ``--update``). ``tests/test_instructions.py`` runs the gate in
``make test``. Needs valgrind (Debian's ``valgrind``).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

BASELINE: Final = Path(__file__).with_name("instructions.json")
DEFAULT_MARGIN: Final = 0.03
COLLECTED: Final = re.compile(rb"Collected : (\d+)")
SNAPSHOT_SEED: Final = 1
READ_SIZE: Final = 64 * 1024
"""Bytes per feed, as the fetch worker's HTTP stream hands them over (about)."""
CACHE: Final = Path(__file__).resolve().parent.parent / ".pgenough-bench" / "instructions"


def _dispatch(batch: int) -> Callable[[int], None]:
    def run(jobs: int) -> None:
        from bench.worker_profile import dispatch_cost

        dispatch_cost(batch, jobs // batch)

    return run


def snapshot_file(plans: int) -> Path:
    """The simulator's snapshot of ``plans`` plans, rendered once (outside callgrind) into a
    file kept beside the other caches of the repository's tools."""
    path = CACHE / f"snapshot-{SNAPSHOT_SEED}-{plans}.xml"
    if not path.exists():
        from pgenough_plans.sim.data import render_snapshot

        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        with partial.open("wb") as f:
            for chunk in render_snapshot(SNAPSHOT_SEED, 1, plans):
                f.write(chunk)
        partial.rename(path)
    return path


def _parse(plans: int) -> None:
    from pgenough_plans.ingest.feed import FeedParser

    parser = FeedParser(copy_text=True)
    with snapshot_file(plans).open("rb", buffering=0) as f:
        while chunk := f.read(READ_SIZE):
            parser.feed_copy(chunk)
    parser.close_copy()


@dataclass(frozen=True)
class Workload:
    name: str
    unit: str
    n: int
    run: Callable[[int], None]
    prepare: Callable[[int], object] | None = None
    """Run before counting, outside callgrind (what is not the path measured)."""


WORKLOADS: Final = (
    Workload("dispatch-10", "job", 1_000, _dispatch(10)),
    Workload("dispatch-100", "job", 1_000, _dispatch(100)),
    Workload("parse", "plan", 1_000, _parse, prepare=snapshot_file),
)
BY_NAME: Final = {w.name: w for w in WORKLOADS}


def count(workload: Workload, n: int) -> int:
    """Instructions of one process running ``workload`` at ``n`` units under callgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("bench.instructions: valgrind is not installed (apt install valgrind)")
    with tempfile.TemporaryDirectory(prefix="pgenough-callgrind-") as tmp:
        command = [
            valgrind,
            "--tool=callgrind",
            f"--callgrind-out-file={tmp}/callgrind.out",
            "--dump-instr=no",
        ]
        command += [sys.executable, "-m", "bench.instructions", "--run", workload.name, str(n)]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, env=env, check=False)
        if done.returncode:
            raise SystemExit(
                f"bench.instructions: {workload.name} at {n} failed:\n"
                + done.stderr.decode(errors="replace")[-2000:]
            )
        found = COLLECTED.search(done.stderr)
        if found is None:
            raise SystemExit(f"bench.instructions: no count in callgrind's output for {workload}")
        return int(found.group(1))


def warm(workload: Workload) -> None:
    """Run ``workload`` once outside callgrind, so that both counted runs find every module
    compiled: a ``.pyc`` written by one of them (a source just edited, a fresh clone, another
    process importing meanwhile) would count the compiler into its difference."""
    command = [sys.executable, "-m", "bench.instructions", "--run", workload.name, str(workload.n)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(command, capture_output=True, env=env, check=True)


def per_unit(workload: Workload) -> float:
    if workload.prepare is not None:
        workload.prepare(workload.n)
        workload.prepare(2 * workload.n)
    warm(workload)
    once, twice = count(workload, workload.n), count(workload, 2 * workload.n)
    return (twice - once) / workload.n


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def compare(
    measured: dict[str, float], baseline: dict[str, dict[str, object]], margin: float
) -> list[str]:
    """Print each workload against its baseline; the workloads past ``margin`` above it."""
    risen = []
    print(f"{'workload':<14} {'unit':<5} {'baseline':>12} {'now':>12} {'ratio':>7}")
    for workload in WORKLOADS:
        if workload.name not in measured:
            continue
        now = measured[workload.name]
        base = baseline.get(workload.name, {}).get("per_unit")
        if not isinstance(base, (int, float)):
            print(f"{workload.name:<14} {workload.unit:<5} {'(none)':>12} {now:>12,.0f}")
            continue
        ratio = now / base
        verdict = ""
        if ratio > 1 + margin:
            verdict = f"  ROSE past the {margin:.0%} margin"
            risen.append(workload.name)
        elif ratio < 1 - margin:
            verdict = "  fell: set the new baseline with --update"
        print(
            f"{workload.name:<14} {workload.unit:<5} {base:>12,.0f} {now:>12,.0f}"
            f" {ratio:>7.3f}{verdict}"
        )
    return risen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--run", nargs=2, metavar=("WORKLOAD", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--only", action="append", choices=sorted(BY_NAME), help="a workload")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--update", metavar="REASON", help="write the counts as the baseline")
    args = parser.parse_args(argv)
    if args.run:
        name, n = args.run
        # The collector runs when allocations cross its thresholds, at points that differ
        # between the n and the 2n run: off, the difference counts the path alone (measured:
        # dispatch counts moved 1.3% between identical runs with it on).
        gc.disable()
        # The path reads the clock (a job's duration goes to a histogram, whose bucket
        # search is longer for a longer job): under callgrind, on a loaded machine, durations
        # would grow and the count with them. A clock that advances 1 µs per reading makes
        # the count the same whatever else the machine is doing.
        ticks = itertools.count()
        time.perf_counter = lambda: next(ticks) * 1e-6
        BY_NAME[name].run(int(n))
        return 0
    workloads = [BY_NAME[name] for name in args.only] if args.only else list(WORKLOADS)
    measured = {w.name: per_unit(w) for w in workloads}
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    if args.update:
        for name, value in measured.items():
            baseline[name] = {"per_unit": round(value), "commit": commit(), "reason": args.update}
        BASELINE.write_text(json.dumps(baseline, indent=2, sort_keys=True) + "\n")
        print(f"baseline written to {BASELINE}")
    risen = compare(measured, baseline, args.margin)
    if risen:
        print(f"instructions per unit rose past the margin: {', '.join(risen)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
