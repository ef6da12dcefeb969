"""Queue in steady state, its sustained capacity, and a held xmin horizon (issues 13 §6, 20).

Run it from the repository root::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.steady
    python -m bench.steady                 # embedded server under .pgenough-bench/
    python -m bench.steady --quick         # smoke run: 30 s steady, 20 s sustain, a 24 s hold
    python -m bench.steady --plot-steady docs/img/queue-steady.png \
        --plot-held docs/img/queue-held-xmin.png   # the docs' images (nothing is drawn without)

Burn-down figures flatter every queue: a backlog drained once never meets its own dead rows.
This benchmark runs pgenough's batched worker (``ours``, its maintenance duties on as deployed: the
vacuum duty among them) and the raw SKIP LOCKED loop of
``bench/queue.py`` (``raw``; its DELETE prepared but planned each time, on the claim index:
``bench.queue.RAW_OPTIONS``) one after the other, each in its own fresh database, with
autovacuum ON (as users run it). If the server has it off, the benchmark turns it on with
``ALTER SYSTEM SET autovacuum = on`` and a reload, and resets it at the end (the per-table
``autovacuum_enabled`` storage parameter does nothing while the launcher is off);
``--no-alter-system`` refuses and stops instead. The default run is both systems, every part.

Run time with the defaults, estimated (not measured): per system the capacity drain, two
steady phases of 90 s, three to six sustain phases of 120 s and a held run of 220 s, each
phase with its start-up and up to ``DRAIN_GRACE`` (60 s) for the workers to catch up after
its schedule; about 25 minutes for both systems when every phase keeps up, up to about 55
when the search runs six phases and every phase uses its catch-up. ``--quick``: 10-15 minutes.

Per system, in one run (each phase after a ``VACUUM ANALYZE``, from an empty queue):

1. *capacity*: a backlog of ``--jobs`` no-op jobs is drained by W worker processes
   (``bench.queue.run_drain``: the same workers and settings as ``bench/queue.py``, batch B):
   the *burn-down capacity* every rate below is a fraction of. As in ``bench/queue.py``, a
   drain shorter than 2 s (``MIN_DRAIN_S``) is not counted: the backlog grows
   (``bench.queue.grown``: 2.5 s at the short drain's rate, at least twice as many jobs) and
   is drained again.
2. *steady 50% / 90%*: a producer process enqueues at a fixed rate (50% and 90% of that
   capacity) in paced small batches, one every ``TICK`` seconds (``enqueue_many`` for ours,
   a COPY for raw, one transaction each), as an application would, while W workers drain,
   for ``--phase`` seconds each. Each job's payload carries the producer's ``time.time()``;
   the handler's first line takes its own: end-to-end latency, enqueue to handler start.
   The table's figures are over the phase after its first ``SETTLE`` (5) seconds; *done/enq
   whole* is the jobs started over the jobs enqueued from the producer's start to the end of
   its schedule (the whole phase).
3. *sustained capacity*: the highest producer rate held for ``--sustain`` seconds (default
   120; ``--quick`` 20) with a bounded backlog. A phase at rate R (a steady phase of that
   length) *holds* when, over the phase after its first 5 s, done/s >= 0.99x enqueued/s AND
   the backlog at the end of the producer's schedule is at most 1 s of enqueues (enqueued/s
   x ``BOUNDED_BACKLOG_S``). The search starts at ``SUSTAIN_START`` = 0.8x the burn-down
   capacity; while phases hold it steps up by 0.1x, and the last that held is the answer
   once one does not; if 0.8x does not hold it steps down by 0.1x until one does. At most
   ``--sustain-phases`` (6) phases: a search that was still rising is reported as *or more*.
   It is reported in jobs/s and as a ratio to the burn-down capacity.
4. *held xmin*: one run with this rate schedule: ``base`` (50% of capacity) for 20 s; a ramp
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

Targets (issue 20), printed last, one row each with the measured figure and met / NOT met: at
50% and 90% of the burn-down capacity done/s >= 0.99x enqueued/s for the whole phase (done/enq
whole); e2e p99 <= 50 ms at 50% and <= 250 ms at 90% (the table's e2e p99); sustained capacity
>= 0.8x burn-down; held xmin (``--hold`` s, base 50%): claim p50 during the hold <= 2x its
baseline (the same ramp without the hold), sustainable rate during the hold >= 0.8x the one
without, recovery after the release <= 30 s. A target whose phase failed is NOT met; one left
out by ``--no-steady`` / ``--no-sustain`` / ``--no-hold`` is ``not run``.

Claim latency: the raw loop times its ``DELETE ... RETURNING`` round trip; for ours the
benchmark wraps the worker's claim method (``_Executor._claim``: the claim statement and
its acknowledgements, one round trip) with a timer in the worker process; nothing in the
product changes. A sampler reads, every ``SAMPLE`` seconds, the jobs table's total size
(``pg_total_relation_size``), its heap, claim index and primary key sizes, ``n_live_tup``,
``n_dead_tup`` and the autovacuum and autoanalyze counts (``autovacuum_count``,
``autoanalyze_count`` of ``pg_stat_user_tables``: an autoanalyze also replaces the statistics
the claim is planned with), printed in each series (cumulative) and, per phase, in the size
table (during the phase). The backlog at time t is the jobs enqueued (the producer's log)
minus the handlers started by t.

A run is never lost: a phase whose worker or producer raised, died (killed, say) or left no
record, or whose sampler or snapshot holder failed, is stopped as soon as it is seen, printed
as ``FAILED <phase>: <reason> -- carrying on`` with every reason found (a worker's traceback
too), its leftover jobs deleted, and the run goes on with the next phase (a system whose
capacity drain failed runs no load phase; a sustained-capacity search stops at its failed
phase). Every phase measured is printed and, with ``--json``, written, the failures listed
at the end, and the exit status is then 1. Each phase prints its worker pids.

It prints every figure and table; images only when asked: ``--plot-steady PATH.png`` (the
steady phases: backlog, n_dead_tup, table and claim index size over time) and ``--plot-held
PATH.png`` (the held-xmin runs: claim p50, jobs/s, backlog, n_dead_tup); the docs' images are
``docs/img/queue-steady.png`` and ``docs/img/queue-held-xmin.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import ctypes
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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar

import psycopg
from bench.harness.drain import (
    MAX_SIZINGS,
    MIN_DRAIN_S,
    grown,
    prepare_drain,
    run_drain,
)
from bench.harness.machine import (
    refuse_if_busy,
)
from bench.harness.report import (
    fmt_ms,
    percentile,
    table,
    verdict,
)
from bench.harness.server import (
    DEFAULT_DATA_DIR,
    Server,
    autovacuum_on,
    server_facts,
)
from bench.harness.systems.base import (
    BARRIER_TIMEOUT,
    KIND,
    OURS_POOL_SIZE,
    QUEUE,
    DrainSpec,
)
from bench.harness.systems.ours import enqueue_ours, setup_ours
from bench.harness.systems.raw import (
    enqueue_raw,
    raw_connect,
    raw_take,
    setup_raw,
)

from pgenough.core import (
    Job,
    MaintenanceConfig,
    NewJob,
    Worker,
    WorkerConfig,
    enqueue_many,
    open_pool,
)
from pgenough.core.maintenance import DEFAULT_VACUUM_INTERVAL

T = TypeVar("T")
Flag: TypeAlias = Any
"""``ctx.RawValue(ctypes.c_bool)``: the stop flag every worker process of a phase reads."""
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
STOP_POLL = 0.05
"""How often an ours worker process looks at the stop flag (seconds)."""
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
SETTLE = 5.0
"""Seconds at a phase's start left out of its figures (workers and producer settling)."""
KEEP_UP = 0.99
"""done/s at least this share of enqueued/s: the workers keep up."""
BOUNDED_BACKLOG_S = 1.0
"""A sustain phase's final backlog is bounded when at most this many seconds of enqueues."""
SUSTAIN_START = 0.8
"""The sustained-capacity search's first rate, as a fraction of the burn-down capacity..."""
SUSTAIN_STEP = 0.1
"""... and its step: up while a phase holds, down from the start while one does not."""
SUSTAIN_PHASES = 6
"""The most phases of the search (``--sustain-phases``)."""
SUSTAIN_TARGET = 0.8
"""Issue 20: sustained capacity at least this share of the burn-down capacity."""
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
    fail_after: float | None = None
    """Debug (``--fail-worker-after``): the first worker raises this long after its start."""
    vacuum_interval: float | None = DEFAULT_VACUUM_INTERVAL
    """Ours: the vacuum duty's interval (None: off, autovacuum alone)."""

    @property
    def length(self) -> float:
        return self.steps[-1].end


@dataclass(frozen=True)
class WorkerSpec:
    system: SteadySystem
    url: str
    batch: int
    out: Path
    fail_after: float | None = None
    vacuum_interval: float | None = DEFAULT_VACUUM_INTERVAL


class PhaseFailed(Exception):
    """A phase that could not be measured (a worker or the producer died or raised)."""


def _debug_failure(spec: WorkerSpec) -> RuntimeError:
    return RuntimeError(f"--fail-worker-after {spec.fail_after:g}: this worker raises, as asked")


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


def _ours_worker(spec: WorkerSpec, ready: Barrier, stop: Flag, rec: Record) -> None:
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

        # Its maintenance duties on, as deployed (the rescuer, the cleaner, the vacuum of the
        # jobs table: MaintenanceConfig's defaults), once across the worker processes.
        config = WorkerConfig(
            queue=QUEUE,
            batch_size=spec.batch,
            concurrency=max(10, spec.batch),
            maintenance=MaintenanceConfig(vacuum_interval=spec.vacuum_interval),
        )
        worker = Worker(pool, {KIND: handler}, config)
        task = asyncio.create_task(worker.run())
        await worker.wait_listening()
        await asyncio.to_thread(ready.wait, BARRIER_TIMEOUT)
        fail_at = time.monotonic() + spec.fail_after if spec.fail_after else None
        while not stop.value:
            await asyncio.sleep(STOP_POLL)
            if fail_at and time.monotonic() > fail_at:
                raise _debug_failure(spec)
        worker.stop()
        await task
        await pool.close()

    asyncio.run(go())


def _raw_worker(spec: WorkerSpec, ready: Barrier, stop: Flag, rec: Record) -> None:
    with raw_connect(spec.url) as conn:
        conn.execute("SELECT 1")
        ready.wait(BARRIER_TIMEOUT)
        fail_at = time.monotonic() + spec.fail_after if spec.fail_after else None
        while not stop.value:
            if fail_at and time.monotonic() > fail_at:
                raise _debug_failure(spec)
            began = time.perf_counter()
            rows = raw_take(conn, spec.batch)  # planned each time: bench.queue.RAW_OPTIONS
            took = time.perf_counter() - began
            now = time.time()
            rec.claims.append((now, took, len(rows)))
            for row in rows:  # the handler's first line
                now = time.time()
                rec.starts.append((now, now - row[3]["t"]))
            if not rows:
                time.sleep(RAW_IDLE_SLEEP)


def _worker_main(spec: WorkerSpec, ready: Barrier, stop: Flag) -> None:
    """Entry point of a worker process: its Record is written to ``spec.out`` whatever
    happens short of the process being killed (run_phase reports a missing file)."""
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
               n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count
        FROM pg_stat_user_tables WHERE relid = '{TABLE[system]}'::regclass
    """
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(query).fetchone()
            assert row is not None
            keys = (
                "total",
                "heap",
                "claim_idx",
                "pkey",
                "live",
                "dead",
                "autovacuums",
                "autoanalyzes",
            )
            out.append({"t": time.time() - t0, **dict(zip(keys, map(float, row), strict=True))})
            if stop.wait(SAMPLE):
                return


def _holder(
    url: str, t0: float, holds: tuple[tuple[float, float], ...], abort: threading.Event
) -> None:
    with psycopg.connect(url) as conn:
        for start, end in holds:
            if abort.wait(max(0.0, t0 + start - time.time())):
                return
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT 1")  # takes the snapshot: the xmin horizon stops here
            abort.wait(max(0.0, t0 + end - time.time()))
            conn.rollback()


class _Thread(threading.Thread):
    """A thread that keeps what it raised (``error``): a sampler or snapshot holder that
    fails must fail its phase, not leave it measured without samples or without its hold."""

    def __init__(self, name: str, target: Any, args: tuple[Any, ...]) -> None:
        super().__init__(name=name, daemon=True)
        self._run_target, self._run_args = target, args
        self.error: str | None = None

    def run(self) -> None:
        try:
            self._run_target(*self._run_args)
        except BaseException as exc:
            self.error = f"{self.name} raised {type(exc).__name__}: {exc}"


def run_phase(ctx: SpawnContext, spec: PhaseSpec) -> PhaseResult:
    """Run one phase; raise PhaseFailed, with every reason found, if a worker or the
    producer died or raised, or the sampler or the snapshot holder failed. A phase is
    stopped as soon as a worker is seen dead (the others are stopped, the producer
    terminated); whatever it leaves in the table is deleted, so the next phase starts
    from an empty queue either way."""
    with tempfile.TemporaryDirectory(prefix="pgenough-steady-") as tmp:
        # A flag in shared memory, not an Event: a worker killed while waiting on an Event's
        # condition would block Event.set() forever (it waits for every sleeper to wake).
        stop: Flag = ctx.RawValue(ctypes.c_bool, False)
        ready = ctx.Barrier(spec.workers + 1)
        outs = [Path(tmp) / f"worker-{n}.pkl" for n in range(spec.workers)]
        procs = [
            ctx.Process(
                target=_worker_main,
                args=(
                    WorkerSpec(
                        spec.system,
                        spec.url,
                        spec.batch,
                        out,
                        spec.fail_after if n == 0 else None,
                        spec.vacuum_interval,
                    ),
                    ready,
                    stop,
                ),
                daemon=True,
            )
            for n, out in enumerate(outs)
        ]
        for p in procs:
            p.start()
        samples: list[dict[str, float]] = []
        stop_sampling = threading.Event()
        threads: list[_Thread] = []
        producer_out = Path(tmp) / "producer.pkl"
        producer: multiprocessing.process.BaseProcess | None = None
        failures: list[str] = []
        ended: set[int] = set()  # workers seen ended before the stop (named with their record)
        t0 = time.time()
        total = 0
        sent = Record()
        try:
            try:
                ready.wait(BARRIER_TIMEOUT)
            except threading.BrokenBarrierError:
                failures.append("the workers did not all start")
                ended.update(_ended(procs, stop))
            if not failures:
                t0 = time.time() + 1.0  # the producer's start, after its own start-up
                producer = ctx.Process(
                    target=_producer_main,
                    args=(spec.system, spec.url, spec.steps, t0, producer_out),
                    daemon=True,
                )
                producer.start()
                print(
                    f"  worker pids: {', '.join(str(p.pid) for p in procs)}; producer pid: "
                    f"{producer.pid}",
                    flush=True,
                )
                threads = [
                    _Thread(
                        "sampler", _sampler, (spec.system, spec.url, t0, stop_sampling, samples)
                    ),
                    _Thread("snapshot holder", _holder, (spec.url, t0, spec.holds, stop_sampling)),
                ]
                for t in threads:
                    t.start()
                deadline = t0 + spec.length + 120
                while producer.is_alive() and not failures and not ended:
                    producer.join(0.5)
                    ended.update(_ended(procs, stop))
                    if time.time() > deadline:
                        failures.append("the producer was still running 120 s past its schedule")
                if not failures and not ended:
                    sent, why = _producer_record(producer, producer_out)
                    failures.extend(why)
                    total = sum(n for _, n in sent.sent)
                # Let the workers catch up (a backlog left by the last step), then stop them.
                deadline = time.time() + DRAIN_GRACE
                while (
                    not failures and not ended and time.time() < deadline and _remaining(spec) > 0
                ):
                    time.sleep(0.5)
                    ended.update(_ended(procs, stop))
        finally:
            stop.value = True
            stop_sampling.set()
            if producer is not None and producer.is_alive():
                producer.terminate()
                producer.join(5)
            for p in procs:
                p.join(60)
                if p.is_alive():
                    p.terminate()
                    p.join(5)
            for t in threads:
                t.join(30)
        records: list[Record] = []
        for n, (p, out) in enumerate(zip(procs, outs, strict=True)):
            who = f"worker {n} (pid {p.pid})"
            try:
                rec = pickle.loads(out.read_bytes())
            except (OSError, pickle.UnpicklingError, EOFError):
                failures.append(f"{who} left no record ({_exit(p.exitcode)})")
                continue
            if rec.error:
                failures.append(f"{who} raised: {_last_line(rec.error)}")
                print(f"  {who} traceback:\n" + _indent(rec.error), flush=True)
            elif n in ended:
                failures.append(f"{who} ended during the phase ({_exit(p.exitcode)})")
            records.append(rec)
        failures.extend(t.error for t in threads if t.error)
        claims = [c for r in records for c in r.claims]
        starts = [s for r in records for s in r.starts]
        if failures or len(starts) < total:
            if not failures:
                print(f"  note: {total - len(starts):,} of {total:,} jobs left undone at the stop")
            # Deleted: the next phase starts from an empty queue.
            with psycopg.connect(spec.url, autocommit=True) as conn:
                conn.execute(f"DELETE FROM {TABLE[spec.system]}")
        if failures:
            raise PhaseFailed("; ".join(dict.fromkeys(failures)))
        return PhaseResult(spec, t0, claims, starts, sent.sent, samples)


def _ended(procs: Sequence[multiprocessing.process.BaseProcess], stop: Flag) -> set[int]:
    """Workers that ended before they were told to stop."""
    if stop.value:
        return set()
    return {n for n, p in enumerate(procs) if p.exitcode is not None}


def _producer_record(
    producer: multiprocessing.process.BaseProcess, out: Path
) -> tuple[Record, list[str]]:
    try:
        rec: Record = pickle.loads(out.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError):
        return Record(), [
            f"the producer (pid {producer.pid}) left no record ({_exit(producer.exitcode)})"
        ]
    if rec.error:
        print("  producer traceback:\n" + _indent(rec.error), flush=True)
        return rec, [f"the producer raised: {_last_line(rec.error)}"]
    return rec, []


def _exit(code: int | None) -> str:
    if code is None:
        return "still running"
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else "?"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())


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
    return percentile(xs, 99)


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
        return ["?"] * 7
    return [
        f"{mib(s[0]['total'])} -> {mib(max(x['total'] for x in s))} -> {mib(s[-1]['total'])}",
        f"{mib(max(x['claim_idx'] for x in s))}",
        f"{mib(max(x['pkey'] for x in s))}",
        f"{max(x['dead'] for x in s):,.0f}",
        f"{s[-1]['dead']:,.0f}",
        f"{s[-1]['autovacuums'] - s[0]['autovacuums']:.0f}",
        f"{s[-1]['autoanalyzes'] - s[0]['autoanalyzes']:.0f}",
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
                fmt_ms(p50(result.claim_latencies(t - SAMPLE, t))),
                mib(s["total"]),
                mib(s["claim_idx"]),
                f"{s['live']:,.0f}",
                f"{s['dead']:,.0f}",
                f"{s['autovacuums']:.0f}",
                f"{s['autoanalyzes']:.0f}",
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
                "autoanalyze",
            ],
            rows,
        )
    )


def render(
    steady: dict[tuple[SteadySystem, str], PhaseResult],
    held: dict[SteadySystem, PhaseResult],
    steady_path: Path | None,
    held_path: Path | None,
) -> list[Path]:
    """The images asked for (``--plot-steady``, ``--plot-held``); nothing without them."""
    steady = steady if steady_path else {}
    held = held if held_path else {}
    if not steady and not held:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        print("note: matplotlib missing (pip install -e '.[bench]'): no images")
        return []
    paths = []
    if steady and steady_path:
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
        steady_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(steady_path, dpi=90)
        plt.close(fig)
        paths.append(steady_path)
    if held and held_path:
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
        held_path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(held_path, dpi=90)
        plt.close(fig)
        paths.append(held_path)
    return paths


# -- autovacuum ----------------------------------------------------------------------------------


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.steady", description=__doc__)
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
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        parser.error(f"--systems: unknown {', '.join(sorted(unknown))} (known: ours, raw)")
    return args


@dataclass
class Run:
    """Everything measured, and every phase that failed (its name: the reason)."""

    capacity: dict[SteadySystem, float] = field(default_factory=dict)
    steady: dict[tuple[SteadySystem, str], PhaseResult] = field(default_factory=dict)
    sustain: dict[SteadySystem, list[SustainTry]] = field(default_factory=dict)
    held: dict[SteadySystem, PhaseResult] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def attempt(self, name: str, measure: Callable[[], T]) -> T | None:
        """``measure()``, or None once its failure is recorded and printed: a failing phase
        never ends the run."""
        try:
            return measure()
        except Exception as exc:
            text = str(exc) if isinstance(exc, PhaseFailed) else f"{type(exc).__name__}: {exc}"
            lines = text.strip().splitlines() or ["?"]
            if len(lines) > 1:
                print(_indent(text), flush=True)
            reason = lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"
            self.failed[name] = reason
            print(f"\nFAILED {name}: {reason} -- carrying on", flush=True)
            return None


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


# -- sustained capacity ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SustainTry:
    """One phase of the sustained-capacity search, over the phase after its first SETTLE s."""

    share: float
    """The producer's rate as a fraction of the burn-down capacity."""
    rate: float
    enqueued: float
    done: float
    final_backlog: int
    """Enqueued minus started at the end of the producer's schedule."""
    e2e_p99: float

    @property
    def backlog_limit(self) -> float:
        return self.enqueued * BOUNDED_BACKLOG_S

    @property
    def keeps_up(self) -> bool:
        return self.done >= KEEP_UP * self.enqueued

    @property
    def bounded(self) -> bool:
        return self.final_backlog <= self.backlog_limit

    @property
    def holds(self) -> bool:
        return self.keeps_up and self.bounded


def sustain_try(r: PhaseResult, share: float) -> SustainTry:
    a, b = SETTLE, r.spec.length
    return SustainTry(
        share=share,
        rate=r.spec.steps[0].rate,
        enqueued=r.sent_rate(a, b),
        done=r.done_rate(a, b),
        final_backlog=r.backlog(b),
        e2e_p99=p99(r.e2e(a, b)),
    )


def sustained(tries: Sequence[SustainTry]) -> tuple[SustainTry | None, str]:
    """The fastest phase that held, and how far that is known: ``exact`` (a phase one step
    faster did not hold), ``at least`` (no faster phase ran), or why there is none."""
    held = [t for t in tries if t.holds]
    if not tries:
        return None, "not measured"
    if not held:
        return None, f"below {min(t.share for t in tries):.1f}x: no phase held"
    best = max(held, key=lambda t: t.share)
    faster = any(not t.holds and t.share > best.share for t in tries)
    return best, "exact" if faster else "at least"


# -- report --------------------------------------------------------------------------------------


def held_figures(r: PhaseResult) -> dict[str, Any]:
    """The held-xmin run's figures (see the module docstring)."""
    steps = {label: ramp_steps(r, label) for label in ("ramp", "held")}
    window = r.spec.holds[0]
    ramp_start = next(s.start for s in r.spec.steps if s.label == "ramp")
    ramp_end = max(s.end for s in r.spec.steps if s.label == "ramp")
    base = r.claim_latencies(SETTLE, 20.0)
    before = r.claim_latencies(ramp_start, ramp_end)
    during = r.claim_latencies(*window)
    after = r.claim_latencies(window[1] + 20.0, r.spec.length)
    backlog_max = max(200.0, 2 * max(r.backlog(t) for t in range(5, 20)))
    claim_max = 2 * p50(base)
    sus = {k: sustainable(v) for k, v in steps.items()}
    return {
        "window": window,
        "claim_p50_base": p50(base),
        "claim_p50_ramp": p50(before),
        "claim_p50_held": p50(during),
        "claim_p50_after": p50(after),
        "sustainable_ramp": sus["ramp"],
        "sustainable_held": sus["held"],
        "sustainable_ratio": sus["held"] / sus["ramp"] if sus["ramp"] else float("nan"),
        "peak_done_ramp": max(x.done for x in steps["ramp"]),
        "peak_done_held": max(x.done for x in steps["held"]),
        "backlog_max": backlog_max,
        "claim_max": claim_max,
        "recovery_ramp": recovery(r, ramp_end, window[0], backlog_max, claim_max),
        "recovery_held": recovery(r, window[1], r.spec.length, backlog_max, claim_max),
        "steps": steps,
    }


def report(run: Run, hold: float) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "capacity": run.capacity,
        "steady": {},
        "sustain": {},
        "held": {},
        "targets": [],
        "failed": run.failed,
    }
    print("\n## Drain capacity (burn-down, same run)")
    rows = [[s, f"{c:,.0f}"] for s, c in run.capacity.items()]
    print(table(["system", "jobs/s"], rows) if rows else "(none measured)")
    if run.steady:
        print(
            f"\n## Steady state (figures over the phase after its first {SETTLE:.0f} s; "
            "done/enqueued also over the whole phase)"
        )
        rows = []
        for (system, label), r in run.steady.items():
            a, b = SETTLE, r.spec.length
            e2e = r.e2e(a, b)
            claims = r.claim_latencies(a, b)
            whole = keep_up_whole(r)
            rows.append(
                [
                    system,
                    label,
                    f"{r.spec.steps[0].rate:,.0f}",
                    f"{r.sent_rate(a, b):,.0f}",
                    f"{r.done_rate(a, b):,.0f}",
                    f"{whole:.3f}x",
                    fmt_ms(p50(e2e)),
                    fmt_ms(p99(e2e)),
                    fmt_ms(p50(claims)),
                    f"{max((r.backlog(t) for t in range(int(b))), default=0):,}",
                    *size_row(r),
                ]
            )
            s = r.samples
            summary["steady"][f"{system} {label}"] = {
                "rate": r.spec.steps[0].rate,
                "enqueued": r.sent_rate(a, b),
                "done": r.done_rate(a, b),
                "done_over_enqueued_whole_phase": whole,
                "e2e_p50": p50(e2e),
                "e2e_p99": p99(e2e),
                "claim_p50": p50(claims),
                "autovacuums": s[-1]["autovacuums"] - s[0]["autovacuums"] if s else None,
                "autoanalyzes": s[-1]["autoanalyzes"] - s[0]["autoanalyzes"] if s else None,
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
                    "done/enq whole",
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
                    "autoanalyzes",
                ],
                rows,
            )
        )
    for system, tries in run.sustain.items():
        best, how = sustained(tries)
        cap = run.capacity[system]
        print(
            f"\n## {system}: sustained capacity (the search's phases, each over its time after "
            f"the first {SETTLE:.0f} s)"
            if tries
            else f"\n## {system}: sustained capacity: no phase ran to its end"
        )
        if tries:
            rows = [
                [
                    f"{t.share:.1f}x",
                    f"{t.rate:,.0f}",
                    f"{t.enqueued:,.0f}",
                    f"{t.done:,.0f}",
                    f"{t.done / t.enqueued if t.enqueued else float('nan'):.3f}x",
                    f"{t.final_backlog:,} / {t.backlog_limit:,.0f}",
                    fmt_ms(t.e2e_p99),
                    "yes" if t.holds else "no",
                ]
                for t in tries
            ]
            print(
                table(
                    [
                        "share",
                        "target/s",
                        "enqueued/s",
                        "done/s",
                        "done/enq",
                        "final backlog / limit",
                        "e2e p99 ms",
                        "holds",
                    ],
                    rows,
                )
            )
        figure = (
            f"{best.rate:,.0f} jobs/s = {best.rate / cap:.2f}x burn-down ({cap:,.0f})"
            + (" or more: no faster phase ran" if how == "at least" else "")
            if best
            else how
        )
        print(f"sustained capacity ({system}): {figure}")
        summary["sustain"][system] = {
            "sustained": best.rate if best else None,
            "ratio": best.rate / cap if best else None,
            "known": how,
            "tries": [{**asdict(t), "holds": t.holds} for t in tries],
        }
    for system, r in run.held.items():
        h = held_figures(r)
        window = h["window"]
        print(f"\n## {system}: held xmin (snapshot {window[0]:.0f}-{window[1]:.0f} s)")
        rows = []
        for a, b in zip(h["steps"]["ramp"], h["steps"]["held"], strict=True):
            rows.append(
                [
                    f"{a.rate:,.0f}",
                    f"{a.sent:,.0f} / {b.sent:,.0f}",
                    f"{a.done:,.0f} / {b.done:,.0f}",
                    f"{a.growth:,} / {b.growth:,}",
                    f"{'yes' if a.holds else 'no'} / {'yes' if b.holds else 'no'}",
                    f"{fmt_ms(a.claim_p50)} / {fmt_ms(b.claim_p50)}",
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
            f"claim p50: base {fmt_ms(h['claim_p50_base'])} ms; ramp without hold "
            f"{fmt_ms(h['claim_p50_ramp'])} ms; during the hold {fmt_ms(h['claim_p50_held'])} ms "
            f"({h['claim_p50_held'] / h['claim_p50_ramp']:.2f}x); from 20 s after release "
            f"{fmt_ms(h['claim_p50_after'])} ms"
        )
        print(
            f"peak done/s over the ramp steps: without hold {h['peak_done_ramp']:,.0f}, during "
            f"the hold {h['peak_done_held']:,.0f} "
            f"({h['peak_done_held'] / h['peak_done_ramp']:.2f}x)"
        )
        print(
            f"sustainable rate: without hold {h['sustainable_ramp']:,.0f} jobs/s, during the "
            f"hold {h['sustainable_held']:,.0f} jobs/s ({h['sustainable_ratio']:.2f}x)"
        )
        fmt = lambda x: "not within the run" if x is None else f"{x:.0f} s"  # noqa: E731
        print(
            f"recovery (backlog <= {h['backlog_max']:,.0f}, 1 s claim p50 <= "
            f"{fmt_ms(h['claim_max'])} ms): after the no-hold ramp {fmt(h['recovery_ramp'])}, "
            f"after the release {fmt(h['recovery_held'])}"
        )
        summary["held"][system] = {
            **{k: v for k, v in h.items() if k != "steps"},
            "steps": {k: [vars(s) for s in v] for k, v in h["steps"].items()},
            "samples": r.samples,
        }
    rows = target_rows(run, hold)
    print("\n## Targets (issue 20)\n")
    print(table(["system", "target", "measured", "verdict"], rows) if rows else "(no system)")
    keys = ("system", "target", "measured", "verdict")
    summary["targets"] = [dict(zip(keys, r, strict=True)) for r in rows]
    return summary


def keep_up_whole(r: PhaseResult) -> float:
    """Jobs started over jobs enqueued, from the producer's start to its schedule's end."""
    sent = r.enqueued_by(r.spec.length)
    return r.started_by(r.spec.length) / sent if sent else float("nan")


def target_rows(run: Run, hold: float) -> list[list[str]]:
    """Issue 20's targets per system, each with its measured figure and met / NOT met; a
    target whose phase (or the system's capacity drain) failed is NOT met, one whose phase
    was left out by an option is marked ``not run``."""
    rows: list[list[str]] = []
    for system in SYSTEMS:
        if not any(k.split()[0] == system for k in (*run.failed, *run.capacity)):
            continue

        def add(
            target: str, phase: str, figure: tuple[str, bool] | None, system: str = system
        ) -> None:
            failed = [
                reason
                for name, reason in run.failed.items()
                if name in (f"{system} capacity", f"{system} setup", "run")
                or name.startswith(f"{system} {phase}")
            ]
            if figure is not None:
                rows.append([system, target, figure[0], verdict(figure[1])])
            elif failed:
                rows.append([system, target, "its phase failed (see FAILED)", "NOT met"])
            else:
                rows.append([system, target, "not run", "-"])

        for label, e2e_max in (("50%", 0.050), ("90%", 0.250)):
            r = run.steady.get((system, label))
            keep = e2e = None
            if r is not None:
                x = keep_up_whole(r)
                done, sent = r.started_by(r.spec.length), r.enqueued_by(r.spec.length)
                keep = f"{x:.3f}x ({done:,} of {sent:,} jobs)", x >= KEEP_UP
                y = p99(r.e2e(SETTLE, r.spec.length))
                e2e = f"{fmt_ms(y)} ms", y <= e2e_max
            phase = f"steady {label}"
            add(f"{label}: done/s >= {KEEP_UP}x enqueued/s, whole phase", phase, keep)
            add(f"{label}: e2e p99 <= {e2e_max * 1000:.0f} ms", phase, e2e)

        tries = run.sustain.get(system, [])
        best, how = sustained(tries)
        sus = None
        if best is not None:
            cap = run.capacity[system]
            x = round(best.rate / cap, 6)  # best.rate is best.share x cap
            more = " or more" if how == "at least" else ""
            sus = f"{x:.2f}x{more} ({best.rate:,.0f} of {cap:,.0f} jobs/s)", x >= SUSTAIN_TARGET
        elif tries and not any(k.startswith(f"{system} sustain") for k in run.failed):
            sus = how, False  # the search ran its phases and none held
        add(f"sustained capacity >= {SUSTAIN_TARGET}x burn-down", "sustain", sus)

        claim = rate = rec = None
        if system in run.held:
            h = held_figures(run.held[system])
            x = h["claim_p50_held"] / h["claim_p50_ramp"]
            held_p50, ramp_p50 = fmt_ms(h["claim_p50_held"]), fmt_ms(h["claim_p50_ramp"])
            claim = f"{x:.2f}x ({held_p50} / {ramp_p50} ms)", x <= 2
            x = h["sustainable_ratio"]
            rate = (
                f"{x:.2f}x ({h['sustainable_held']:,.0f} / {h['sustainable_ramp']:,.0f} jobs/s)",
                x >= 0.8,
            )
            t = h["recovery_held"]
            rec = ("not within the run", False) if t is None else (f"{t:.0f} s", t <= 30)
        held = f"held xmin {hold:.0f} s at {BASE:.0%}"
        add(f"{held}: claim p50 <= 2x its baseline", "held xmin", claim)
        add(f"{held}: sustainable rate >= 0.8x", "held xmin", rate)
        add(f"{held}: recovery <= 30 s", "held xmin", rec)
    return rows


if __name__ == "__main__":
    main()
