"""Queue in steady state, and under a held xmin horizon (issue 13 section 6).

Run it from the repository root::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.steady
    python -m bench.steady                 # embedded server under .pgenough-bench/
    python -m bench.steady --quick         # smoke run: 30 s steady phases, a 24 s hold

Burn-down figures flatter every queue: a backlog drained once never meets its own dead rows.
This benchmark runs pgenough's batched worker (``ours``) and the raw SKIP LOCKED loop of
``bench/queue.py`` (``raw``; its DELETE sent unprepared, planned each time on the claim index:
``bench.queue.RAW_TAKE_PREPARE``) one after the other, each in its own fresh database, with
autovacuum ON (as users run it). If the server has it off, the benchmark turns it on with
``ALTER SYSTEM SET autovacuum = on`` and a reload, and resets it at the end (the per-table
``autovacuum_enabled`` storage parameter does nothing while the launcher is off);
``--no-alter-system`` refuses and stops instead.

Per system, in one run:

1. *capacity*: a backlog of ``--jobs`` no-op jobs is drained by W worker processes
   (``bench.queue.run_drain``: the same workers and settings as ``bench/queue.py``, batch B).
2. *steady 50% / 90%*: a producer process enqueues at a fixed rate (50% and 90% of that
   capacity) in paced small batches, one every ``TICK`` seconds (``enqueue_many`` for ours,
   a COPY for raw, one transaction each), as an application would, while W workers drain,
   for ``--phase`` seconds each. Each job's payload carries the producer's ``time.time()``;
   the handler's first line takes its own: end-to-end latency, enqueue to handler start.
3. *held xmin*: one run with this rate schedule: ``base`` (50% of capacity) for 20 s; a ramp
   of six equal steps over ``--hold`` seconds at 30/50/70/85/100/115% of capacity (past it:
   a burn-down underestimates what steady workers sustain); ``base`` for 40 s; the same ramp
   while another connection holds a snapshot (``BEGIN ISOLATION LEVEL REPEATABLE READ;
   SELECT 1``) open in the same database; release; ``base`` for 40 s.
   The ramps with and without the hold are identical, so their figures compare step by
   step. A step *holds* when the backlog grows by less than 5% of what it enqueued; the
   *sustainable rate* is the highest step rate before the first step that does not.
   *Recovery* is the time from the end of a ramp until the backlog is back under its
   threshold (twice the largest backlog of the first base segment, at least 200 jobs) and
   the claim p50 in 1 s bins under twice the first base segment's, for 5 s in a row.

Claim latency: the raw loop times its ``DELETE ... RETURNING`` round trip; for ours the
benchmark wraps the worker's claim method (``_Executor._claim``: the claim statement and
its acknowledgements, one round trip) with a timer in the worker process; nothing in the
product changes. A sampler reads, every ``SAMPLE`` seconds, the jobs table's total size
(``pg_total_relation_size``), its heap, claim index and primary key sizes, ``n_live_tup``,
``n_dead_tup`` and the autovacuum count (``pg_stat_user_tables``). The backlog at time t is
the jobs enqueued (the producer's log) minus the handlers started by t.

It prints every figure and table and renders ``docs/img/queue-steady.png`` (steady phases)
and ``docs/img/queue-held-xmin.png`` (the held-xmin runs).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import multiprocessing
import os
import pickle
import platform
import statistics
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.synchronize import Barrier
from multiprocessing.synchronize import Event as MPEvent
from pathlib import Path
from typing import Any, Literal, TypeAlias

import psycopg
from bench.queue import (
    BARRIER_TIMEOUT,
    DEFAULT_DATA_DIR,
    KIND,
    OURS_POOL_SIZE,
    QUEUE,
    ROOT,
    DrainSpec,
    Server,
    enqueue_ours,
    enqueue_raw,
    prepare_drain,
    raw_take,
    run_drain,
    setup_ours,
    setup_raw,
    table,
)

from pgenough.core import Job, NewJob, Worker, WorkerConfig, enqueue_many, open_pool, start_embedded
from pgenough.core.db import with_database

IMG_DIR = ROOT / "docs" / "img"

SteadySystem: TypeAlias = Literal["ours", "raw"]
SYSTEMS: tuple[SteadySystem, ...] = ("ours", "raw")
DRAIN_SYSTEM = {"ours": "ours-batched", "raw": "raw"}
TABLE = {"ours": "pgenough.jobs", "raw": "public.raw_jobs"}
CLAIM_INDEX = {"ours": "pgenough.jobs_claim_idx", "raw": "public.raw_jobs_claim_idx"}
PKEY = {"ours": "pgenough.jobs_pkey", "raw": "public.raw_jobs_pkey"}

TICK = 0.01
"""Seconds between the producer's enqueues (each a small batch in one transaction)."""
SAMPLE = 2.0
"""Seconds between table-size and dead-tuple samples."""
RAW_IDLE_SLEEP = 0.002
"""The raw loop has no LISTEN: it polls this often when a claim comes back empty."""
RAMP = (0.3, 0.5, 0.7, 0.85, 1.0, 1.15)
"""Step rates of the ramps, as fractions of the measured drain capacity."""
BASE = 0.5
GROWTH = 0.05
"""A ramp step does not hold when the backlog grows by more than this share of its jobs."""
RECOVERED = 5
"""Consecutive 1 s bins under the thresholds that count as recovered."""
DRAIN_GRACE = 60.0
"""After a phase's schedule, how long the workers may take to catch up before stopping."""
SETTINGS = (
    "server_version",
    "synchronous_commit",
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "shared_buffers",
)


# -- what a phase runs and records ---------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    start: float
    end: float
    rate: float
    label: str


@dataclass(frozen=True)
class PhaseSpec:
    system: SteadySystem
    url: str
    name: str
    steps: tuple[Step, ...]
    holds: tuple[tuple[float, float], ...] = ()
    """(start, end) offsets of the held snapshot."""
    workers: int = 2
    batch: int = 10

    @property
    def length(self) -> float:
        return self.steps[-1].end


@dataclass(frozen=True)
class WorkerSpec:
    system: SteadySystem
    url: str
    batch: int
    out: Path


@dataclass
class Record:
    """What one worker process or the producer saw (pickled to a file)."""

    claims: list[tuple[float, float, int]] = field(default_factory=list)
    """(time.time() at the claim's end, seconds it took, jobs it returned)."""
    starts: list[tuple[float, float]] = field(default_factory=list)
    """(handler start time, seconds since the producer enqueued the job)."""
    sent: list[tuple[float, int]] = field(default_factory=list)
    """Producer: (time.time() after the commit, jobs in that transaction)."""
    error: str | None = None


@dataclass
class PhaseResult:
    spec: PhaseSpec
    t0: float
    claims: list[tuple[float, float, int]]
    starts: list[tuple[float, float]]
    sent: list[tuple[float, int]]
    samples: list[dict[str, float]]

    def __post_init__(self) -> None:
        self.claims.sort()
        self.starts.sort()
        self.sent.sort()
        self._start_times = [s[0] - self.t0 for s in self.starts]
        self._sent_times = [s[0] - self.t0 for s in self.sent]
        self._sent_cum: list[int] = []
        total = 0
        for _, n in self.sent:
            total += n
            self._sent_cum.append(total)

    def enqueued_by(self, t: float) -> int:
        i = bisect.bisect_right(self._sent_times, t)
        return self._sent_cum[i - 1] if i else 0

    def started_by(self, t: float) -> int:
        return bisect.bisect_right(self._start_times, t)

    def backlog(self, t: float) -> int:
        return self.enqueued_by(t) - self.started_by(t)

    def claim_latencies(self, a: float, b: float) -> list[float]:
        return [d for t, d, _ in self.claims if a <= t - self.t0 < b]

    def e2e(self, a: float, b: float) -> list[float]:
        return [lat for t, lat in self.starts if a <= t - self.t0 < b]

    def done_rate(self, a: float, b: float) -> float:
        return (self.started_by(b) - self.started_by(a)) / (b - a)

    def sent_rate(self, a: float, b: float) -> float:
        return (self.enqueued_by(b) - self.enqueued_by(a)) / (b - a)


# -- the worker processes ------------------------------------------------------------------------


def _ours_worker(spec: WorkerSpec, ready: Barrier, stop: MPEvent, rec: Record) -> None:
    from pgenough.core import worker as worker_module

    original = worker_module._Executor._claim

    async def timed_claim(self: Any, conn: Any, done: Any, limit: int) -> Any:
        began = time.perf_counter()
        jobs = await original(self, conn, done, limit)
        rec.claims.append((time.time(), time.perf_counter() - began, len(jobs)))
        return jobs

    worker_module._Executor._claim = timed_claim  # type: ignore[method-assign]

    async def go() -> None:
        pool = await open_pool(
            spec.url, min_size=OURS_POOL_SIZE, max_size=OURS_POOL_SIZE, name="bench-steady"
        )
        starts = rec.starts

        async def handler(job: Job) -> None:
            now = time.time()
            starts.append((now, now - job.payload["t"]))

        config = WorkerConfig(
            queue=QUEUE, batch_size=spec.batch, concurrency=max(10, spec.batch), maintenance=None
        )
        worker = Worker(pool, {KIND: handler}, config)
        task = asyncio.create_task(worker.run())
        await worker.wait_listening()
        await asyncio.to_thread(ready.wait, BARRIER_TIMEOUT)
        await asyncio.to_thread(stop.wait)
        worker.stop()
        await task
        await pool.close()

    asyncio.run(go())


def _raw_worker(spec: WorkerSpec, ready: Barrier, stop: MPEvent, rec: Record) -> None:
    with psycopg.connect(spec.url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        ready.wait(BARRIER_TIMEOUT)
        while not stop.is_set():
            began = time.perf_counter()
            rows = raw_take(conn, spec.batch)  # unprepared: see bench.queue.RAW_TAKE_PREPARE
            took = time.perf_counter() - began
            now = time.time()
            rec.claims.append((now, took, len(rows)))
            for row in rows:  # the handler's first line
                now = time.time()
                rec.starts.append((now, now - row[3]["t"]))
            if not rows:
                time.sleep(RAW_IDLE_SLEEP)


def _worker_main(spec: WorkerSpec, ready: Barrier, stop: MPEvent) -> None:
    rec = Record()
    try:
        (_ours_worker if spec.system == "ours" else _raw_worker)(spec, ready, stop, rec)
    except BaseException:
        ready.abort()
        rec.error = traceback.format_exc()
    spec.out.write_bytes(pickle.dumps(rec))


def _producer_main(
    system: SteadySystem, url: str, steps: tuple[Step, ...], t0: float, out: Path
) -> None:
    """Enqueue on schedule: at each tick, the jobs the rate integral says are due."""
    rec = Record()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            due = 0.0
            last = t0
            end = t0 + steps[-1].end
            while (now := time.time()) < end:
                if now < t0:
                    time.sleep(t0 - now)
                    continue
                offset = now - t0
                step = next((s for s in steps if s.start <= offset < s.end), None)
                rate = step.rate if step else 0.0
                due += rate * (now - last)
                last = now
                # Behind schedule, catch up in bounded batches (one tick's worth times ten).
                n = min(int(due), max(1, int(rate * TICK * 10)))
                if n:
                    due -= n
                    stamp = {"t": time.time()}
                    if system == "ours":
                        enqueue_many(conn, [NewJob(KIND, stamp, queue=QUEUE)] * n)
                    else:
                        payload = json.dumps(stamp)
                        with conn.cursor().copy(
                            "COPY raw_jobs (queue, kind, payload) FROM STDIN"
                        ) as copy:
                            for _ in range(n):
                                copy.write_row((QUEUE, KIND, payload))
                    rec.sent.append((time.time(), n))
                pause = TICK - (time.time() - now)
                if pause > 0:
                    time.sleep(pause)
    except BaseException:
        rec.error = traceback.format_exc()
    out.write_bytes(pickle.dumps(rec))


# -- the main process: sampler, snapshot holder, phase runner -------------------------------------


def _sampler(
    system: SteadySystem, url: str, t0: float, stop: threading.Event, out: list[dict[str, float]]
) -> None:
    query = f"""
        SELECT pg_total_relation_size('{TABLE[system]}'), pg_relation_size('{TABLE[system]}'),
               pg_relation_size('{CLAIM_INDEX[system]}'), pg_relation_size('{PKEY[system]}'),
               n_live_tup, n_dead_tup, autovacuum_count
        FROM pg_stat_user_tables WHERE relid = '{TABLE[system]}'::regclass
    """
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(query).fetchone()
            assert row is not None
            keys = ("total", "heap", "claim_idx", "pkey", "live", "dead", "autovacuums")
            out.append({"t": time.time() - t0, **dict(zip(keys, map(float, row), strict=True))})
            if stop.wait(SAMPLE):
                return


def _holder(url: str, t0: float, holds: tuple[tuple[float, float], ...]) -> None:
    with psycopg.connect(url) as conn:
        for start, end in holds:
            time.sleep(max(0.0, t0 + start - time.time()))
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT 1")  # takes the snapshot: the xmin horizon stops here
            time.sleep(max(0.0, t0 + end - time.time()))
            conn.rollback()


def run_phase(ctx: SpawnContext, spec: PhaseSpec) -> PhaseResult:
    with tempfile.TemporaryDirectory(prefix="pgenough-steady-") as tmp:
        stop = ctx.Event()
        ready = ctx.Barrier(spec.workers + 1)
        outs = [Path(tmp) / f"worker-{n}.pkl" for n in range(spec.workers)]
        procs = [
            ctx.Process(
                target=_worker_main,
                args=(WorkerSpec(spec.system, spec.url, spec.batch, out), ready, stop),
                daemon=True,
            )
            for out in outs
        ]
        for p in procs:
            p.start()
        samples: list[dict[str, float]] = []
        stop_sampling = threading.Event()
        try:
            with contextlib.suppress(threading.BrokenBarrierError):
                ready.wait(BARRIER_TIMEOUT)
            t0 = time.time() + 1.0  # the producer's start, after its own start-up
            producer_out = Path(tmp) / "producer.pkl"
            producer = ctx.Process(
                target=_producer_main,
                args=(spec.system, spec.url, spec.steps, t0, producer_out),
                daemon=True,
            )
            producer.start()
            sampler = threading.Thread(
                target=_sampler, args=(spec.system, spec.url, t0, stop_sampling, samples)
            )
            sampler.start()
            holder = threading.Thread(target=_holder, args=(spec.url, t0, spec.holds))
            holder.start()
            producer.join(spec.length + 120)
            holder.join()
            sent = pickle.loads(producer_out.read_bytes())
            if sent.error:
                raise RuntimeError(f"producer failed:\n{sent.error}")
            total = sum(n for _, n in sent.sent)
            # Let the workers catch up (a backlog left by the last step), then stop them.
            deadline = time.time() + DRAIN_GRACE
            while time.time() < deadline and _remaining(spec) > 0:
                time.sleep(0.5)
        finally:
            stop.set()
            stop_sampling.set()
            for p in procs:
                p.join(60)
                if p.is_alive():
                    p.terminate()
        records = [pickle.loads(o.read_bytes()) for o in outs]
        for r in records:
            if r.error:
                raise RuntimeError(f"{spec.system} worker failed:\n{r.error}")
        claims = [c for r in records for c in r.claims]
        starts = [s for r in records for s in r.starts]
        if len(starts) < total:
            # Deleted: the next phase starts from an empty queue.
            print(f"  note: {total - len(starts):,} of {total:,} jobs left undone at the stop")
            with psycopg.connect(spec.url, autocommit=True) as conn:
                conn.execute(f"DELETE FROM {TABLE[spec.system]}")
        return PhaseResult(spec, t0, claims, starts, sent.sent, samples)


def _remaining(spec: PhaseSpec) -> int:
    with psycopg.connect(spec.url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {TABLE[spec.system]} WHERE state = 'ready'"
        ).fetchone()
    return int(row[0]) if row else 0


# -- analysis ------------------------------------------------------------------------------------


def p50(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p99(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return xs[0] if xs else float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[98]


def ms(x: float) -> str:
    return f"{x * 1000:.2f}"


def mib(x: float) -> str:
    return f"{x / 2**20:.1f}"


def per_second(result: PhaseResult) -> list[dict[str, float]]:
    """1 s bins: claim p50, handlers started, backlog at the bin's end."""
    bins: list[dict[str, float]] = []
    length = int(result.spec.length + 0.999)
    claims: dict[int, list[float]] = {}
    for t, d, _ in result.claims:
        claims.setdefault(int(t - result.t0), []).append(d)
    for s in range(length):
        bins.append(
            {
                "t": s + 1.0,
                "claim_p50": p50(claims.get(s, [])),
                "done": float(result.started_by(s + 1) - result.started_by(s)),
                "backlog": float(result.backlog(s + 1)),
            }
        )
    return bins


@dataclass
class RampStep:
    rate: float
    sent: float
    done: float
    growth: int
    holds: bool
    claim_p50: float


def ramp_steps(result: PhaseResult, label: str) -> list[RampStep]:
    out = []
    for s in result.spec.steps:
        if s.label != label:
            continue
        growth = result.backlog(s.end) - result.backlog(s.start)
        sent = result.enqueued_by(s.end) - result.enqueued_by(s.start)
        out.append(
            RampStep(
                rate=s.rate,
                sent=result.sent_rate(s.start, s.end),
                done=result.done_rate(s.start, s.end),
                growth=growth,
                holds=growth <= max(50, GROWTH * sent),
                claim_p50=p50(result.claim_latencies(s.start, s.end)),
            )
        )
    return out


def sustainable(steps: list[RampStep]) -> float:
    best = 0.0
    for s in steps:
        if not s.holds:
            break
        best = s.rate
    return best


def recovery(
    result: PhaseResult, after: float, until: float, backlog_max: float, claim_max: float
) -> float | None:
    """Seconds from ``after`` until backlog and 1 s claim p50 are back under their
    thresholds for RECOVERED consecutive seconds (None: not by ``until``)."""
    bins = [b for b in per_second(result) if after < b["t"] <= until]
    good = 0
    for b in bins:
        ok = b["backlog"] <= backlog_max and not b["claim_p50"] > claim_max
        good = good + 1 if ok else 0
        if good == RECOVERED:
            return b["t"] - RECOVERED - after
    return None


# -- schedules -----------------------------------------------------------------------------------


def steady_steps(rate: float, length: float) -> tuple[Step, ...]:
    return (Step(0.0, length, rate, "steady"),)


def held_steps(capacity: float, hold: float) -> tuple[tuple[Step, ...], tuple[float, float]]:
    base = BASE * capacity
    steps: list[Step] = [Step(0.0, 20.0, base, "base")]
    t = 20.0
    width = hold / len(RAMP)
    for label in ("ramp", "base2", "held", "after"):
        if label in ("ramp", "held"):
            for f in RAMP:
                steps.append(Step(t, t + width, f * capacity, label))
                t += width
        else:
            length = 40.0
            steps.append(Step(t, t + length, base, label))
            t += length
    hold_start = next(s.start for s in steps if s.label == "held")
    hold_end = max(s.end for s in steps if s.label == "held")
    return tuple(steps), (hold_start, hold_end)


# -- report and image ----------------------------------------------------------------------------


def size_row(result: PhaseResult) -> list[str]:
    s = result.samples
    if not s:
        return ["?"] * 6
    return [
        f"{mib(s[0]['total'])} -> {mib(max(x['total'] for x in s))} -> {mib(s[-1]['total'])}",
        f"{mib(max(x['claim_idx'] for x in s))}",
        f"{mib(max(x['pkey'] for x in s))}",
        f"{max(x['dead'] for x in s):,.0f}",
        f"{s[-1]['dead']:,.0f}",
        f"{s[-1]['autovacuums'] - s[0]['autovacuums']:.0f}",
    ]


def print_series(result: PhaseResult, every: int) -> None:
    rows = []
    samples = result.samples
    for i, s in enumerate(samples):
        if i % every and i != len(samples) - 1:
            continue
        t = s["t"]
        rows.append(
            [
                f"{t:.0f}",
                f"{result.sent_rate(max(0, t - SAMPLE), t) if t > 0 else 0:,.0f}",
                f"{result.done_rate(max(0, t - SAMPLE), t) if t > 0 else 0:,.0f}",
                f"{result.backlog(t):,}",
                ms(p50(result.claim_latencies(t - SAMPLE, t))),
                mib(s["total"]),
                mib(s["claim_idx"]),
                f"{s['live']:,.0f}",
                f"{s['dead']:,.0f}",
                f"{s['autovacuums']:.0f}",
            ]
        )
    print(
        table(
            [
                "t s",
                "enq/s",
                "done/s",
                "backlog",
                "claim p50 ms",
                "total MiB",
                "claim idx MiB",
                "live",
                "dead",
                "autovac",
            ],
            rows,
        )
    )


def render(
    steady: dict[tuple[SteadySystem, str], PhaseResult],
    held: dict[SteadySystem, PhaseResult],
) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        print("note: matplotlib missing (pip install -e '.[bench]'): no images")
        return []
    IMG_DIR.mkdir(parents=True, exist_ok=True)
    paths = []
    if steady:
        fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
        for (system, label), r in steady.items():
            ts = [s["t"] for s in r.samples]
            name = f"{system} {label}"
            axes[0].plot(ts, [r.backlog(t) for t in ts], label=name)
            axes[1].plot(ts, [s["dead"] for s in r.samples], label=name)
            axes[2].plot(ts, [s["total"] / 2**20 for s in r.samples], label=name)
            axes[3].plot(ts, [s["claim_idx"] / 2**20 for s in r.samples], label=name)
        for ax, title in zip(
            axes,
            ("backlog (jobs)", "n_dead_tup", "jobs table total MiB", "claim index MiB"),
            strict=True,
        ):
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        axes[-1].set_xlabel("seconds")
        fig.suptitle("Steady state at 50% and 90% of the drain capacity (autovacuum on)")
        fig.tight_layout()
        path = IMG_DIR / "queue-steady.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    if held:
        fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
        for system, r in held.items():
            bins = per_second(r)
            ts = [b["t"] for b in bins]
            axes[0].plot(ts, [b["claim_p50"] * 1000 for b in bins], label=system)
            axes[1].plot(ts, [b["done"] for b in bins], label=f"{system} done/s")
            axes[1].plot(
                ts,
                [r.sent_rate(t - 1, t) for t in ts],
                linestyle=":",
                label=f"{system} enqueued/s",
            )
            axes[2].plot(ts, [b["backlog"] for b in bins], label=system)
            axes[3].plot([s["t"] for s in r.samples], [s["dead"] for s in r.samples], label=system)
            for a, b in r.spec.holds:
                for ax in axes:
                    ax.axvspan(a, b, color="grey", alpha=0.08)
        axes[0].set_yscale("log")
        for ax, title in zip(
            axes, ("claim p50 ms (1 s bins)", "jobs/s", "backlog (jobs)", "n_dead_tup"), strict=True
        ):
            ax.set_ylabel(title)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        axes[-1].set_xlabel("seconds (shaded: REPEATABLE READ snapshot held)")
        fig.suptitle("Ramp without and with a held xmin horizon (autovacuum on)")
        fig.tight_layout()
        path = IMG_DIR / "queue-held-xmin.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


# -- autovacuum ----------------------------------------------------------------------------------


@contextlib.contextmanager
def autovacuum_on(admin_url: str, allow_alter: bool) -> Any:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
        if row and row[0] == "on":
            print("autovacuum: on (server setting)")
            yield
            return
        if not allow_alter:
            raise SystemExit("autovacuum is off on this server and --no-alter-system was given")
        conn.execute("ALTER SYSTEM SET autovacuum = on")
        conn.execute("SELECT pg_reload_conf()")
        time.sleep(1.0)
        row = conn.execute("SHOW autovacuum").fetchone()
        print(
            "autovacuum: off on this server; turned on for the run with ALTER SYSTEM SET "
            f"autovacuum = on + pg_reload_conf() (now {row[0] if row else '?'}), reset at the end"
        )
    try:
        yield
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET autovacuum")
            conn.execute("SELECT pg_reload_conf()")
            time.sleep(0.5)
            row = conn.execute("SHOW autovacuum").fetchone()
            print(f"autovacuum: reset (ALTER SYSTEM RESET autovacuum): {row[0] if row else '?'}")


def settings(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        out = {}
        for name in SETTINGS:
            row = conn.execute(f"SHOW {name}").fetchone()
            out[name] = str(row[0]) if row else "?"
        return out


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.steady", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="30 s phases, a 24 s hold")
    parser.add_argument("--phase", type=float, default=None, help="steady phase s (default 90)")
    parser.add_argument("--hold", type=float, default=None, help="held snapshot s (default 60)")
    parser.add_argument("--jobs", type=int, default=None, help="capacity drain (default 20000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--batch", type=int, default=10, help="claim batch (default 10)")
    parser.add_argument("--systems", default="ours,raw", help="comma-separated: ours,raw")
    parser.add_argument("--no-steady", action="store_true", help="only capacity and held xmin")
    parser.add_argument("--no-hold", action="store_true", help="only capacity and steady")
    parser.add_argument("--no-alter-system", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--json", type=Path, default=None, help="also write a summary here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    phase = args.phase or (30.0 if args.quick else 90.0)
    hold = args.hold or (24.0 if args.quick else 60.0)
    jobs = args.jobs or (5_000 if args.quick else 20_000)
    systems = [s for s in SYSTEMS if s in args.systems.split(",")]
    began = time.time()

    url = os.environ.get("DATABASE_URL")
    if url:
        server = Server(with_database(url, "postgres"), "DATABASE_URL")
    else:
        warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
        embedded = start_embedded(args.data_dir, database="postgres")
        server = Server(embedded.admin_url, f"embedded ({embedded.pgdata})")
    print(f"server: {server.description}")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"
    )
    print(
        f"plan: systems {systems}, {args.workers} worker processes, batch {args.batch}, "
        f"capacity drain {jobs:,} jobs, steady phases {phase:.0f} s at 50% and 90%, "
        f"hold {hold:.0f} s (ramp {RAMP} of capacity), producer tick {TICK * 1000:.0f} ms"
    )
    ctx = multiprocessing.get_context("spawn")
    capacity: dict[SteadySystem, float] = {}
    steady: dict[tuple[SteadySystem, str], PhaseResult] = {}
    held: dict[SteadySystem, PhaseResult] = {}
    try:
        with autovacuum_on(server.admin_url, not args.no_alter_system):
            print(
                "settings: " + ", ".join(f"{k}={v}" for k, v in settings(server.admin_url).items())
            )
            urls: dict[SteadySystem, str] = {}
            for system in systems:
                urls[system] = server.database(f"steady_{system}")
                (setup_ours if system == "ours" else setup_raw)(urls[system])
            # 1. capacity: same run, both systems, before anything else loads the tables.
            for system in systems:
                db = urls[system]
                (enqueue_ours if system == "ours" else enqueue_raw)(db, jobs)
                prepare_drain(db)
                seconds = run_drain(
                    ctx,
                    DrainSpec.default(
                        DRAIN_SYSTEM[system],
                        db,
                        args.batch,
                        args.workers,
                        OURS_POOL_SIZE * args.workers,  # a full pool per process, as before
                    ),
                    args.workers,
                    jobs,
                )
                capacity[system] = jobs / seconds
                print(f"capacity {system:>4}: {capacity[system]:,.0f} jobs/s ({seconds:.2f} s)")
            # 2. steady state
            if not args.no_steady:
                for system in systems:
                    for share in (0.5, 0.9):
                        prepare_drain(urls[system])
                        label = f"{share:.0%}"
                        rate = share * capacity[system]
                        spec = PhaseSpec(
                            system,
                            urls[system],
                            f"steady {label}",
                            steady_steps(rate, phase),
                            workers=args.workers,
                            batch=args.batch,
                        )
                        print(f"\n== {system} steady {label}: {rate:,.0f} jobs/s for {phase:.0f} s")
                        r = run_phase(ctx, spec)
                        steady[(system, label)] = r
                        print_series(r, every=max(1, int(phase / SAMPLE / 12)))
            # 3. held xmin
            if not args.no_hold:
                for system in systems:
                    prepare_drain(urls[system])
                    steps, window = held_steps(capacity[system], hold)
                    spec = PhaseSpec(
                        system,
                        urls[system],
                        "held",
                        steps,
                        holds=(window,),
                        workers=args.workers,
                        batch=args.batch,
                    )
                    print(
                        f"\n== {system} held xmin: ramp without, then with a snapshot held "
                        f"{window[0]:.0f}-{window[1]:.0f} s ({spec.length:.0f} s)"
                    )
                    r = run_phase(ctx, spec)
                    held[system] = r
                    print_series(r, every=1)
    finally:
        server.drop_all()

    summary = report(capacity, steady, held)
    for path in render(steady, held):
        print(f"image: {path.relative_to(ROOT)}")
    print(f"\ntotal time {time.time() - began:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


def report(
    capacity: dict[SteadySystem, float],
    steady: dict[tuple[SteadySystem, str], PhaseResult],
    held: dict[SteadySystem, PhaseResult],
) -> dict[str, Any]:
    summary: dict[str, Any] = {"capacity": capacity, "steady": {}, "held": {}}
    print("\n## Drain capacity (burn-down, same run)")
    print(table(["system", "jobs/s"], [[s, f"{c:,.0f}"] for s, c in capacity.items()]))
    if steady:
        print("\n## Steady state (figures over the phase after its first 5 s)")
        rows = []
        for (system, label), r in steady.items():
            a, b = 5.0, r.spec.length
            e2e = r.e2e(a, b)
            claims = r.claim_latencies(a, b)
            rows.append(
                [
                    system,
                    label,
                    f"{r.spec.steps[0].rate:,.0f}",
                    f"{r.sent_rate(a, b):,.0f}",
                    f"{r.done_rate(a, b):,.0f}",
                    ms(p50(e2e)),
                    ms(p99(e2e)),
                    ms(p50(claims)),
                    f"{max((r.backlog(t) for t in range(int(b))), default=0):,}",
                    *size_row(r),
                ]
            )
            summary["steady"][f"{system} {label}"] = {
                "rate": r.spec.steps[0].rate,
                "enqueued": r.sent_rate(a, b),
                "done": r.done_rate(a, b),
                "e2e_p50": p50(e2e),
                "e2e_p99": p99(e2e),
                "claim_p50": p50(claims),
                "samples": r.samples,
            }
        print(
            table(
                [
                    "system",
                    "load",
                    "target/s",
                    "enqueued/s",
                    "done/s",
                    "e2e p50 ms",
                    "e2e p99 ms",
                    "claim p50 ms",
                    "max backlog",
                    "total MiB start->max->end",
                    "claim idx max MiB",
                    "pkey max MiB",
                    "max dead",
                    "end dead",
                    "autovacuums",
                ],
                rows,
            )
        )
    for system, r in held.items():
        steps = {label: ramp_steps(r, label) for label in ("ramp", "held")}
        window = r.spec.holds[0]
        ramp_start = next(s.start for s in r.spec.steps if s.label == "ramp")
        ramp_end = max(s.end for s in r.spec.steps if s.label == "ramp")
        base = r.claim_latencies(5.0, 20.0)
        before = r.claim_latencies(ramp_start, ramp_end)
        during = r.claim_latencies(*window)
        after = r.claim_latencies(window[1] + 20.0, r.spec.length)
        backlog_max = max(200.0, 2 * max(r.backlog(t) for t in range(5, 20)))
        claim_max = 2 * p50(base)
        rec_ramp = recovery(r, ramp_end, window[0], backlog_max, claim_max)
        rec_held = recovery(r, window[1], r.spec.length, backlog_max, claim_max)
        sus = {k: sustainable(v) for k, v in steps.items()}
        print(f"\n## {system}: held xmin (snapshot {window[0]:.0f}-{window[1]:.0f} s)")
        rows = []
        for a, b in zip(steps["ramp"], steps["held"], strict=True):
            rows.append(
                [
                    f"{a.rate:,.0f}",
                    f"{a.sent:,.0f} / {b.sent:,.0f}",
                    f"{a.done:,.0f} / {b.done:,.0f}",
                    f"{a.growth:,} / {b.growth:,}",
                    f"{'yes' if a.holds else 'no'} / {'yes' if b.holds else 'no'}",
                    f"{ms(a.claim_p50)} / {ms(b.claim_p50)}",
                ]
            )
        print("ramp steps, without / with the held snapshot:")
        print(
            table(
                ["step rate/s", "enqueued/s", "done/s", "backlog growth", "holds", "claim p50 ms"],
                rows,
            )
        )
        print(
            f"claim p50: base {ms(p50(base))} ms; ramp without hold {ms(p50(before))} ms; "
            f"during the hold {ms(p50(during))} ms ({p50(during) / p50(before):.2f}x); "
            f"from 20 s after release {ms(p50(after))} ms"
        )
        ratio = sus["held"] / sus["ramp"] if sus["ramp"] else float("nan")
        peak = {k: max(x.done for x in v) for k, v in steps.items()}
        print(
            f"peak done/s over the ramp steps: without hold {peak['ramp']:,.0f}, during the "
            f"hold {peak['held']:,.0f} ({peak['held'] / peak['ramp']:.2f}x)"
        )
        print(
            f"sustainable rate: without hold {sus['ramp']:,.0f} jobs/s, during the hold "
            f"{sus['held']:,.0f} jobs/s ({ratio:.2f}x)"
        )
        fmt = lambda x: "not within the run" if x is None else f"{x:.0f} s"  # noqa: E731
        print(
            f"recovery (backlog <= {backlog_max:,.0f}, 1 s claim p50 <= {ms(claim_max)} ms): "
            f"after the no-hold ramp {fmt(rec_ramp)}, after the release {fmt(rec_held)}"
        )
        ok_claim = p50(during) <= 2 * p50(before)
        ok_rate = ratio >= 0.8
        ok_rec = rec_held is not None and rec_held <= 30
        print(
            f"targets ({system}): claim p50 during <= 2x without: "
            f"{'met' if ok_claim else 'NOT met'}; sustainable >= 0.8x: "
            f"{'met' if ok_rate else 'NOT met'}; recovery <= 30 s: {'met' if ok_rec else 'NOT met'}"
        )
        summary["held"][system] = {
            "claim_p50_base": p50(base),
            "claim_p50_ramp": p50(before),
            "claim_p50_held": p50(during),
            "claim_p50_after": p50(after),
            "sustainable_ramp": sus["ramp"],
            "sustainable_held": sus["held"],
            "peak_done_ramp": peak["ramp"],
            "peak_done_held": peak["held"],
            "recovery_ramp": rec_ramp,
            "recovery_held": rec_held,
            "steps": {k: [vars(s) for s in v] for k, v in steps.items()},
            "samples": r.samples,
        }
    return summary


if __name__ == "__main__":
    main()
