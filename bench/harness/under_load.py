"""An ingestion with cold searches running through it: where the processes run
(``Placement``), the pacing and niceness of the workers, and one snapshot fetched then
processed with wrk at a fixed rate through each phase (``ingest_cell``, its ``Cell``)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from bench.harness.api_process import Api
from bench.harness.plan_workers import (
    Phase,
    last_run,
    process_phase,
    wait_first_claim,
    wait_streaming,
    worker_env,
)
from bench.harness.processes import Simulator, plans_command
from bench.harness.report import down, up
from bench.harness.wrk import FIXED_RATE, Result, run_wrk, show

from pgenough_plans.ingest import pacing

PACING_ENV = "PGENOUGH_INGEST_PACING_MAX_PAUSE"
THROTTLE_SOURCE = "bench-throttle"
NICE_ENV = "PGENOUGH_INGEST_NICE"


@dataclass(frozen=True)
class Placement:
    """Where the processes run: ``api`` the CPUs of the API and wrk, ``ingest`` those of the
    fetch and process workers and the simulator (None: wherever the kernel puts them).
    PostgreSQL is never pinned: it serves both sides."""

    name: str
    api: frozenset[int] | None = None
    ingest: frozenset[int] | None = None


SHARED = Placement("shared")


def placements() -> list[Placement]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print(f"  (pinned placement skipped: {len(cpus)} CPU available)", flush=True)
        return [SHARED]
    return [SHARED, Placement("pinned", frozenset(cpus[:1]), frozenset(cpus[1:2]))]


def pin(pid: int, cpus: Iterable[int] | None) -> None:
    """Every thread of ``pid`` onto ``cpus`` (None: every CPU this process may use); the
    threads it starts later inherit it."""
    target = set(cpus) if cpus is not None else os.sched_getaffinity(0)
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), target)


@dataclass
class Cell:
    """One ingestion of a new snapshot with cold@1000 running through each of its phases."""

    placement: str
    max_pause: float
    nice: int
    fetch: Result
    process: Result
    fetch_s: float
    process_s: float
    plans: int

    @property
    def pacing(self) -> str:
        return pacing_label(self.max_pause, self.nice)

    @property
    def rate(self) -> float:
        return self.plans / (self.fetch_s + self.process_s)


def pacing_label(max_pause: float, nice: int = 0) -> str:
    label = f"pacing {max_pause:g}s" if max_pause else "no pacing"
    return f"{label}, nice {nice}" if nice else label


async def throttle(url: str, on: bool) -> None:
    """A pressure of 1 published as if by an API, for an hour (on), or withdrawn."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        if on:
            await pacing.publish(conn, THROTTLE_SOURCE, 1.0, 3600.0)
        else:
            await pacing.withdraw(conn, THROTTLE_SOURCE)


def pacing_env(url: str, max_pause: float, nice: int = 0) -> dict[str, str]:
    return {**worker_env(url), PACING_ENV: f"{max_pause:g}", NICE_ENV: str(nice)}


def ingest_cell(
    api: Api,
    url: str,
    plans: int,
    version: int,
    placement: Placement,
    max_pause: float,
    nice: int,
    tmp: Path,
    rate: int = FIXED_RATE,
    serve: bool = False,
) -> Cell:
    """Snapshot ``version`` fetched, then processed, with cold searches at ``rate``/s running
    for the whole of each phase (wrk stopped when the phase ends). ``serve``: the process
    worker runs as deployed (its periodic duties on) and is stopped once the run is
    processed, rather than ``--until-idle``."""
    env = pacing_env(url, max_pause, nice)
    cmd = plans_command()
    label = f"{placement.name}, {pacing_label(max_pause, nice)}"
    pin(api.proc.pid, placement.api)
    with (tmp / "ingest.log").open("ab") as log:
        sim = Simulator(plans, log, env, tmp)
        try:
            pin(sim.proc.pid, placement.ingest)
            if nice:  # it stands for a provider elsewhere: it too yields the CPU
                os.setpriority(os.PRIO_PROCESS, sim.proc.pid, nice)
            provider = f"sim={sim.url}?version={version}"
            fetch = Phase(
                "fetch",
                [cmd, "worker", "fetch", "--once", "--provider", provider],
                env,
                log,
                tmp,
                placement.ingest,
            )
            wait_streaming(url, fetch)
            start = time.monotonic()
            during_fetch = run_wrk(
                api,
                f"cold@{rate} during fetch [{label}]",
                "cold",
                None,
                tmp,
                10 + version,
                rate,
                cpus=placement.api,
                stop_when=lambda: fetch.ended is not None,
            )
            during_fetch.note = fetch.covered(start, time.monotonic())
            show(during_fetch)
            code = fetch.join(1800)
        finally:
            sim.stop()
        if code != 0:
            raise RuntimeError(f"fetch of version {version} exited {code}")
        process = process_phase(url, env, log, tmp, placement.ingest, serve)
        wait_first_claim(url, 60)
        start = time.monotonic()
        during_process = run_wrk(
            api,
            f"cold@{rate} during process [{label}]",
            "cold",
            None,
            tmp,
            20 + version,
            rate,
            cpus=placement.api,
            stop_when=lambda: process.ended is not None,
        )
        during_process.note = process.covered(start, time.monotonic())
        show(during_process)
        if process.join(1800) != 0:
            raise RuntimeError(f"process of version {version} failed")
    run = last_run(url)
    if run[1] != "PROCESSED":
        raise RuntimeError(f"run {run[0]} of version {version} is {run[1]}: {run[4]}")
    cell = Cell(
        placement.name,
        max_pause,
        nice,
        during_fetch,
        during_process,
        float(run[5]),
        float(run[6]),
        int(run[2]),
    )
    print(
        f"  ingestion of v{version} [{label}]: fetch {up(cell.fetch_s, 1)} s, process"
        f" {up(cell.process_s, 1)} s, {cell.plans:,} plans: {down(cell.rate)} plans/s end to end",
        flush=True,
    )
    return cell
