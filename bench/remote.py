"""What latency costs: the queue's drain throughput and add-to-start latency with the workers
on the far side of a link of 0, 1, 5 and 20 ms round-trip time, each beside the raw-SQL
``SKIP LOCKED`` loop through the same link, with the round trips per job the link counted.

Run it from the repository root::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.remote
    python -m bench.remote                      # embedded server under .pgenough-bench/
    python -m bench.remote --quick              # smoke run (under a minute)
    python -m bench.remote --rtts 0,20 --batches 1,10,100 --workers 1,4,8

The link is ``tests/helpers/netproxy.py`` run as its own process (``python -m
tests.helpers.netproxy --rtt-ms R --control``): RTT/2 of delay each way, per connection and
direction, nothing else impaired; with a delay on a select(2) loop, whose timers keep
microseconds (a round trip comes out 0.2-0.5 ms over the RTT asked, measured and printed as
*measured*), at 0 ms on uvloop when installed (the least cost per message). Workers and the
latency test's enqueueing client connect through it; loading the drains' jobs, ``VACUUM`` /
``CHECKPOINT`` and the checks go direct. A proxy on the measured client's event loop would
distort what it measures; in its own process it costs a few hundredths to a tenth of a
millisecond per round trip on loopback, measured and printed first (``SELECT 1``, direct and
through the proxy at 0 ms), and CPU time on the same 2 cores as the client and the server.

What runs is ``bench/queue.py``'s, imported (its docstring says what each figure means):

- *drain jobs/s*: its harness (``DrainSpec``, ``run_python_drain``: N no-op jobs loaded,
  ``VACUUM ANALYZE`` + ``CHECKPOINT``, W spawned worker processes released together by a
  barrier, the clock to the last one's end of drain, then the table checked empty and the
  handlers' count equal to N; durable commits). Systems: ``raw`` (its ``RAW_TAKE`` loop:
  ``raw_take`` on ``raw_connect``, i.e. ``RAW_OPTIONS``; one ``DELETE ... SKIP LOCKED
  RETURNING`` per batch, at-most-once), ``ours-batched`` (``Worker``, acks in the next
  claim), ``ours-batch-tx`` (a ``BatchHandler``: each claim's jobs completed in one
  transaction), at its concurrency ``max(10, batch)`` and pools of 10; at the longest RTT
  also ours at twice the batch size of concurrency (``c=200``: what a worker has in place of
  a prefetch setting). A cell (RTT, system, workers, batch, concurrency) is drained
  ``--repeat`` times (rounds interleave the systems) and its median reported. Each drain
  lasts at least ``--min-drain`` seconds (1.5: 2 s, bench/queue.py's, would take the default
  run past 10 minutes): a cell's first size at an RTT comes from what it did at the ones
  before (seconds per job against the measured RTT, extrapolated), a drain still too short is
  re-sized and run again, not counted, and one far too long makes the later rounds' shorter.
- *round trips per job*: the proxy's count (turns from client bytes to server bytes, per
  connection) over the drain only, from the moment every worker waits at the barrier
  (connected, nothing claimed) to the end, divided by the jobs.
- *add-to-start latency*: one idle worker per system, listening (LISTEN/NOTIFY) through the
  link; the client enqueues one job at a time, also through the link, 10-40 ms apart, and
  measures from just before the enqueue call to the handler's first line. Ours: its latency
  worker (``Worker`` with its defaults: batch 10, concurrency 10). Raw: a sync connection
  that LISTENs on ``raw_jobs`` and on each notification runs ``raw_take`` until a take comes
  back short; its enqueue is one statement (an ``INSERT`` whose CTE calls ``pg_notify``).

Printed: the proxy's own cost, every drain as it ends (with its wall time), then the drains'
table (jobs/s, every round, round trips per job, ours/raw), each cell against RTT 0, the
latency table (p50 also in RTTs), and what the data says a user on a remote link should set.

Options: ``--rtts 0,1,5,20``; ``--batches 1,100``; ``--workers 1,4`` (processes per drain);
``--systems raw,ours-batched,ours-batch-tx``; ``--repeat 3``; ``--min-drain 1.5``;
``--latency-samples 60``; ``--no-latency``; ``--no-prefetch`` (no ``c=2x`` cells);
``--quiet-wait S`` (before each drain, wait up to S seconds, default 10, for a machine under
15% busy; figures taken without are marked NOISY); ``--json FILE``. ``--quick``: RTTs 0 and
20, one worker, one round, drains of 0.5 s, 20 latency samples, no quiet wait (49 s here).

Run time, estimated from the --quick runs' per-drain wall times on this 2-core machine (not
measured whole): the default run about 10 minutes on a quiet machine: 150 counted drains
(4 RTTs x 2 batches x 2 worker counts x 3 systems, and 2 prefetch cells at 20 ms, x 3
rounds) of 1.5-2.5 s, each with 1-2.5 s of loading, vacuum and process start-up besides,
plus about 40 s of latency and a few re-sized drains at 0 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.synchronize import Event as MPEvent
from pathlib import Path
from typing import Any

import psycopg
from bench.harness.drain import (
    MAX_JOBS,
    SIZE_MARGIN,
    prepare_drain,
    run_python_drain,
)
from bench.harness.latency import (
    Enqueue,
    LatencyWorker,
    Timed,
    latency_worker_main,
    run_latency,
    single_enqueuer,
)
from bench.harness.machine import (
    QUIET_BUSY,
    fmt_busy,
    refuse_if_busy,
    wait_quiet,
)
from bench.harness.report import (
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    percentile_99,
    table,
)
from bench.harness.server import (
    DEFAULT_DATA_DIR,
    Server,
    connection_budget,
    version_of,
)
from bench.harness.systems import (
    SYSTEMS,
)
from bench.harness.systems.base import (
    KIND,
    OURS_POOL_SIZE,
    QUEUE,
    DrainSpec,
    System,
)
from bench.harness.systems.raw import (
    raw_connect,
    raw_take,
)
from psycopg.conninfo import make_conninfo
from tests.helpers.netproxy import Counters

ROOT = Path(__file__).resolve().parents[1]
RTTS = (0.0, 1.0, 5.0, 20.0)
"""Round-trip times of the link, milliseconds."""
BATCHES = (1, 100)
WORKERS = (1, 4)
SYSTEM_CHOICES: tuple[System, ...] = ("raw", "ours-batched", "ours-batch-tx")
DRAINS = 3
MIN_DRAIN = 1.5
"""Seconds a counted drain lasts at least (bench/queue.py's 2 s would take the default run
past 10 minutes; 3 rounds of 1.5 s or more still average out a drain's start and end)."""
LATENCY_SAMPLES = 60
FIRST_JOBS = {1: 5_000, 100: 100_000}
"""A cell's size at its first RTT, by batch (others: 1,000 per job of the batch), twice that
for more than one worker, a quarter with --quick; later RTTs size it from what it did at the
ones before."""
OVERHEAD_SAMPLES = 400
LINK_SAMPLES = 40
RAW_CHANNEL = "raw_jobs"
RAW_ENQUEUE = (
    "WITH job AS (INSERT INTO raw_jobs (queue, kind, payload) VALUES (%s, %s, %s) RETURNING id)"
    f" SELECT pg_notify('{RAW_CHANNEL}', '') FROM job"
)
"""The raw loop's enqueue for the latency test: one statement, its own transaction, and the
notification its listener wakes on."""
LatencyKind = str  # "ours" or "raw"


# -- the link: tests/helpers/netproxy.py as its own process -----------------------------------


class Link:
    """A proxy process between the workers and the server, with ``rtt_ms`` of delay."""

    def __init__(self, target: str, rtt_ms: float) -> None:
        self.rtt_ms = rtt_ms
        argv = [
            sys.executable,
            "-m",
            "tests.helpers.netproxy",
            "--target",
            target,
            "--rtt-ms",
            f"{rtt_ms:g}",
            "--control",
        ]
        if rtt_ms > 0:
            argv.append("--select")  # its timers keep microseconds (epoll's and libuv's: ms)
        elif importlib.util.find_spec("uvloop") is not None:
            argv.append("--uvloop")  # the least cost per message
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            self.proc.kill()
            raise RuntimeError(f"the link's proxy did not start: {line!r}")
        host, _, port = line.split()[1].rpartition(":")
        self.host, self.port = host, int(port)
        self.loop = argv[-1].lstrip("-") if argv[-1] in ("--uvloop", "--select") else "asyncio"

    def url(self, direct: str) -> str:
        """``direct`` (a database URL) through the link."""
        return make_conninfo(direct, host=self.host, port=str(self.port))

    def counters(self) -> Counters:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        word, _, data = self.proc.stdout.readline().partition(" ")
        if word != "stats":
            raise RuntimeError(f"the link's proxy answered {word!r}")
        return Counters(**json.loads(data))

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def round_trip_times(url: str, samples: int) -> list[float]:
    """Seconds per ``SELECT 1`` on one connection (after 10 unmeasured)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(10):
            conn.execute("SELECT 1", prepare=False)
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            conn.execute("SELECT 1", prepare=False).fetchall()
            times.append(time.perf_counter() - start)
    return times


# -- results -------------------------------------------------------------------------------------


Shape = tuple[System, int, int, int]
"""A drain's shape: (system, worker processes, batch size, concurrency per process)."""
CellKey = tuple[float, System, int, int, int]
"""(RTT, *shape)."""


def default_concurrency(batch: int) -> int:
    """bench/queue.py's (``DrainSpec.default``)."""
    return max(10, batch)


@dataclass
class Cell:
    """The counted drains of one (RTT, system, workers, batch, concurrency)."""

    rtt_ms: float
    system: System
    workers: int
    batch: int
    concurrency: int
    link_ms: float
    """The link's round trip as measured (``SELECT 1`` p50 through it), milliseconds."""
    jobs: list[int] = field(default_factory=list)
    drain_s: list[float] = field(default_factory=list)
    round_trips: list[int] = field(default_factory=list)
    busy: list[float | None] = field(default_factory=list)

    @property
    def shape(self) -> Shape:
        return (self.system, self.workers, self.batch, self.concurrency)

    @property
    def label(self) -> str:
        """The system, and its concurrency where it is not the default."""
        if self.concurrency == default_concurrency(self.batch):
            return self.system
        return f"{self.system} c={self.concurrency}"

    @property
    def rates(self) -> list[float]:
        return [n / s for n, s in zip(self.jobs, self.drain_s, strict=True)]

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def round_trips_per_job(self) -> float:
        return sum(self.round_trips) / max(1, sum(self.jobs))

    @property
    def noisy(self) -> bool:
        return any(b is not None and b > QUIET_BUSY for b in self.busy)


@dataclass
class Latency(Timed):
    rtt_ms: float = 0.0
    kind: LatencyKind = "ours"


@dataclass(frozen=True)
class Plan:
    rtts: tuple[float, ...]
    batches: tuple[int, ...]
    workers: tuple[int, ...]
    systems: tuple[System, ...]
    repeat: int
    min_drain_s: float
    latency_samples: int
    quick: bool
    prefetch: bool = True


# -- drains --------------------------------------------------------------------------------------


def first_size(plan: Plan, batch: int, workers: int) -> int:
    jobs = FIRST_JOBS.get(batch, max(5_000, 1_000 * batch)) * (2 if workers > 1 else 1)
    return max(500, jobs // 4) if plan.quick else jobs


def predicted_size(
    plan: Plan,
    cells: dict[CellKey, Cell],
    key: Shape,
    link_ms: float,
) -> int | None:
    """Jobs for ``SIZE_MARGIN`` x the minimum drain over a link of ``link_ms`` (measured),
    from the cell's figures at the RTTs run before: its seconds per job grow with the RTT by
    the slope measured between the last two, or, from one, by one RTT per claim and worker
    process (a claim loop's least: its handlers' transactions may overlap it). Rather too
    many jobs (a longer drain) than too few (a drain not counted, and another)."""
    _system, workers, batch, _concurrency = key
    done = sorted(
        (c for c in cells.values() if c.shape == key and c.jobs),
        key=lambda c: c.link_ms,
    )
    done = [c for c in done if c.link_ms < link_ms]
    if not done:
        return None
    last = done[-1]
    if len(done) >= 2:
        before = done[-2]
        slope = (1 / last.rate - 1 / before.rate) / max(1e-9, last.link_ms - before.link_ms)
    else:
        slope = min(last.round_trips_per_job, 1 / batch) / 1000 / workers
    seconds_per_job = 1 / last.rate + max(0.0, slope) * (link_ms - last.link_ms)
    return sized(int(SIZE_MARGIN * plan.min_drain_s / seconds_per_job), batch, workers)


def sized(jobs: int, batch: int, workers: int) -> int:
    """``jobs`` rounded up (to 10s under 1,000, else 100s), at least 4 claims per worker."""
    step = 10 if jobs < 1000 else 100
    return min(MAX_JOBS, max(50, 4 * batch * workers, -(-jobs // step) * step))


def drain_once(
    ctx: SpawnContext,
    server: Server,
    direct: dict[str, str],
    link: Link,
    shape: Shape,
    jobs: int,
    quiet_wait: float,
) -> tuple[float, int, float | None]:
    """Load ``jobs`` (direct), drain them through the link: (seconds, round trips, busy)."""
    system, workers, batch, concurrency = shape
    ops = SYSTEMS[system]
    assert ops.database is not None
    url = direct[ops.database]
    ops.enqueue(url, jobs, "")
    prepare_drain(url)
    busy = wait_quiet(quiet_wait)
    spec = DrainSpec.default(system, link.url(url), batch, workers, connection_budget(server))
    spec = dataclasses.replace(spec, concurrency=concurrency)
    marks: list[Counters] = []
    drain_s, done = run_python_drain(
        ctx, spec, workers, on_ready=lambda: marks.append(link.counters())
    )
    spent = link.counters().minus(marks[0]) if marks else link.counters()
    left = ops.remaining(url, "")
    if left or done != jobs:
        raise RuntimeError(f"{system}: ran {done} of {jobs} jobs, {left} left")
    return drain_s, spent.round_trips, busy


def run_drains(
    ctx: SpawnContext,
    plan: Plan,
    server: Server,
    direct: dict[str, str],
    link: Link,
    rtt: float,
    link_ms: float,
    cells: dict[CellKey, Cell],
    quiet_wait: float,
) -> None:
    sizes: dict[Shape, int] = {}
    for round_no in range(1, plan.repeat + 1):
        for shape in shapes(plan, rtt):
            system, workers, batch, _concurrency = shape
            if shape not in sizes:
                predicted = predicted_size(plan, cells, shape, link_ms)
                sibling = cells.get((rtt, system, workers, batch, default_concurrency(batch)))
                if predicted is None and sibling is not None and sibling.jobs:
                    # More concurrency than the drain at the default this round: at most
                    # twice its rate (two claims in flight instead of one).
                    wanted = 2 * sibling.rate * SIZE_MARGIN * plan.min_drain_s
                    predicted = sized(int(wanted), batch, workers)
                sizes[shape] = predicted or first_size(plan, batch, workers)
            cell = cells.setdefault((rtt, *shape), Cell(rtt, *shape, link_ms))
            where = (
                f"[rtt {rtt:g} ms, round {round_no}] {cell.label:>19} workers={workers}"
                f" batch={batch:>3}"
            )
            for sizing in range(5):
                jobs = sizes[shape]
                began = time.perf_counter()
                drain_s, round_trips, busy = drain_once(
                    ctx, server, direct, link, shape, jobs, quiet_wait
                )
                line = (
                    f"{where}: {jobs:>8,} jobs, {jobs / drain_s:>8,.0f} jobs/s"
                    f" ({drain_s:5.2f} s of {time.perf_counter() - began:4.1f}),"
                    f" {round_trips / jobs:6.3f} round trips/job, before: {fmt_busy(busy)}"
                )
                if drain_s < plan.min_drain_s and sizing < 4:
                    # A wider margin than a prediction's: the rate of a short drain is the
                    # less sure one (its start and end weigh more).
                    want = 1.5 * plan.min_drain_s * jobs / max(drain_s, 1e-3)
                    sizes[shape] = sized(int(max(1.5 * jobs, want)), batch, workers)
                    print(f"{line}: short, not counted; now {sizes[shape]:,} jobs", flush=True)
                    continue
                print(line, flush=True)
                cell.jobs.append(jobs)
                cell.drain_s.append(drain_s)
                cell.round_trips.append(round_trips)
                cell.busy.append(busy)
                if drain_s > 2 * SIZE_MARGIN * plan.min_drain_s:  # later rounds: shorter
                    want = SIZE_MARGIN * plan.min_drain_s * jobs / drain_s
                    sizes[shape] = sized(int(want), batch, workers)
                break


def shapes(plan: Plan, rtt: float) -> list[Shape]:
    """The drains of one round at ``rtt``: every system, worker count and batch at
    bench/queue.py's concurrency; at the longest RTT also ours with twice the batch size
    of concurrency (one worker process, batches above 1): its prefetch."""
    found: list[Shape] = [
        (system, workers, batch, default_concurrency(batch))
        for batch in plan.batches
        for workers in plan.workers
        for system in plan.systems
    ]
    if rtt == max(plan.rtts) and plan.prefetch:
        found.extend(
            (system, min(plan.workers), batch, 2 * batch)
            for batch in plan.batches
            if batch > 1 and 2 * batch > default_concurrency(batch)
            for system in plan.systems
            if system != "raw"
        )
    return found


# -- add-to-start latency --------------------------------------------------------------------


def _raw_latency_worker_main(
    url: str, ready: MPEvent, stop: MPEvent, starts: MPQueue[tuple[int, float]]
) -> None:
    """The raw loop woken by LISTEN/NOTIFY: on each notification, ``raw_take`` until empty,
    reporting each job's start."""
    with raw_connect(url) as conn:
        conn.execute(f"LISTEN {RAW_CHANNEL}")
        ready.set()
        while not stop.is_set():
            # Out of the generator first: it holds the connection while it iterates.
            if not list(conn.notifies(timeout=0.2, stop_after=1)):
                continue
            while True:  # until a take comes back short (not one more, empty, round trip)
                rows = raw_take(conn, 10)
                for row in rows:
                    starts.put((int(row[3]["n"]), time.time()))
                if len(rows) < 10:
                    break


@contextlib.asynccontextmanager
async def raw_enqueuer(url: str) -> Any:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:

        def one(n: int) -> Awaitable[object]:
            return conn.execute(RAW_ENQUEUE, (QUEUE, KIND, json.dumps({"n": n})))

        yield one


def measure_latency(
    ctx: SpawnContext, urls: dict[LatencyKind, str], samples: int, rtt: float
) -> dict[LatencyKind, Latency]:
    """bench/queue.py's ``run_latency``: ours by its latency worker, raw by its loop."""
    workers: dict[LatencyKind, LatencyWorker] = {
        kind: (latency_worker_main, ("ours", url))
        if kind == "ours"
        else (_raw_latency_worker_main, (url,))
        for kind, url in urls.items()
    }

    def enqueuers(kind: LatencyKind) -> contextlib.AbstractAsyncContextManager[Enqueue]:
        url = urls[kind]
        return single_enqueuer("ours", url) if kind == "ours" else raw_enqueuer(url)

    timings = run_latency(ctx, workers, enqueuers, samples)
    return {kind: Latency(*timed, rtt_ms=rtt, kind=kind) for kind, timed in timings.items()}


# -- reporting -----------------------------------------------------------------------------------


def report(
    plan: Plan,
    cells: dict[CellKey, Cell],
    latencies: dict[tuple[float, LatencyKind], Latency],
    links: dict[float, list[float]],
) -> None:
    def raw_of(c: Cell) -> Cell | None:
        raw = cells.get((c.rtt_ms, "raw", c.workers, c.batch, default_concurrency(c.batch)))
        return raw if raw and raw.jobs else None

    label = f"median of {plan.repeat}" if plan.repeat > 1 else "one run"
    print(f"\n## Drain throughput through the link, no-op jobs, jobs/s ({label})\n")
    rows = []
    for c in sorted(cells.values(), key=lambda c: (c.rtt_ms, c.batch, c.workers, c.label)):
        if not c.jobs:
            continue
        raw = raw_of(c)
        rows.append(
            [
                f"{c.rtt_ms:g}",
                fmt_ms(statistics.median(links[c.rtt_ms])),
                c.label,
                str(c.workers),
                str(c.batch),
                fmt_rate(c.rate) + (" NOISY" if c.noisy else ""),
                " / ".join(fmt_rate(r) for r in c.rates),
                f"{c.round_trips_per_job:.3f}",
                fmt_ratio(c.rate / raw.rate) if raw and c.system != "raw" else "-",
            ]
        )
    headers = [
        "RTT ms",
        "measured",
        "system",
        "workers",
        "batch",
        "jobs/s",
        "rounds",
        "round trips/job",
        "/raw",
    ]
    print(table(headers, rows) if rows else "(nothing ran)")

    print("\n## Against RTT 0 (each cell's jobs/s at each RTT, as a fraction of the first RTT's)\n")
    rows = []
    first = min(plan.rtts)
    for c in sorted(cells.values(), key=lambda c: (c.batch, c.workers, c.label)):
        if c.rtt_ms != first or not c.jobs:
            continue
        row = [c.label, str(c.workers), str(c.batch)]
        for rtt in plan.rtts:
            at = cells.get((rtt, *c.shape))
            row.append(fmt_ratio(at.rate / c.rate) if at and at.jobs else "-")
        rows.append(row)
    headers = ["system", "workers", "batch", *(f"{r:g} ms" for r in plan.rtts)]
    print(table(headers, rows) if rows else "(nothing ran)")

    if latencies:
        print(f"\n## Add-to-start latency through the link, ms ({plan.latency_samples} samples)\n")
        rows = []
        for (rtt, kind), lat in sorted(latencies.items()):
            raw_lat = latencies.get((rtt, "raw"))
            rows.append(
                [
                    f"{rtt:g}",
                    kind,
                    fmt_ms(lat.p50),
                    fmt_ms(lat.p99),
                    fmt_ms(lat.enqueue_p50),
                    f"{lat.p50 / (rtt / 1000):.1f}" if rtt else "-",
                    fmt_ratio(lat.p50 / raw_lat.p50) if raw_lat and kind != "raw" else "-",
                    fmt_ratio(lat.p99 / raw_lat.p99) if raw_lat and kind != "raw" else "-",
                ]
            )
        headers = [
            "RTT ms",
            "system",
            "p50",
            "p99",
            "enqueue p50",
            "p50 in RTTs",
            "p50/raw",
            "p99/raw",
        ]
        print(table(headers, rows))

    print("\n## What to set on a remote link (from the figures above)\n")
    for line in advice(plan, cells, latencies):
        print(f"- {line}")


def advice(
    plan: Plan,
    cells: dict[CellKey, Cell],
    latencies: dict[tuple[float, LatencyKind], Latency],
) -> list[str]:
    lines: list[str] = []
    far, near = max(plan.rtts), min(plan.rtts)
    low, high = min(plan.batches), max(plan.batches)
    one, many = min(plan.workers), max(plan.workers)

    def cell(rtt: float, system: System, workers: int, batch: int, factor: int = 0) -> Cell | None:
        concurrency = factor * batch if factor else default_concurrency(batch)
        c = cells.get((rtt, system, workers, batch, concurrency))
        return c if c and c.jobs else None

    for system in ("ours-batched", "ours-batch-tx"):
        if system not in plan.systems:
            continue
        small, big = cell(far, system, one, low), cell(far, system, one, high)
        if small and big and high > low:
            lines.append(
                f"batch size ({system}): at {far:g} ms one worker process drains"
                f" {fmt_rate(small.rate)} jobs/s at batch {low}"
                f" ({small.round_trips_per_job:.2f} round trips per job) and"
                f" {fmt_rate(big.rate)} at batch {high} ({big.rate / small.rate:.0f}x,"
                f" {big.round_trips_per_job:.3f} round trips per job): raise --batch-size"
                " (PGENOUGH_WORKER_BATCH_SIZE; default 10), and the concurrency with it: a claim"
                " takes no more jobs than the worker has free slots"
            )
        base = cell(near, system, one, high)
        if big and base:
            lines.append(
                f"what the link costs at batch {high} ({system}, one process): {far:g} ms drains"
                f" {big.rate / base.rate:.0%} of {near:g} ms's rate"
            )
        doubled = cell(far, system, one, high, factor=2)
        if big and doubled:
            lines.append(
                f"prefetch ({system}, batch {high}, {far:g} ms): there is no setting of that"
                " name; a worker claims its next batch once half its slots are free, so a"
                f" concurrency of twice the batch size ({2 * high}) keeps a claim in flight"
                f" while a batch runs: {fmt_rate(doubled.rate)} jobs/s against"
                f" {fmt_rate(big.rate)} at concurrency {default_concurrency(high)}"
                f" ({doubled.rate / big.rate:.2f}x)"
            )
    if many > one:
        for batch in plan.batches:
            single, several = (
                cell(far, "ours-batched", one, batch),
                cell(far, "ours-batched", many, batch),
            )
            if single and several:
                lines.append(
                    f"worker processes (batch {batch}, {far:g} ms): {many} drain"
                    f" {several.rate / single.rate:.1f}x what {one} does: each process's claim"
                    " loop waits a round trip per claim, and processes wait side by side"
                )
    ours_l, raw_l = latencies.get((far, "ours")), latencies.get((far, "raw"))
    if ours_l and raw_l and far:
        lines.append(
            f"add-to-start latency at {far:g} ms: ours p50 {fmt_ms(ours_l.p50)} ms"
            f" ({ours_l.p50 / (far / 1000):.1f} RTTs), raw {fmt_ms(raw_l.p50)} ms"
            f" ({raw_l.p50 / (far / 1000):.1f}): the enqueue's round trip, the notification's"
            " way to the worker and its claim's round trip; no setting shortens it, only a"
            " shorter way between the workers and the database"
        )
    tx, batched = cell(far, "ours-batch-tx", one, high), cell(far, "ours-batched", one, high)
    if tx and batched:
        lines.append(
            "exactly-once handlers: a batch task (ours-batch-tx) drains"
            f" {tx.rate / batched.rate:.2f}x the batched mode at batch {high} and {far:g} ms"
            f" (its transaction's round trips: {tx.round_trips_per_job * high:.1f} per batch"
            f" of {high}); a task that completes its own job in its own transaction spends"
            " those per job: on a remote link, batch them"
        )
    return lines


# -- main ------------------------------------------------------------------------------------------


def float_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"need numbers >= 0: {text!r}")
    return tuple(sorted(set(values)))


def int_list(text: str) -> tuple[int, ...]:
    values = float_list(text)
    if any(v < 1 or v != int(v) for v in values):
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return tuple(int(v) for v in values)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.remote", description=(__doc__ or "").split("\n\n")[0]
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
