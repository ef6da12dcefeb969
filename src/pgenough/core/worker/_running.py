"""Running one job: its handler (an async function, or a plain one in the queue's threads),
its outcome (done, retried, dead-lettered, lost) recorded and said in its line, and the job of
a kind no handler here knows handed back."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import random
import sys
import time
from collections.abc import Coroutine, Mapping
from datetime import datetime
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core import queue
from pgenough.core.cancellation import cancelled_here
from pgenough.core.errors import LeaseLost, RetryIn, TaskFailed, TaskTimeout
from pgenough.core.failures import Outcome, failure_outcome
from pgenough.core.job_states import JobState
from pgenough.core.logcontext import context_with
from pgenough.core.queue import Job
from pgenough.core.retry import Backoff
from pgenough.core.worker._flight import Flight
from pgenough.core.worker.handlers import AnyHandler, BatchHandler, ThreadHandler
from pgenough.core.worker.outcomes import job_line, jobs_log, log

UNHANDLED_DELAY: Final = (1.0, 60.0)
"""The shortest and longest wait before a job of a kind this worker does not handle is
offered again (a tenth of its age in between: soon after a deploy, rarely later)."""
UNHANDLED_LOG_INTERVAL: Final = 60.0
"""Seconds between two warnings about the same unhandled kind from one executor."""


class JobRunner:
    """Runs the jobs of one queue one by one, each on its own task (``start``)."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        handlers: Mapping[str, AnyHandler],
        flight: Flight,
        rng: random.Random,
    ) -> None:
        self.pool = pool
        self.handlers = handlers
        self.flight = flight
        self.config = flight.config
        self.name = flight.name
        self.rng = rng
        # Bound once: both are on every job's path.
        self._duration = flight.metrics.duration
        self._forget = flight.forget
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        """This queue's threads for ``ThreadHandler`` jobs, started on the first one."""
        self._unhandled_logged: dict[str, tuple[float, int]] = {}
        """Per unhandled kind: when it was last warned about, and jobs met since."""

    def interrupt(self) -> None:
        """Cancel the running async handlers (a plain function's thread runs on)."""
        for job_id, (_, task) in list(self.flight.inflight.items()):
            if job_id not in self.flight.in_threads:
                task.cancel()
        if self.flight.in_threads:
            log.warning(
                "%s: %d plain function(s) still running cannot be interrupted (jobs %s);"
                " their jobs stay claimed until they return: kill the process to abandon"
                " them, and their leases expire",
                self.name,
                len(self.flight.in_threads),
                ", ".join(map(str, list(self.flight.in_threads)[:10])),
            )

    def cancel(self, job_id: int) -> None:
        """An operator cancelled ``job_id``: if it runs here, mark it cancelled in this
        process (a plain function sees it: ``TaskContext.cancelled``) and cancel its task: an
        async handler stops at its next await; a plain function's thread runs on unless it
        has not started (``_run_in_thread``). A batch's job is left to its batch, whose
        completion finds that claim gone and runs the others again (``_batches``)."""
        entry = self.flight.inflight.get(job_id)
        if entry is None or job_id in cancelled_here:
            return
        job, task = entry
        if isinstance(self.handlers.get(job.kind), BatchHandler):
            return
        cancelled_here.add(job_id)
        task.cancel()

    def start(self, job: Job) -> None:
        # Every line logged while the job runs (by the handler too) carries its id and queue.
        context = context_with(job_id=job.id, queue=self.config.queue)
        task = start_task(self._run(job), f"{self.name}:job-{job.id}", context)
        if not task.done():  # started eagerly, it may have finished (and been forgotten)
            self.flight.inflight[job.id] = (job, task)

    async def _run(self, job: Job) -> None:
        started = time.perf_counter()
        handler = self.handlers.get(job.kind)
        if handler is None:
            try:
                await self._unhandled(job, started)
            finally:
                self.flight.forget(job)
            return
        try:
            assert not isinstance(handler, BatchHandler)  # BatchRunner runs those
            if isinstance(handler, ThreadHandler):
                await self._run_in_thread(handler, job)
            else:
                await handler(job)
        except asyncio.CancelledError:
            if job.id in cancelled_here:
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()  # our own cancel, done with: the task ends normally
                self._cancelled(job, started)
                return
            job_line(self.name, logging.WARNING, job, "interrupted", started, note="shutting down")
            raise
        except Exception as exc:
            if job.id in cancelled_here:
                self._cancelled(job, started, exc)
            else:
                # A handler may carry its own retry policy (a task does).
                await self.failed(job, exc, getattr(handler, "backoff", None), started)
        else:
            if cancelled_here and job.id in cancelled_here:
                self._cancelled(job, started)
                return
            flight = self.flight  # a completed job: acknowledged by the next claim
            flight.stats.completed += 1
            flight.unreported += 1
            flight.done.append(job)
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
            self._duration.observe(time.perf_counter() - started)
            self._forget(job)
            if cancelled_here:
                cancelled_here.discard(job.id)

    def _cancelled(self, job: Job, started: float, exc: Exception | None = None) -> None:
        """A job an operator cancelled while it ran: already ``cancelled`` in its row, never
        retried; nothing to record (its claim is gone), only its line."""
        self.flight.stats.lost += 1
        how = "stopped" if exc is None else f"raised {type(exc).__name__}"
        what = "cancelled by an operator while it ran"
        job_line(self.name, logging.INFO, job, what, started, note=f"its handler {how}")

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
        self.flight.in_threads[job.id] = began
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
            del self.flight.in_threads[job.id]

    @staticmethod
    def _overdue(handler: ThreadHandler, job: Job, began: float) -> TaskTimeout:
        return TaskTimeout(
            f"task {job.kind!r} ran past its timeout of {handler.timeout:g}s (its thread ran"
            f" {time.monotonic() - began:.1f}s: Python cannot interrupt a thread)"
        )

    async def failed(
        self, job: Job, exc: Exception, backoff: Backoff | None, started: float
    ) -> None:
        """A job's attempt raised: retry it, dead-letter it, or note that it is lost; and
        say so in its line, with the traceback."""
        if isinstance(exc, TaskTimeout):
            self.flight.metrics.timed_out.inc()
        if isinstance(exc, LeaseLost):
            # Nothing to record: the job is no longer this attempt's.
            self.flight.stats.lost += 1
            job_line(self.name, logging.WARNING, job, "lost its claim before completing", started)
            return
        outcome = failure_outcome(exc, job, backoff or self.config.backoff, self.rng)
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
            self.flight.stats.lost += 1
            job_line(
                self.name,
                logging.WARNING,
                job,
                "lost its claim before its failure was recorded",
                started,
                error=outcome.error,
                exc=traced,
            )
        elif state == JobState.DEAD:
            self.flight.metrics.dead.inc()
            self.flight.stats.dead += 1
            what = "failed, dead-lettered"
            job_line(self.name, logging.ERROR, job, what, started, error=outcome.error, exc=traced)
        else:
            self.flight.metrics.retried.inc()
            self.flight.stats.retried += 1
            if isinstance(exc, RetryIn):
                what, level = f"retry in {outcome.delay:g}s, as asked", logging.INFO
            else:
                what, level = f"failed, retry in {outcome.delay:.1f}s", logging.WARNING
            job_line(self.name, level, job, what, started, error=outcome.error, exc=traced)

    async def _record(
        self, job: Job, outcome: Outcome, exc: Exception, started: float
    ) -> tuple[bool, str | None]:
        """Record a failed attempt: (True, the job's new state or None when the claim was
        lost), or (False, None) when the database refused (then said in the job's line)."""
        self.flight.metrics.failed.inc()
        self.flight.stats.failed += 1
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
            job_line(
                self.name,
                logging.ERROR,
                job,
                "failed, and its failure could not be recorded",
                started,
                error=f"{outcome.error} (recording it: {db_exc}; its lease expires and the"
                " rescuer hands it out again)",
                exc=exc if outcome.traceback is not None else None,
            )
            return False, None

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
            self.flight.metrics.dead.inc()
            self.flight.stats.dead += 1
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
            self.flight.stats.lost += 1
            what = "lost its claim before it was handed back"
            job_line(self.name, logging.WARNING, job, what, started)
            return
        self.flight.stats.handed_back += 1
        job_line(
            self.name,
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

    def close(self) -> None:
        """Let the threads go (idle: every function has returned)."""
        if self._threads is not None:
            self._threads.shutdown(wait=False)


if sys.version_info >= (3, 12):

    def start_task(
        coro: Coroutine[Any, Any, None], name: str, context: contextvars.Context
    ) -> asyncio.Task[None]:
        """A task that takes its first step now, as its own current task and in its own
        context, like any task's: a handler that finishes without suspending (a no-op, a
        CPU-only one) is never scheduled on the loop, which is a good part of a short job's
        cost. Python 3.11 has no eager start, so there every job is scheduled."""
        loop = asyncio.get_running_loop()
        return asyncio.Task(coro, loop=loop, name=name, context=context, eager_start=True)

else:

    def start_task(
        coro: Coroutine[Any, Any, None], name: str, context: contextvars.Context
    ) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro, name=name, context=context)


def _resolve(future: asyncio.Future[float], value: float) -> None:
    if not future.done():
        future.set_result(value)
