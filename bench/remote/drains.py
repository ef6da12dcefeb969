"""``bench.remote``'s drains: the cells (system, batch, workers, concurrency) at each RTT,
their sizes, and the counted drains through the link."""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext

from bench.harness.drain import MAX_JOBS, SIZE_MARGIN, prepare_drain, run_python_drain
from bench.harness.machine import QUIET_BUSY, fmt_busy, wait_quiet
from bench.harness.server import Server, connection_budget
from bench.harness.systems import SYSTEMS
from bench.harness.systems.base import DrainSpec, System
from bench.remote import FIRST_JOBS, CellKey, Shape
from bench.remote.link import Link
from tests.helpers.netproxy import Counters


def default_concurrency(batch: int) -> int:
    """bench.queue's (``DrainSpec.default``)."""
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
    bench.queue's concurrency; at the longest RTT also ours with twice the batch size
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
