"""``bench.api`` during ingestion: cold searches at a fixed rate through every ingestion
cell, the search curve against the fetch's throttle and pacing, its plot and its summary."""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import psycopg
from bench.api import CELLS, CURVE, PACED, TARGET_INGEST_RATIO, THROTTLED
from bench.harness.api_process import Api
from bench.harness.plan_workers import Phase, retried, staged_rows, vacuum_plans, wait_streaming
from bench.harness.processes import Simulator, plans_command
from bench.harness.report import down, print_target, up
from bench.harness.under_load import Cell, ingest_cell, pacing_env, pin, placements, throttle
from bench.harness.wrk import FIXED_RATE, Result, run_wrk, show


@dataclass
class Point:
    """One point of the curve: /search at 1,000/s during a fetch held at some rate."""

    series: str
    max_pause: float
    rate: float
    result: Result


def curve_point(
    api: Api,
    url: str,
    plans: int,
    series: str,
    max_pause: float,
    duration: int,
    tmp: Path,
    seed: int,
) -> Point:
    """A fetch of a fresh snapshot under cold@1000 for ``duration`` s, then stopped (its run
    FAILED, its staging dropped). ``THROTTLED``: a pressure of 1 published by the bench
    itself holds every pause at ``max_pause`` whatever the API says (a fixed throttle);
    ``PACED``: the API's own pressure sets each pause (the pacing). The rate is the rows
    COPYed into staging during the window."""
    env = pacing_env(url, max_pause)
    pin(api.proc.pid, None)
    with psycopg.connect(url, autocommit=True) as conn:
        if series == THROTTLED and max_pause:
            asyncio.run(throttle(url, True))
        with (tmp / "curve.log").open("ab") as log:
            sim = Simulator(plans, log, env, tmp)
            fetch: Phase | None = None
            try:
                fetch = Phase(
                    "fetch",
                    [
                        plans_command(),
                        "worker",
                        "fetch",
                        "--once",
                        "--provider",
                        f"sim={sim.url}?version=9",
                    ],
                    env,
                    log,
                    tmp,
                )
                wait_streaming(url, fetch)
                rows0, t0 = staged_rows(conn), time.monotonic()
                name = f"{series} {max_pause:g}s" if max_pause else f"{series} (none)"
                r = run_wrk(
                    api, f"cold@1000 during fetch, {name}", "cold", duration, tmp, seed, FIXED_RATE
                )
                rows1, t1 = staged_rows(conn), time.monotonic()
                r.note = fetch.covered(t0, t1)
            finally:
                if fetch is not None:
                    fetch.proc.send_signal(signal.SIGTERM)
                    fetch.join(60)
                sim.stop()
                asyncio.run(throttle(url, False))
    point = Point(series, max_pause, (rows1 - rows0) / (t1 - t0), r)
    show(r)
    print(f"    fetch rate during the window: {down(point.rate)} plans/s", flush=True)
    return point


def during_ingestion(
    api: Api,
    url: str,
    plans: int,
    tmp: Path,
    duration: int,
    only: frozenset[str] | None = None,
    cells_per_placement: int = len(CELLS),
) -> tuple[dict[str, Result], list[Cell]]:
    """cold@1000 alone (per placement), then through a fetch and a process of a new snapshot
    per placement, without pacing and with it (``only`` these placements, the first
    ``cells_per_placement`` of CELLS)."""
    alone: dict[str, Result] = {}
    cells: list[Cell] = []
    version = 2
    order = [p for p in placements() if only is None or p.name in only]
    for placement in order:
        vacuum_plans(url)
        pin(api.proc.pid, placement.api)
        r = run_wrk(
            api,
            f"cold@1000 alone [{placement.name}]",
            "cold",
            duration,
            tmp,
            6,
            FIXED_RATE,
            cpus=placement.api,
        )
        show(r)
        alone[placement.name] = r
    for i, (max_pause, nice) in enumerate(CELLS[:cells_per_placement]):
        # Placements take turns going first (rotated per cell), each cell on a freshly
        # vacuumed database: no placement inherits the others' dead rows or goes first always.
        turn = order[i % len(order) :] + order[: i % len(order)] if order else []
        for placement in turn:
            vacuum_plans(url)
            cells.append(
                retried(
                    f"v{version}",
                    partial(ingest_cell, api, url, plans, version, placement, max_pause, nice, tmp),
                )
            )
            version += 1
    pin(api.proc.pid, None)
    return alone, cells


def search_curve(api: Api, url: str, plans: int, duration: int, tmp: Path) -> list[Point]:
    points = []
    seed = 40
    for series, pauses in CURVE:
        for max_pause in pauses:
            vacuum_plans(url)
            points.append(
                retried(
                    f"{series} {max_pause:g}s",
                    partial(curve_point, api, url, plans, series, max_pause, duration, tmp, seed),
                )
            )
            seed += 1
    return points


def plot_search(path: Path, alone: Result, points: list[Point], plans: int) -> None:
    """/search p99 and 503 share at 1,000/s against the fetch's rate, per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (p99, busy) = plt.subplots(1, 2, figsize=(11, 4.4))
    for series, marker in ((THROTTLED, "o"), (PACED, "s")):
        pts = sorted((p for p in points if p.series == series), key=lambda p: p.rate)
        xs = [p.rate for p in pts]
        label = "fixed pause per COPY batch (no pacing)" if series == THROTTLED else "pacing"
        p99.plot(xs, [p.result.p99_ms for p in pts], marker=marker, label=label)
        busy.plot(xs, [100 * p.result.non2xx / p.result.requests for p in pts], marker=marker)
        for p in pts:
            p99.annotate(
                f"{p.max_pause:g}s",
                (p.rate, p.result.p99_ms),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    p99.scatter([0], [alone.p99_ms], color="black", zorder=3, label="no ingestion")
    busy.scatter([0], [100 * alone.non2xx / alone.requests], color="black", zorder=3)
    p99.axhline(
        TARGET_INGEST_RATIO * alone.p99_ms,
        color="grey",
        ls="--",
        label=f"target: {TARGET_INGEST_RATIO:g}x alone",
    )
    p99.set(xlabel="fetch rate (plans/s)", ylabel="/search p99 (ms)", ylim=(0, None))
    busy.set(xlabel="fetch rate (plans/s)", ylabel="answered 503 (%)", ylim=(0, None))
    p99.legend(fontsize=8)
    for ax in (p99, busy):
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"/search at 1,000 cold requests/s on {plans:,} plans during a fetch of {plans:,}"
        " (one API process, 2 shared cores)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"  curve written to {path}", flush=True)


def share(r: Result) -> str:
    return f"{100 * r.non2xx / r.requests:.1f}%" if r.requests else "-"


def ingestion_summary(alone: dict[str, Result], cells: list[Cell]) -> None:
    print(
        "\n/search at 1,000/s during ingestion (p99 / alone p99 of the same placement;"
        " 503 share) and the ingestion's own rate:"
    )
    for c in cells:
        base = alone[c.placement]
        parts = []
        for phase, r in (("fetch", c.fetch), ("process", c.process)):
            parts.append(
                f"{phase} p99 {up(r.p99_ms, 2)} ms ({up(r.p99_ms / base.p99_ms, 2)}x) 503"
                f" {share(r)}"
            )
        print(
            f"  {c.placement:<6} {c.pacing:<22} " + "; ".join(parts) + f"; fetch"
            f" {up(c.fetch_s, 1)} s, process {up(c.process_s, 1)} s, {down(c.rate)} plans/s"
        )
    for placement, base in alone.items():
        off = next(c for c in cells if c.placement == placement and not (c.max_pause or c.nice))
        for c in (c for c in cells if c.placement == placement):
            worst = max(c.fetch.p99_ms, c.process.p99_ms) / base.p99_ms
            refused = c.fetch.non2xx + c.process.non2xx
            print_target(
                f"{placement}, {c.pacing}: no 503 at 1,000/s and p99 <= {TARGET_INGEST_RATIO:g}x"
                " alone, during fetch and process",
                refused == 0 and worst <= TARGET_INGEST_RATIO,
                f"worst p99 ratio {up(worst, 2)} (alone {up(base.p99_ms, 2)} ms, 503 there"
                f" {share(base)}); 503s {refused}; ingestion {down(c.rate)} plans/s ="
                f" {down(c.rate / off.rate, 2)}x unpaced",
            )
