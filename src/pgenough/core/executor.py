"""The executor: claims the jobs of one queue and runs their handlers; ``worker.py``'s
``Worker`` is the process host that runs one executor per queue.

Per queue, one loop claims with ``FOR UPDATE SKIP LOCKED`` and, in the same statement,
acknowledges the jobs that finished since the last claim, so a busy worker spends one round
trip and one commit per batch. Handlers run as asyncio tasks, at most ``concurrency`` at
once. One
listener connection per process (``notifier.py``) wakes the loop of the queue a NOTIFY names;
without notifications it polls. Leases are extended by a
heartbeat while handlers run; a worker that dies stops heartbeating and its claims are taken
back by the rescuer (see ``maintenance.py``), which counts the attempt.

Completion modes:

- *batched* (default): a handler that returns normally is acknowledged in the next claim
  statement. Its database effects, if any, are committed before that: at-least-once.
- *transactional*: the handler calls ``complete(conn, job)`` in the transaction holding its
  own writes; both commit together, exactly once. The batched acknowledgement that follows
  finds nothing left to do.
- *batch-transactional*: a ``BatchHandler`` gets the claimed jobs of its kind together
  (up to ``batch_size``) with one pooled connection in one open transaction; the worker
  completes all of them in that transaction (``complete_many``) and commits: exactly once,
  one commit per batch. If the handler raises, the transaction rolls back and the batch is
  bisected, each half in its own transaction, until the raising job fails alone through the
  usual retry path. If a job's claim was lost meanwhile (reclaimed, cancelled), nothing of
  that transaction commits: the handler runs again on the jobs still held.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import random
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias, cast

import psycopg
from psycopg import pq
from psycopg.adapt import Loader
from psycopg.postgres import types as pg_types
from psycopg_pool import AsyncConnectionPool

from pgenough.core import maintenance, metrics, queue
from pgenough.core.errors import LeaseLost, RetryIn, TaskFailed, TaskTimeout
from pgenough.core.failures import Outcome, failure_outcome, task_frames
from pgenough.core.job_states import JobState
from pgenough.core.logcontext import context_with
from pgenough.core.queue import (
    DEFAULT_QUEUE,
    Job,
    PayloadLoader,
    complete_many,
)
from pgenough.core.retry import Backoff, Reconnect

# The worker's logger, as before the executor had a module of its own.
log = logging.getLogger("pgenough.core.worker")
JOBS_LOGGER = "pgenough.jobs"
"""The logger of the line each finished job gets (``_Executor._job_line``): INFO for a job
done (or handed back, or retried as its task asked), WARNING for a failed attempt to retry or
a lost claim, ERROR for a job dead-lettered; a failure's line carries its traceback. Set it
to WARNING to keep only the failures (``PGENOUGH_LOG_JOBS=0``, ``worker run --quiet``)."""
jobs_log = logging.getLogger(JOBS_LOGGER)

Handler: TypeAlias = Callable[[Job], Awaitable[None]]
BatchFn: TypeAlias = Callable[[psycopg.AsyncConnection[Any], Sequence[Job]], Awaitable[None]]

DEFAULT_CONCURRENCY = 10
DEFAULT_BATCH_SIZE = 10
DEFAULT_LEASE = 30.0
DEFAULT_POLL_INTERVAL = 2.0
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
DEFAULT_STATS_INTERVAL = 10.0
DEFAULT_UNHANDLED_GRACE = 3600.0
UNHANDLED_DELAY = (1.0, 60.0)
"""The shortest and longest wait before a job of a kind this worker does not handle is
offered again (a tenth of its age in between: soon after a deploy, rarely later)."""
UNHANDLED_LOG_INTERVAL = 60.0
"""Seconds between two warnings about the same unhandled kind from one executor."""
INTERRUPTED = "interrupted: the worker shut down before the handler finished"
CLAIM_BACKOFF = Backoff(base=0.2, cap=10.0)
"""Retries of a claim loop whose connection failed."""
RESCAN_INTERVAL = 0.5
"""Seconds a claim loop may claim past its last claimed position before it scans the claim
index from the start again (see ``_Executor._claim``)."""
MAX_STUCK_BEATS = 3
"""Heartbeats of one executor that may wait at once on connections that do not answer (see
``_Executor._heartbeat``)."""


@dataclass(frozen=True)
class WorkerConfig:
    queue: str = DEFAULT_QUEUE
    concurrency: int = DEFAULT_CONCURRENCY
    """Jobs whose handlers run at once (a batch counts each of its jobs)."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Most jobs taken by one claim."""
    lease: float = DEFAULT_LEASE
    """Seconds a claim stays ours without a heartbeat; heartbeats come every lease / 3."""
    poll_interval: float = DEFAULT_POLL_INTERVAL
    """Longest idle wait between claims when no notification arrives."""
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    """On stop, how long running handlers may take to finish before they are interrupted."""
    stats_interval: float = DEFAULT_STATS_INTERVAL
    backoff: Backoff = field(default_factory=Backoff)
    maintenance: maintenance.MaintenanceConfig | None = field(
        default_factory=maintenance.MaintenanceConfig
    )
    """Rescuer and cleaner duties (once per interval across workers); None disables them."""
    unhandled_grace: float = DEFAULT_UNHANDLED_GRACE
    """Seconds after its enqueue that a job whose kind no handler of this worker knows is
    still handed back for another worker (its attempt not counted); past them it is
    dead-lettered (docs/guides/tasks.md, "Jobs no task handles")."""

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.batch_size < 1:
            raise ValueError("concurrency and batch_size must be >= 1")
        if min(self.lease, self.poll_interval, self.stats_interval) <= 0:
            raise ValueError("lease, poll_interval and stats_interval must be positive")
        if self.shutdown_timeout < 0 or self.unhandled_grace < 0:
            raise ValueError("shutdown_timeout and unhandled_grace must be >= 0")


@dataclass(frozen=True)
class BatchHandler:
    """A handler of many jobs at once, in one transaction: batch-transactional completion.

    ``fn(conn, jobs)`` runs in a transaction open on ``conn`` (a pooled connection); when it
    returns, the worker completes every one of ``jobs`` in that same transaction and
    commits, so their effects and their completions commit together, exactly once. Its
    effects should be database writes on ``conn``: when a batch is retried (a job raised
    and the batch is bisected, or a claim was lost and the rest runs again) the rolled-back
    writes vanish, but a mail sent or an HTTP call made happens again.

    ``check(job)``, when given, runs on each job before its batch does: raising there fails
    that job alone (``GiveUp`` dead-letters it), and the batch runs without it. ``backoff``
    is the retry policy of a job that fails alone (None: the queue's).
    """

    fn: BatchFn
    backoff: Backoff | None = None
    check: Callable[[Job], object] | None = None


@dataclass(frozen=True)
class ThreadHandler:
    """A blocking handler: ``fn(job)`` runs in a thread of its queue's own pool, which has
    ``concurrency`` threads, so a blocking call (an ORM, an HTTP client) stalls no other job
    and every job the claim admits starts at once.

    Python cannot interrupt a thread, and a job is never run twice at the same time: so the
    job of a running ``fn`` stays claimed, its lease renewed by the heartbeat, until ``fn``
    returns, whatever happens meanwhile. Past ``timeout`` seconds (counted from the moment
    ``fn`` starts) the worker logs it, and when ``fn`` returns the attempt fails with
    ``TaskTimeout`` and is retried like any failure. On shutdown the worker waits for it
    past ``shutdown_timeout``; if the process is killed instead, the lease expiry hands the
    job on. ``backoff`` is its retry policy (None: the queue's).
    """

    fn: Callable[[Job], object]
    timeout: float | None = None
    backoff: Backoff | None = None


AnyHandler: TypeAlias = Handler | BatchHandler | ThreadHandler


@dataclass
class WorkerStats:
    """What a worker did, counted per job or attempt (``Worker.stats`` sums its queues)."""

    claimed: int = 0
    completed: int = 0
    """Jobs whose handler returned (a batch's, once its transaction committed)."""
    failed: int = 0
    """Attempts that raised and were recorded as failed (retried, dead-lettered, or found
    lost when recorded), a task that failed under its own handler's record included
    (``TaskFailed``: a Django task's FAILED result)."""
    lost: int = 0
    """Claims lost before the job could be completed or its failure recorded: reclaimed
    after the lease expired, or cancelled by an operator."""
    retried: int = 0
    """Failed attempts whose job is to run again (after its backoff, or as ``RetryIn``
    asked)."""
    dead: int = 0
    """Jobs this worker dead-lettered: attempts spent, ``GiveUp``, ``TaskFailed``, or a kind
    no task handles past the grace."""
    handed_back: int = 0
    """Jobs of a kind no task of this worker handles, handed back for another worker (no
    attempt counted)."""

    def summary(self) -> str:
        """These counts in words: the worker commands' final line."""
        return (
            f"{self.completed} job(s) completed, {self.failed} failed attempt(s)"
            f" ({self.retried} to retry), {self.dead} dead-lettered, {self.lost} lost"
            f" claim(s), {self.handed_back} handed back (no task here for their kind)"
        )


class _Executor:
    """Claims and runs the jobs of one queue: its claim loop, its heartbeat, its handlers."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        handlers: Mapping[str, AnyHandler],
        config: WorkerConfig,
        *,
        name: str,
        rng: random.Random,
    ) -> None:
        self.pool = pool
        self.handlers = handlers
        self.config = config
        self.name = name
        self.stats = WorkerStats()
        self._metrics = metrics.QueueMetrics(config.queue)
        self._unreported = 0
        """Completions counted in ``stats`` but not yet in the Prometheus counter: they are
        added once per claim (``_report``), not once per job."""
        self._rng = rng
        self._inflight: dict[int, tuple[Job, asyncio.Task[None]]] = {}
        self._finishing = 0
        """In-flight jobs of batches whose handler has returned and whose completion is
        committing: they no longer count against concurrency (as a batched ack in ``_done``
        does not), so the next claim overlaps that commit. (Should the commit fail, the batch
        runs again in halves while the next claim's jobs run: briefly past concurrency.)"""
        self._done: list[Job] = []
        self._after: tuple[int, datetime, int] | None = None
        """(priority, run_at, id) of the last job claimed, where the next claim starts."""
        self._rescan_at = 0.0
        """When (``time.monotonic()``) the next claim must scan from the start."""
        self._rescan_pending = False
        """The last claim came back short past the position without scanning from the
        start: a job may wait behind the position until that scan."""
        self.wake = asyncio.Event()
        self._may_be_ready = False
        """A ready job may be waiting: the last claim came back full, or a notification named
        the queue since it ran (``notified``)."""
        self._poll_at = 0.0
        """When (``time.monotonic()``) to look again at a queue the last claim found drained
        (``poll_interval`` after it): jobs that come due without a notification."""
        self._stopping = asyncio.Event()
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        """This queue's threads for ``ThreadHandler`` jobs, started on the first one."""
        self._unhandled_logged: dict[str, tuple[float, int]] = {}
        """Per unhandled kind: when it was last warned about, and jobs met since."""
        self._in_threads: dict[int, float] = {}
        """Jobs whose function is running in a thread now, with when (monotonic) it began:
        they are never cancelled or handed back (see ``ThreadHandler``)."""

    def stop(self) -> None:
        self._stopping.set()
        self.wake.set()

    def notified(self) -> None:
        """A notification named this queue (or the listener reconnected): a job may be ready."""
        self._may_be_ready = True
        self.wake.set()

    def interrupt(self) -> None:
        """Cancel the running async handlers (a plain function's thread runs on)."""
        for job_id, (_, task) in list(self._inflight.items()):
            if job_id not in self._in_threads:
                task.cancel()
        if self._in_threads:
            log.warning(
                "%s: %d plain function(s) still running cannot be interrupted (jobs %s);"
                " their jobs stay claimed until they return: kill the process to abandon"
                " them, and their leases expire",
                self.name,
                len(self._in_threads),
                ", ".join(map(str, list(self._in_threads)[:10])),
            )

    async def run(self, until_idle: bool) -> None:
        heartbeat = asyncio.create_task(self._heartbeat(), name=f"{self.name}:heartbeat")
        try:
            await self._claim_loop(until_idle)
        finally:
            try:
                await self._shutdown()
            finally:
                self._report()
                heartbeat.cancel()
                await asyncio.gather(heartbeat, return_exceptions=True)
                if self._threads is not None:
                    self._threads.shutdown(wait=False)  # idle: every function has returned

    def _report(self) -> None:
        if self._unreported:
            self._metrics.completed.inc(self._unreported)
            self._unreported = 0

    # -- claiming ---------------------------------------------------------------------------

    async def _claim_loop(self, until_idle: bool) -> None:
        conn: psycopg.AsyncConnection[Any] | None = None
        restore: type[Loader] | None = None
        reconnect = Reconnect(f"{self.name}: claim", CLAIM_BACKOFF, logger=log, rng=self._rng)
        refill_at = max(1, min(self.config.batch_size, self.config.concurrency) // 2)
        try:
            while not self._stopping.is_set():
                self._report()
                free = self.config.concurrency - len(self._inflight) + self._finishing
                if free < 1:
                    await self._wait(None)  # until a handler finishes
                    continue
                if free < refill_at and self._inflight and not self._worth_a_partial_claim():
                    # A free slot never idles while a job may be ready (the last claim came
                    # back full, a notification came, the poll is due). Otherwise refill in
                    # batches: on a drained queue a claim per finished handler would cost a
                    # round trip and a commit per job, and find nothing.
                    await self._wait(max(0.0, self._next_look() - time.monotonic()))
                    continue
                limit = min(self.config.batch_size, free)
                done, self._done = self._done, []
                try:
                    if conn is None or conn.closed:
                        conn, restore = await self._hold()
                    jobs = await self._claim(conn, done, limit)
                    reconnect.succeeded()
                except psycopg.OperationalError as exc:
                    self._done = done + self._done
                    delay = reconnect.failed(exc)
                    if conn is not None:
                        await self._unhold(conn, restore)
                        conn = None
                    await self._wait(delay)
                    continue
                self._dispatch(jobs)
                if len(jobs) < limit:
                    idle = not jobs and not self._inflight and not self._done
                    if until_idle and idle:
                        if not self._rescan_pending:
                            return
                        # Nothing past the position and nothing in flight: look from the
                        # start now rather than at the next RESCAN_INTERVAL, or every drain
                        # would end up to that much later than its last job.
                        self._rescan_at = 0.0
                        continue
                    # Drained for now: sleep until a notification, a finished handler
                    # (whose acknowledgement should not linger) or the poll interval; short
                    # past the position, no later than the scan from the start.
                    await self._wait(max(0.0, self._next_look() - time.monotonic()))
                else:
                    await asyncio.sleep(0)  # let just-started handlers run before reclaiming
        finally:
            if conn is not None:
                await self._flush_acks(conn)
                await self._unhold(conn, restore)

    async def _hold(self) -> tuple[psycopg.AsyncConnection[Any], type[Loader] | None]:
        """The connection the claim loop keeps, set up for claiming: (it, its jsonb loader
        to restore when it goes back to the pool).

        Its claims are prepared (the claim is this loop's statement, run thousands of times a
        second: parsing it each time costs backend CPU on every job, measured by
        ``python -m bench.claim_plans`` in docs/benchmarks/history.md, "Claim plans") and
        planned at each execution all the same (``plan_cache_mode``, this session only, for
        as long as the loop holds it): never on a generic plan cached while the table was
        empty (see ``_sql.PLAN_EACH_TIME``). And never with a Sort (``enable_sort``, likewise):
        a vacuum that finds the table between two bursts records a few live rows in a table
        and a claim index of thousands of pages, and with those statistics the planner
        prices the index at dozens of pages a row and picks a Seq Scan and a Sort of the
        whole table, at every execution, until the next ANALYZE; without a Sort, the claim
        index's order is the only way to its first rows.
        On a connection that does not prepare (``open_pool(prepared_statements=False)``,
        behind a transaction pooler) the session is left alone and the claim sets
        ``enable_sort`` for its own transaction instead (``_claim``). Payloads decode with
        ``PayloadLoader`` (on a cursor per claim, registering would copy psycopg's loader map
        each round trip).
        """
        conn = await self.pool.getconn()
        try:
            if conn.prepare_threshold is not None:  # else the claim sets it per transaction
                await queue.hold_for_claims(conn)
        except BaseException:
            await self.pool.putconn(conn)
            raise
        return conn, _set_jsonb_loader(conn, PayloadLoader)

    async def _unhold(
        self, conn: psycopg.AsyncConnection[Any], restore: type[Loader] | None
    ) -> None:
        """Give the claim loop's connection back to the pool as it was."""
        _set_jsonb_loader(conn, restore)
        if not conn.closed and conn.prepare_threshold is not None:
            # A broken connection fails here too; the pool discards it.
            with contextlib.suppress(psycopg.Error):
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    await conn.rollback()  # else the pool would, and keep the settings
                await queue.unhold_for_claims(conn)
        await self.pool.putconn(conn)

    async def _claim(
        self, conn: psycopg.AsyncConnection[Any], done: list[Job], limit: int
    ) -> list[Job]:
        """Acknowledge ``done`` and claim up to ``limit`` jobs.

        Every claimed job leaves a dead entry in the claim index, which vacuum and index
        hinting remove only once no snapshot can see the row: while one is held open (a long
        transaction anywhere in the database) a scan from the start of the index walks every
        job claimed since, and each claim gets slower. So a claim starts past the last
        claimed position (``claim_after``, within its priority), and one every
        ``RESCAN_INTERVAL`` scans from the start (``claim``): a job behind the position (a
        higher or lower priority, an earlier ``run_at``, a retry or a rescued claim come
        due, a row skipped while locked) waits at most that long, and a scan that walks the
        dead prefix runs at most that often.
        """
        now = time.monotonic()
        full = self._after is None or not limit or now >= self._rescan_at
        if full and limit:
            self._rescan_at = now + RESCAN_INTERVAL
        if limit:
            # Cleared before the round trip, not after: a notification that arrives during
            # it must still count.
            self._may_be_ready = False
        jobs = await queue.claim(
            conn,
            queue=self.config.queue,
            worker=self.name,
            lease=self.config.lease,
            limit=limit,
            done=done,
            after=None if full else self._after,
        )
        self._rescan_pending = not full and len(jobs) < limit
        if limit and len(jobs) == limit:
            self._may_be_ready = True
        elif limit:
            self._poll_at = now + self.config.poll_interval
        jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        if jobs:
            last = jobs[-1]
            self._after = (last.priority, last.run_at, last.id)
            self._metrics.claimed.inc(len(jobs))
            self.stats.claimed += len(jobs)
        return jobs

    def _next_look(self) -> float:
        """When a queue found drained is looked at again without a notification: the poll,
        or sooner the scan from the start a short claim past the position asks for."""
        if self._rescan_pending:
            return min(self._poll_at, self._rescan_at)
        return self._poll_at

    def _worth_a_partial_claim(self) -> bool:
        return self._may_be_ready or time.monotonic() >= self._next_look()

    async def _flush_acks(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Acknowledge what finished without claiming more (on the way out)."""
        if not self._done:
            return
        done, self._done = self._done, []
        try:
            await self._claim(conn, done, 0)
        except psycopg.OperationalError as exc:
            # Their claims stay 'running' until the rescuer retries them: at-least-once.
            log.error("%s: could not acknowledge %d finished job(s): %s", self.name, len(done), exc)

    async def _wait(self, timeout: float | None) -> None:
        # A timer that sets the event, not wait_for: that would start a task per wait, which
        # at batch 1 (and after each notification) is a wait per job.
        timer = None
        if timeout is not None and not self.wake.is_set():
            timer = asyncio.get_running_loop().call_later(timeout, self.wake.set)
        try:
            await self.wake.wait()
        finally:
            if timer is not None:
                timer.cancel()
        self.wake.clear()

    # -- running handlers -------------------------------------------------------------------

    def _dispatch(self, jobs: list[Job]) -> None:
        """One task per job, or per kind for the jobs of a batch handler."""
        batches: dict[str, list[Job]] = {}
        for job in jobs:
            if isinstance(self.handlers.get(job.kind), BatchHandler):
                batches.setdefault(job.kind, []).append(job)
            else:
                self._start(job)
        for kind, batch in batches.items():
            self._start_batch(kind, batch)

    def _start(self, job: Job) -> None:
        # Every line logged while the job runs (by the handler too) carries its id and queue.
        context = context_with(job_id=job.id, queue=self.config.queue)
        task = _start_task(self._run(job), f"{self.name}:job-{job.id}", context)
        if not task.done():  # started eagerly, it may have finished (and been forgotten)
            self._inflight[job.id] = (job, task)

    async def _run(self, job: Job) -> None:
        started = time.perf_counter()
        handler = self.handlers.get(job.kind)
        if handler is None:
            try:
                await self._unhandled(job, started)
            finally:
                self._forget(job)
            return
        try:
            assert not isinstance(handler, BatchHandler)  # _dispatch runs those in batches
            if isinstance(handler, ThreadHandler):
                await self._run_in_thread(handler, job)
            else:
                await handler(job)
        except asyncio.CancelledError:
            self._job_line(logging.WARNING, job, "interrupted", started, note="shutting down")
            raise
        except Exception as exc:
            # A handler may carry its own retry policy (a task does).
            await self._failed(job, exc, getattr(handler, "backoff", None), started)
        else:
            self.stats.completed += 1
            self._unreported += 1
            self._done.append(job)
            # The one line per job on the hot path: nothing is built unless it is logged.
            if jobs_log.isEnabledFor(logging.INFO):
                jobs_log.info(
                    "%s: job %d done (%s, %.3fs)",
                    self.name,
                    job.id,
                    job.kind,
                    time.perf_counter() - started,
                )
        finally:
            self._metrics.duration.observe(time.perf_counter() - started)
            self._forget(job)

    async def _run_in_thread(self, handler: ThreadHandler, job: Job) -> None:
        """``handler.fn(job)`` in this queue's threads. Returns or raises once the function
        has returned, even when cancelled meanwhile, unless it had not started yet (see
        ``ThreadHandler``): its job must not be handed back, nor failed, while it runs."""
        loop = asyncio.get_running_loop()
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.config.concurrency, thread_name_prefix=f"{self.name}-thread"
            )
        started: asyncio.Future[float] = loop.create_future()
        context = contextvars.copy_context()  # the job's log context, as asyncio.to_thread

        def call() -> object:
            loop.call_soon_threadsafe(_resolve, started, time.monotonic())
            return context.run(handler.fn, job)

        future = self._threads.submit(call)
        watch = asyncio.ensure_future(
            self._watch_thread(handler, job, started, asyncio.wrap_future(future, loop=loop))
        )
        current = asyncio.current_task()
        while True:
            try:
                # Shielded: cancelling this task must not cancel the wait for the thread.
                await asyncio.shield(watch)
                return
            except asyncio.CancelledError:
                if watch.cancelled() or future.cancel():  # the loop is closing, or it never ran
                    watch.cancel()
                    raise
                if current is not None:
                    current.uncancel()  # it runs: finish as if no one had asked

    async def _watch_thread(
        self,
        handler: ThreadHandler,
        job: Job,
        started: asyncio.Future[float],
        outcome: asyncio.Future[object],
    ) -> None:
        """Wait for a job's thread, from its start, and time it against ``handler.timeout``."""
        began = await started
        self._in_threads[job.id] = began
        try:
            if handler.timeout is None:
                await outcome
                return
            left = handler.timeout - (time.monotonic() - began)
            done, _ = await asyncio.wait({outcome}, timeout=max(0.0, left))
            if done:
                outcome.result()
                return
            log.warning(
                "%s: job %d (%s) has run past its timeout of %gs; Python cannot interrupt a"
                " thread: the job stays claimed until the function returns, then fails with"
                " TaskTimeout",
                self.name,
                job.id,
                job.kind,
                handler.timeout,
            )
            try:
                await outcome
            except Exception as exc:
                raise self._overdue(handler, job, began) from exc
            raise self._overdue(handler, job, began)
        finally:
            del self._in_threads[job.id]

    @staticmethod
    def _overdue(handler: ThreadHandler, job: Job, began: float) -> TaskTimeout:
        return TaskTimeout(
            f"task {job.kind!r} ran past its timeout of {handler.timeout:g}s (its thread ran"
            f" {time.monotonic() - began:.1f}s: Python cannot interrupt a thread)"
        )

    def _forget(self, job: Job) -> None:
        """Take a finished job out of flight (unless its id is in flight for a newer claim)."""
        entry = self._inflight.get(job.id)
        if entry is not None and entry[0] is job:
            del self._inflight[job.id]
        self.wake.set()

    async def _failed(
        self, job: Job, exc: Exception, backoff: Backoff | None, started: float
    ) -> None:
        """A job's attempt raised: retry it, dead-letter it, or note that it is lost; and
        say so in its line, with the traceback."""
        if isinstance(exc, TaskTimeout):
            self._metrics.timed_out.inc()
        if isinstance(exc, LeaseLost):
            # Nothing to record: the job is no longer this attempt's.
            self.stats.lost += 1
            self._job_line(logging.WARNING, job, "lost its claim before completing", started)
            return
        outcome = failure_outcome(exc, job, backoff or self.config.backoff, self._rng)
        recorded, state = await self._record(job, outcome, exc, started)
        if not recorded:
            return
        # A database connection that failed under the handler (a reset, a cut link, a
        # restart) is the network's doing: one line says it, as for a periodic task; the
        # traceback is still kept with the attempt (jobs.errors).
        network = isinstance(exc, psycopg.OperationalError)
        traced = exc if outcome.traceback is not None and not network else None
        if state is None and isinstance(exc, TaskFailed):
            state = JobState.DEAD  # its handler recorded it (fail()), in its own transaction
        if state is None:
            self.stats.lost += 1
            self._job_line(
                logging.WARNING,
                job,
                "lost its claim before its failure was recorded",
                started,
                error=outcome.error,
                exc=traced,
            )
        elif state == JobState.DEAD:
            self._metrics.dead.inc()
            self.stats.dead += 1
            what = "failed, dead-lettered"
            self._job_line(logging.ERROR, job, what, started, error=outcome.error, exc=traced)
        else:
            self._metrics.retried.inc()
            self.stats.retried += 1
            if isinstance(exc, RetryIn):
                what, level = f"retry in {outcome.delay:g}s, as asked", logging.INFO
            else:
                what, level = f"failed, retry in {outcome.delay:.1f}s", logging.WARNING
            self._job_line(level, job, what, started, error=outcome.error, exc=traced)

    async def _record(
        self, job: Job, outcome: Outcome, exc: Exception, started: float
    ) -> tuple[bool, str | None]:
        """Record a failed attempt: (True, the job's new state or None when the claim was
        lost), or (False, None) when the database refused (then said in the job's line)."""
        self._metrics.failed.inc()
        self.stats.failed += 1
        try:
            async with self.pool.connection() as conn:
                state = await queue.record_failure(
                    conn,
                    job,
                    outcome.error,
                    outcome.delay,
                    give_up=outcome.give_up,
                    traceback=outcome.traceback,
                )
            return True, state
        except psycopg.Error as db_exc:
            # The claim stays 'running'; the rescuer takes it back when its lease expires.
            self._job_line(
                logging.ERROR,
                job,
                "failed, and its failure could not be recorded",
                started,
                error=f"{outcome.error} (recording it: {db_exc}; its lease expires and the"
                " rescuer hands it out again)",
                exc=exc if outcome.traceback is not None else None,
            )
            return False, None

    def _job_line(
        self,
        level: int,
        job: Job,
        outcome: str,
        started: float,
        *,
        error: str | None = None,
        exc: BaseException | None = None,
        note: str | None = None,
    ) -> None:
        """The line of a finished job, on ``JOBS_LOGGER``: ``<worker>: job <id> <outcome>
        (<task>, <seconds>s, attempt <n> of <max>): <error>``, with the traceback of a
        failure (once per failed attempt). A done job's line is written inline in ``_run``
        (the hot path)."""
        if not jobs_log.isEnabledFor(level):
            return
        jobs_log.log(
            level,
            "%s: job %d %s (%s, %.3fs, attempt %d of %d)%s",
            self.name,
            job.id,
            outcome,
            job.kind,
            time.perf_counter() - started,
            job.attempts,
            job.max_attempts,
            f": {error}" if error else f": {note}" if note else "",
            exc_info=None if exc is None else (type(exc), exc, task_frames(exc)),
        )

    async def _unhandled(self, job: Job, started: float) -> None:
        """A job of a kind no handler here knows: offered again later without spending an
        attempt (a newer worker may know it: a rolling deploy), dead-lettered once it was
        enqueued ``unhandled_grace`` seconds ago (a typo, a removed task)."""
        age = max(0.0, (datetime.now(job.created_at.tzinfo) - job.created_at).total_seconds())
        low, high = UNHANDLED_DELAY
        delay = min(high, max(low, age / 10))
        known = ", ".join(sorted(self.handlers)) or "none"
        error = (
            f"no task named {job.kind!r} on worker {self.name} (its tasks: {known}); handed"
            f" back, dead-lettered {self.config.unhandled_grace:g}s after its enqueue"
        )
        try:
            async with self.pool.connection() as conn:
                state = await queue.defer_unhandled(
                    conn, job, error, delay=delay, grace=self.config.unhandled_grace
                )
        except psycopg.Error as exc:
            log.error("%s: could not hand back job %d: %s", self.name, job.id, exc)
            return  # its lease expires and the rescuer hands it out again
        if state == JobState.DEAD:
            self._metrics.dead.inc()
            self.stats.dead += 1
            log.error(
                "%s: job %d is dead: no task named %r has claimed it %gs after its enqueue"
                " (this worker's tasks: %s); deploy the task, then `pgenough retry %d`",
                self.name,
                job.id,
                job.kind,
                self.config.unhandled_grace,
                known,
                job.id,
            )
            return
        if state is None:
            self.stats.lost += 1
            what = "lost its claim before it was handed back"
            self._job_line(logging.WARNING, job, what, started)
            return
        self.stats.handed_back += 1
        self._job_line(
            logging.INFO,
            job,
            f"handed back, offered again in {delay:.0f}s",
            started,
            note="no task of this worker handles its kind (its attempt is not counted)",
        )
        now = time.monotonic()
        last, met = self._unhandled_logged.get(job.kind, (-UNHANDLED_LOG_INTERVAL, 0))
        if now - last < UNHANDLED_LOG_INTERVAL:
            self._unhandled_logged[job.kind] = (last, met + 1)
            return
        self._unhandled_logged[job.kind] = (now, 0)
        log.warning(
            "%s: job %d has kind %r, which no task of this worker handles (its tasks: %s):"
            " handed back for another worker, its attempt not counted (%d more such job(s)"
            " since the last warning); it is dead-lettered if still unhandled %gs after its"
            " enqueue",
            self.name,
            job.id,
            job.kind,
            known,
            met,
            self.config.unhandled_grace,
        )

    # -- batch handlers: one transaction per batch --------------------------------------------

    def _start_batch(self, kind: str, jobs: list[Job]) -> None:
        handler = self.handlers[kind]
        assert isinstance(handler, BatchHandler)
        context = context_with(queue=self.config.queue, kind=kind, batch=len(jobs))
        task = asyncio.create_task(
            self._run_batch(handler, jobs),
            name=f"{self.name}:batch-{jobs[0].id}+{len(jobs) - 1}",
            context=context,
        )
        # Each job is in flight on its own (heartbeats, concurrency, shutdown), on one task.
        for job in jobs:
            self._inflight[job.id] = (job, task)

    async def _run_batch(self, handler: BatchHandler, jobs: list[Job]) -> None:
        started = time.perf_counter()
        try:
            runnable = jobs
            if handler.check is not None:
                runnable = []
                for job in jobs:
                    try:
                        handler.check(job)
                    except Exception as exc:
                        await self._failed(job, exc, handler.backoff, started)
                        self._forget(job)
                    else:
                        runnable.append(job)
            await self._run_group(handler, runnable)
        except asyncio.CancelledError:
            interrupted = [job for job in jobs if self._inflight.get(job.id, (None,))[0] is job]
            if interrupted and jobs_log.isEnabledFor(logging.WARNING):
                jobs_log.warning(
                    "%s: %s interrupted (%s, batch of %d, %.3fs): shutting down",
                    self.name,
                    _job_ids(interrupted),
                    jobs[0].kind,
                    len(interrupted),
                    time.perf_counter() - started,
                )
            raise
        finally:
            self._metrics.duration.observe(time.perf_counter() - started)
            for job in jobs:  # the ones still here were interrupted
                self._forget(job)

    async def _run_group(self, handler: BatchHandler, jobs: list[Job]) -> None:
        """Run ``jobs`` in one transaction; on a raise, bisect until the raising job fails
        alone; on a lost claim, run again on the jobs still held."""
        while jobs:
            started = time.perf_counter()
            try:
                held = await self._transact(handler, jobs)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if len(jobs) == 1:
                    await self._failed(jobs[0], exc, handler.backoff, started)
                    self._forget(jobs[0])
                    return
                log.info(
                    "%s: a batch of %d %s job(s) raised %r; running it in halves",
                    self.name,
                    len(jobs),
                    jobs[0].kind,
                    exc,
                )
                bisect = True
            else:
                bisect = False
            if bisect:
                # Out of the except clause: a half's own error would otherwise carry the
                # whole batch's as its context, and its traceback both.
                half = len(jobs) // 2
                await self._run_group(handler, jobs[:half])
                await self._run_group(handler, jobs[half:])
                return
            lost = [j for j in jobs if j.id not in held]
            if not lost:
                self._metrics.completed.inc(len(jobs))
                self.stats.completed += len(jobs)
                # One line per call, naming its jobs: a batch task exists to run many jobs
                # at the cost of one, and a line per job would bring a per-job cost back.
                if jobs_log.isEnabledFor(logging.INFO):
                    jobs_log.info(
                        "%s: %s done (%s, batch of %d, %.3fs)",
                        self.name,
                        _job_ids(jobs),
                        jobs[0].kind,
                        len(jobs),
                        time.perf_counter() - started,
                    )
                for job in jobs:
                    self._forget(job)
                return
            self.stats.lost += len(lost)
            log.warning(
                "%s: %d job(s) of a batch lost their claims before completing (%s);"
                " rolled back, running the other %d again",
                self.name,
                len(lost),
                ", ".join(str(j.id) for j in lost[:10]),
                len(jobs) - len(lost),
            )
            for job in lost:
                self._forget(job)
            jobs = [j for j in jobs if j.id in held]

    async def _transact(self, handler: BatchHandler, jobs: list[Job]) -> set[int]:
        """``handler.fn`` and the completion of ``jobs`` in one transaction; the ids that were
        still ours. It committed only if that is all of them."""
        held: set[int] = set()
        finishing = 0
        try:
            async with self.pool.connection() as conn, conn.transaction() as tx:
                await handler.fn(conn, jobs)
                finishing = len(jobs)
                self._finishing += finishing
                self.wake.set()
                held = await complete_many(conn, jobs)
                if len(held) < len(jobs):
                    # A lost job's effect is its new owner's to commit (or, cancelled, no
                    # one's); the others' may depend on it, so none of this one commits.
                    raise psycopg.Rollback(tx)
        finally:
            self._finishing -= finishing
        return held

    async def _heartbeat(self) -> None:
        """Every lease / 3, extend the leases of the jobs in flight.

        A beat that has no answer by the next one's time is left to fail on its own and
        the next one starts at once, on another connection: its connection may be dead
        without a word (a link stall on that flow, a NAT or firewall that forgot it), which
        TCP notices only at the network timeout (``db.with_network_timeout``), and that may
        be as long as what the lease has left after a heartbeat interval (with the
        defaults, 20 s against 30 - 10 s): waiting for it, a healthy worker would lose the
        claims of every job it runs. At most ``MAX_STUCK_BEATS`` wait at once (the whole
        link is down: more would only queue up behind them).
        """
        interval = self.config.lease / 3
        stuck: set[asyncio.Task[None]] = set()
        try:
            while True:
                await asyncio.sleep(interval)
                while self._inflight:
                    beat = asyncio.create_task(self._beat(), name=f"{self.name}:heartbeat-beat")
                    done, _ = await asyncio.wait({beat}, timeout=interval)
                    if done:
                        beat.result()
                        break
                    stuck.add(beat)
                    beat.add_done_callback(self._stuck_beat_ended(stuck))
                    log.warning(
                        "%s: heartbeat has no answer after %.1fs; extending the leases on"
                        " another connection (%d heartbeat(s) waiting on theirs)",
                        self.name,
                        interval,
                        len(stuck),
                    )
                    if len(stuck) >= MAX_STUCK_BEATS:
                        await asyncio.wait(stuck, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for beat in stuck:
                beat.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)

    def _stuck_beat_ended(
        self, stuck: set[asyncio.Task[None]]
    ) -> Callable[[asyncio.Task[None]], None]:
        def ended(beat: asyncio.Task[None]) -> None:
            stuck.discard(beat)
            if not beat.cancelled() and (exc := beat.exception()) is not None:
                log.error("%s: heartbeat failed: %r", self.name, exc)

        return ended

    async def _beat(self) -> None:
        """Extend the leases of the jobs in flight (running, or a thread not yet returned)."""
        ids = list(self._inflight)
        try:
            async with self.pool.connection() as conn:
                extended = await queue.extend_leases(
                    conn, ids, worker=self.name, lease=self.config.lease
                )
        except psycopg.OperationalError as exc:
            log.warning("%s: heartbeat failed: %s", self.name, exc)
            return
        missing = [i for i in ids if i not in extended and i in self._inflight]
        if missing:
            log.debug(
                "%s: heartbeat skipped %d job(s) (finishing or lost): %s",
                self.name,
                len(missing),
                missing[:10],
            )

    # -- shutdown ---------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Let running handlers finish; past ``shutdown_timeout`` cancel the async ones and,
        once their coroutines have ended, give their claims back. A plain function's thread
        cannot be cancelled: its job stays claimed, heartbeats going on, until it returns."""
        if not self._inflight:
            return
        tasks = {task for _, task in self._inflight.values()}  # a batch's jobs share one
        _, pending = await asyncio.wait(tasks, timeout=self.config.shutdown_timeout)
        threads = {task for i, (_, task) in self._inflight.items() if i in self._in_threads}
        stoppable = pending - threads
        interrupted = [job for job, task in self._inflight.values() if task in stoppable]
        for task in stoppable:
            task.cancel()
        if pending & threads:
            log.warning(
                "%s: %d plain function(s) still running after the shutdown timeout; Python"
                " cannot interrupt a thread: waiting for them to return, their jobs stay"
                " claimed (kill the process to abandon them: their leases expire)",
                self.name,
                len(pending & threads),
            )
        await asyncio.gather(*pending, return_exceptions=True)
        try:
            async with self.pool.connection() as conn:
                await self._flush_acks(conn)  # first: an interrupted job may have finished
                if interrupted:
                    await self._hand_back(conn, interrupted)
        except psycopg.OperationalError as exc:
            # Their leases expire and the rescuer hands them out again: delayed, not lost.
            log.error(
                "%s: could not hand back %d job(s) on shutdown: %s",
                self.name,
                len(interrupted),
                exc,
            )

    async def _hand_back(self, conn: psycopg.AsyncConnection[Any], jobs: list[Job]) -> None:
        """Make interrupted claims runnable again at once (their attempt stays counted)."""
        released = await queue.release_claims(conn, jobs, worker=self.name, error=INTERRUPTED)
        if released:
            log.warning("%s: released %d interrupted job(s)", self.name, released)


_JSONB_OID = pg_types["jsonb"].oid


def _set_jsonb_loader(
    conn: psycopg.AsyncConnection[Any], loader: type[Loader] | None
) -> type[Loader] | None:
    """Register ``loader`` for text ``jsonb`` on ``conn``; return the one it replaces."""
    # get_loader is typed with the Loader protocol, register_loader with the class.
    previous = cast("type[Loader] | None", conn.adapters.get_loader(_JSONB_OID, pq.Format.TEXT))
    if loader is not None:
        conn.adapters.register_loader(_JSONB_OID, loader)
    return previous


if sys.version_info >= (3, 12):

    def _start_task(
        coro: Coroutine[Any, Any, None], name: str, context: contextvars.Context
    ) -> asyncio.Task[None]:
        """A task that takes its first step now, as its own current task and in its own
        context, like any task's: a handler that finishes without suspending (a no-op, a
        CPU-only one) is never scheduled on the loop, which is a good part of a short job's
        cost. Python 3.11 has no eager start, so there every job is scheduled."""
        loop = asyncio.get_running_loop()
        return asyncio.Task(coro, loop=loop, name=name, context=context, eager_start=True)

else:

    def _start_task(
        coro: Coroutine[Any, Any, None], name: str, context: contextvars.Context
    ) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro, name=name, context=context)


def _resolve(future: asyncio.Future[float], value: float) -> None:
    if not future.done():
        future.set_result(value)


def _job_ids(jobs: Sequence[Job]) -> str:
    """``job 7``, or ``jobs 12, 13, 21``: every id of a batch (at most ``batch_size``), so
    that a search for one job's id finds its batch's line."""
    if len(jobs) == 1:
        return f"job {jobs[0].id}"
    return "jobs " + ", ".join(str(job.id) for job in jobs)
