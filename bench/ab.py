"""A/B: the headline benchmarks for a base commit and HEAD, interleaved in one sitting, with
the ratios HEAD / base. Compare commits, not days: the machine drifts between sittings, and
within one the two sides share its noise.

    make bench-ab BASE=a5d4403                    # rounds=2, both benchmarks
    .venv/bin/python -m bench.ab --base a5d4403 --rounds 3 --only ingest --size 1000000

Each side is a detached git worktree of its commit under ``.pgenough-bench/ab/<sha>``, with a
virtualenv of its own (its ``pyproject.toml``'s dependencies, the ``bench`` extra where it has
one), kept for the next comparison; each benchmark runs in its side's tree with its side's own
``bench/`` code, so what is compared is what each commit would have measured. Rounds run the
sides in ABBA order (base, HEAD, then HEAD, base), so a drift within the sitting weighs on both.

Benchmarks (``--only``):

- ``queue``: ``bench.queue --systems ours-batched,raw --workers 1 --batches 100 --repeat 1
  --no-latency``: pgenough's batched drain and the raw SKIP LOCKED loop, jobs/s, and their ratio
  (within one run: the machine's share cancels);
- ``ingest``: ``bench.ingest --sizes N --repeat 1`` (``--size``, default 200,000): the fetch
  (started -> staged), the apply (first chunk claimed -> processed) and end to end, seconds.

``DATABASE_URL`` goes to both sides (default: each side's embedded server). The machine must be
quiet (``bench.harness.machine``). Prints every run's figures as it goes, then per figure the
medians and HEAD / base; a figure a side's benchmark did not print is shown as missing, not 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.harness.machine import refuse_if_busy

ROOT: Final = Path(__file__).resolve().parent.parent
TREES: Final = ROOT / ".pgenough-bench" / "ab"
DEFAULT_INGEST_SIZE: Final = 200_000
RUN_TIMEOUT: Final = 3600.0

Figures = dict[str, float]


@dataclass(frozen=True)
class Side:
    label: str
    sha: str
    tree: Path

    @property
    def python(self) -> Path:
        return self.tree / ".venv" / "bin" / "python"


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout.strip()


def prepare(label: str, commit: str) -> Side:
    """The side's worktree and virtualenv, made once per commit."""
    sha = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    tree = TREES / sha[:12]
    if not (tree / ".git").exists():
        TREES.mkdir(parents=True, exist_ok=True)
        git("worktree", "add", "--detach", "--force", str(tree), sha)
    side = Side(label, sha, tree)
    stamp = tree / ".venv" / ".ab-installed"
    if not stamp.exists():
        print(f"== {label} {sha[:10]}: installing its virtualenv", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
        # The extras a side's benchmarks need, as that commit named them: "bench" and, before
        # the plan service became a distribution of its own (issue 32), "service".
        declared = tomllib.loads((tree / "pyproject.toml").read_text())["project"].get(
            "optional-dependencies", {}
        )
        extras = ",".join(e for e in ("service", "bench") if e in declared)
        packages = ["-e", f"{tree}[{extras}]" if extras else str(tree)]
        if (tree / "plan-service" / "pyproject.toml").exists():
            packages += ["-e", str(tree / "plan-service")]
        subprocess.run(
            [str(side.python), "-m", "pip", "install", "--quiet", *packages],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        stamp.touch()
    return side


def run(side: Side, args: Sequence[str]) -> str:
    """One benchmark run in the side's tree: its output (a failure is printed, not raised)."""
    env = {**os.environ, "PYTHONPATH": str(side.tree)}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        [str(side.python), "-m", *args],
        cwd=side.tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    if done.returncode:
        print(f"   {side.label}: {' '.join(args[:1])} exited {done.returncode}:")
        print("   " + "\n   ".join((done.stdout + done.stderr).strip().splitlines()[-15:]))
    return done.stdout


def queue(side: Side, _: argparse.Namespace) -> Figures:
    with tempfile.TemporaryDirectory(prefix="pgenough-ab-") as tmp:
        result = Path(tmp) / "queue.json"
        command = ["bench.queue", "--systems", "ours-batched,raw", "--workers", "1"]
        command += ["--batches", "100", "--repeat", "1", "--no-latency", "--json", str(result)]
        run(side, command)
        if not result.exists():
            return {}
        drains = json.loads(result.read_text())["drains"]
    rates = {d["system"]: d["median_rate"] for d in drains if d.get("median_rate")}
    figures = {f"queue {system} jobs/s": rate for system, rate in rates.items()}
    if "ours-batched" in rates and "raw" in rates:
        figures["queue ours/raw"] = rates["ours-batched"] / rates["raw"]
    return figures


INGEST_FIGURES: Final = {
    "ingest fetch s": re.compile(r"e2e: fetch \(started->staged\)\s+([\d.]+)s"),
    "ingest apply s": re.compile(
        r"e2e: process \(staged->processed\)\s+[\d.]+s = .*apply ([\d.]+)s"
    ),
    "ingest e2e s": re.compile(r"e2e: e2e \(started->processed\)\s+([\d.]+)s"),
}


def ingest(side: Side, args: argparse.Namespace) -> Figures:
    out = run(side, ["bench.ingest", "--sizes", str(args.size), "--repeat", "1"])
    figures = {}
    for name, pattern in INGEST_FIGURES.items():
        found = pattern.search(out)
        if found:
            figures[name] = float(found.group(1))
    return figures


BENCHMARKS: Final[dict[str, Callable[[Side, argparse.Namespace], Figures]]] = {
    "queue": queue,
    "ingest": ingest,
}
LOWER_IS_BETTER: Final = re.compile(r" s$")


def report(base: Side, head: Side, results: dict[str, dict[str, list[float]]]) -> None:
    print(f"\nA/B, medians of the rounds: base {base.sha[:10]}, HEAD {head.sha[:10]}")
    names = sorted({name for side in results.values() for name in side})
    print(f"{'figure':<28} {'base':>12} {'HEAD':>12} {'HEAD/base':>10}")
    for name in names:
        values = {label: results[label].get(name, []) for label in ("base", "HEAD")}
        medians = {k: statistics.median(v) if v else None for k, v in values.items()}
        b, h = medians["base"], medians["HEAD"]
        ratio = f"{h / b:10.3f}" if b and h is not None else f"{'missing':>10}"
        better = " (lower is better)" if LOWER_IS_BETTER.search(name) else ""
        print(
            f"{name:<28} {b if b is not None else float('nan'):>12,.3f}"
            f" {h if h is not None else float('nan'):>12,.3f} {ratio}{better}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A/B of the headline benchmarks")
    parser.add_argument("--base", required=True, help="the commit to compare HEAD with")
    parser.add_argument("--head", default="HEAD", help="default HEAD (committed: not the tree)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS))
    parser.add_argument("--size", type=int, default=DEFAULT_INGEST_SIZE, help="ingest's plans")
    args = parser.parse_args(argv)
    refuse_if_busy("bench.ab")
    base, head = prepare("base", args.base), prepare("HEAD", args.head)
    chosen = args.only or list(BENCHMARKS)
    results: dict[str, dict[str, list[float]]] = {"base": {}, "HEAD": {}}
    for round_no in range(args.rounds):
        order = (base, head) if round_no % 2 == 0 else (head, base)
        for name in chosen:
            for side in order:
                print(
                    f"== round {round_no + 1}: {name} on {side.label} {side.sha[:10]}", flush=True
                )
                figures = BENCHMARKS[name](side, args)
                for figure, value in figures.items():
                    results[side.label].setdefault(figure, []).append(value)
                    print(f"   {figure}: {value:,.3f}", flush=True)
    report(base, head, results)


if __name__ == "__main__":
    main()
