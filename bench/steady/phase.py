"""One phase of ``bench.steady``: a producer at a rate schedule, the worker processes of one
system, a sampler of the table and its indexes, and (held xmin) a holder of a snapshot; what
it measured (``PhaseResult``)."""

from __future__ import annotations

import asyncio
import bisect
import ctypes
import json
import multiprocessing
import pickle
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psycopg
from bench.harness.systems.base import BARRIER_TIMEOUT, KIND, OURS_POOL_SIZE, QUEUE
from bench.harness.systems.raw import raw_connect, raw_take
from bench.steady import (
    CLAIM_INDEX,
    DRAIN_GRACE,
    PKEY,
    RAW_IDLE_SLEEP,
    SAMPLE,
    STOP_POLL,
    TABLE,
    TICK,
    Flag,
    SteadySystem,
)

from pgenough.core import Job, NewJob, Worker, WorkerConfig, enqueue_many, open_pool
from pgenough.core.maintenance import DEFAULT_VACUUM_INTERVAL, MaintenanceConfig


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


def _ours_worker(spec: WorkerSpec, ready: Barrier, stop: Flag, rec: Record) -> None:
    try:
        from pgenough.core.worker._executor import Executor
    except ImportError:  # before the worker became a package (issue 34)
        from pgenough.core.worker import _Executor as Executor  # type: ignore[attr-defined,no-redef]

    original = Executor._claim

    async def timed_claim(self: Any, conn: Any, done: Any, limit: int) -> Any:
        began = time.perf_counter()
        jobs = await original(self, conn, done, limit)
        rec.claims.append((time.time(), time.perf_counter() - began, len(jobs)))
        return jobs

    Executor._claim = timed_claim  # type: ignore[method-assign]

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
            # planned each time: bench.harness.systems.raw.RAW_OPTIONS
            rows = raw_take(conn, spec.batch)
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
