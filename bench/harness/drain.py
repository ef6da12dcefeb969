"""A drain: load a cell's jobs, bring its database to the same state, wait for a quiet
machine, start the worker processes at a barrier and time them until the last one has nothing
left (``one_drain``, ``run_drain``, ``run_python_drain``); ``grown`` re-sizes a cell whose drain
was too short to count."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.synchronize import Barrier
from queue import Empty

import psycopg
from bench.harness.machine import wait_quiet
from bench.harness.processes import stop_processes
from bench.harness.server import Server, connection_budget
from bench.harness.systems import SYSTEMS
from bench.harness.systems.base import (
    BARRIER_TIMEOUT,
    NATS_SYSTEMS,
    OURS,
    OURS_POOL_SIZE,
    DrainSpec,
    System,
)
from bench.harness.systems.graphile import run_graphile_drain
from bench.harness.systems.nats import drain_nats
from bench.harness.systems.ours import drain_ours, run_as_the_cli
from bench.harness.systems.pgqueuer import drain_pgqueuer
from bench.harness.systems.procrastinate import drain_procrastinate
from bench.harness.systems.rabbitmq import drain_rabbitmq
from bench.harness.systems.raw import drain_raw

DRAIN_TIMEOUT = 900.0
MIN_DRAIN_S = 2.0
"""A drain shorter than this is not counted: its cell is re-sized and drained again."""
SIZE_MARGIN = 1.25
"""A re-sized cell loads enough jobs for this many times the minimum (2.5 s of the default 2 s)
at the short drain's rate."""
MAX_SIZINGS = 4
"""Re-sizings per cell and round; a drain still short after them is counted, marked SHORT."""
MAX_JOBS = 1_000_000
"""The most jobs a cell is grown to."""


@dataclass
class DrainResult:
    """The counted drains of one (system, workers, batch) cell, one per round."""

    system: System
    workers: int
    batch: int
    jobs: list[int] = field(default_factory=list)
    """Jobs loaded and drained, per counted drain (the cell's size when it ran)."""
    enqueue_s: list[float] = field(default_factory=list)
    drain_s: list[float] = field(default_factory=list)
    busy_before: list[float | None] = field(default_factory=list)
    """The machine's CPU busy fraction just before each drain (other processes' load)."""
    short: list[bool] = field(default_factory=list)
    """Counted although under the minimum (it stayed short after ``MAX_SIZINGS`` re-sizings)."""

    @property
    def rates(self) -> list[float]:
        return [n / s for n, s in zip(self.jobs, self.drain_s, strict=True)]

    @property
    def median_index(self) -> int:
        """The drain whose rate is the median (the lower middle one of an even count)."""
        order = sorted(range(len(self.rates)), key=self.rates.__getitem__)
        return order[(len(order) - 1) // 2]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def median_drain_s(self) -> float:
        """The seconds of the median drain (of the lower middle one of an even count)."""
        return self.drain_s[self.median_index]

    @property
    def enqueue_rate(self) -> float:
        return max(n / s for n, s in zip(self.jobs, self.enqueue_s, strict=True))


@dataclass(frozen=True)
class WorkerReport:
    """What a drain worker process sends back when it is done."""

    end: float = 0.0
    """``time.time()`` once it had nothing left to do and its completions were committed."""
    done: int = 0
    """Jobs its handlers ran."""
    error: str | None = None


def prepare_drain(url: str) -> None:
    """Same starting state for every drain: dead rows gone, fresh statistics, no checkpoint
    due in the middle of the timing (CHECKPOINT needs superuser or pg_checkpoint; skipped
    without)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute("CHECKPOINT")


def _drain_worker_main(spec: DrainSpec, barrier: Barrier, reports: MPQueue[WorkerReport]) -> None:
    """Entry point of a drain worker process."""
    try:
        if spec.system == "raw":
            end, done = drain_raw(spec, barrier)
        elif spec.system in OURS:
            end, done = run_as_the_cli(lambda: drain_ours(spec, barrier))
        elif spec.system == "pgqueuer":
            import uvloop

            end, done = uvloop.run(drain_pgqueuer(spec, barrier))
        elif spec.system in NATS_SYSTEMS:
            end, done = asyncio.run(drain_nats(spec, barrier))
        elif spec.system in ("rabbitmq", "rabbitmq-multi"):
            end, done = asyncio.run(drain_rabbitmq(spec, barrier))
        else:
            end, done = asyncio.run(drain_procrastinate(spec, barrier))
        reports.put(WorkerReport(end, done))
    except BaseException:
        barrier.abort()
        reports.put(WorkerReport(error=traceback.format_exc()))


def grown(jobs: int, drain_s: float, min_drain_s: float) -> int:
    """The size of a cell whose drain of ``jobs`` took only ``drain_s`` seconds: enough for
    ``SIZE_MARGIN`` times ``min_drain_s`` at that rate, at least twice as many, in whole
    thousands, at most ``MAX_JOBS``."""
    want = max(2 * jobs, SIZE_MARGIN * min_drain_s * jobs / max(drain_s, 1e-3))
    return min(MAX_JOBS, -(-int(want) // 1000) * 1000)


def one_drain(
    ctx: SpawnContext,
    server: Server,
    system: System,
    target: str,
    name: str,
    batch: int,
    workers: int,
    jobs: int,
    quiet_wait: float,
) -> tuple[float, float, float | None]:
    """Load ``jobs`` jobs, bring the database to the same state, wait for a quiet machine,
    drain: (enqueue seconds, drain seconds, busy fraction before the drain)."""
    ops = SYSTEMS[system]
    try:
        enqueue_s = ops.enqueue(target, jobs, name)
        if ops.database:
            prepare_drain(target)
        busy = wait_quiet(quiet_wait)
        budget = connection_budget(server)
        spec = DrainSpec.default(system, target, batch, workers, budget, name)
        if system in (*OURS, "procrastinate") and spec.pool_size < OURS_POOL_SIZE:
            print(
                f"pools: {spec.pool_size} connections per process, not "
                f"{OURS_POOL_SIZE}: {budget} free on the server for {workers}"
            )
        drain_s = run_drain(ctx, spec, workers, jobs)
    finally:
        if name:
            ops.cleanup(target, name)
    return enqueue_s, drain_s, busy


def run_drain(ctx: SpawnContext, spec: DrainSpec, workers: int, jobs: int) -> float:
    """Start ``workers`` processes, time the drain from the barrier to the last one's end."""
    if spec.system == "graphile":
        drain_s, done = run_graphile_drain(spec, workers)
    else:
        drain_s, done = run_python_drain(ctx, spec, workers)
    left = SYSTEMS[spec.system].remaining(spec.url, spec.name)
    if left or done != jobs:
        raise RuntimeError(f"{spec.system}: ran {done} of {jobs} jobs, {left} left")
    return drain_s


def next_report(
    reports: MPQueue[WorkerReport],
    procs: Sequence[multiprocessing.process.BaseProcess],
    system: str,
) -> WorkerReport:
    """The next worker's report; a worker that died without one (killed, say) fails the drain
    at once instead of after ``DRAIN_TIMEOUT``."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while True:
        with contextlib.suppress(Empty):
            return reports.get(timeout=1.0)
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        if dead:
            with contextlib.suppress(Empty):  # it may have reported just before it died
                return reports.get(timeout=1.0)
            said = ", ".join(f"pid {p.pid} exit code {p.exitcode}" for p in dead)
            raise RuntimeError(f"{system}: a drain worker died without its report ({said})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{system}: no drain report within {DRAIN_TIMEOUT:.0f} s")


def run_python_drain(
    ctx: SpawnContext,
    spec: DrainSpec,
    workers: int,
    on_ready: Callable[[], object] | None = None,
) -> tuple[float, int]:
    """``on_ready``, when given, is called once every worker waits at the barrier (connected,
    nothing claimed yet), just before the clock starts: bench.remote reads its proxy's
    counters there, so that they count the drain's traffic only."""
    barrier = ctx.Barrier(workers + 1)
    reports: MPQueue[WorkerReport] = ctx.Queue()
    procs = [
        ctx.Process(target=_drain_worker_main, args=(spec, barrier, reports), daemon=True)
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        if on_ready is not None:
            deadline = time.monotonic() + BARRIER_TIMEOUT
            while barrier.n_waiting < workers and not barrier.broken:
                if time.monotonic() > deadline or any(p.exitcode is not None for p in procs):
                    break  # the barrier's wait below fails, or a report says why
                time.sleep(0.01)
            on_ready()
        # A broken barrier means a worker failed during start-up: its report says why.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(BARRIER_TIMEOUT)
        start = time.time()
        ends: list[float] = []
        done = 0
        for _ in procs:
            report = next_report(reports, procs, spec.system)
            if report.error:
                raise RuntimeError(f"{spec.system} worker failed:\n{report.error}")
            ends.append(report.end)
            done += report.done
    finally:
        stop_processes(procs)
    return max(ends) - start, done
