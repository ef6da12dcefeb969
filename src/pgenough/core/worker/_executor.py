"""The executor of one queue: its claim loop, which hands the jobs it claims to the runners
(``_running``, ``_batches``), its heartbeat (``_heartbeat``) and its shutdown; the ``Worker``
(``_host``) is the process host that runs one executor per queue.

Per queue, one loop claims with ``FOR UPDATE SKIP LOCKED`` and, in the same statement,
acknowledges the jobs that finished since the last claim, so a busy worker spends one round
trip and one commit per batch. Handlers run as asyncio tasks, at most ``concurrency`` at
once. One
listener connection per process (``_listener``) wakes the loop of the queue a NOTIFY names;
without notifications it polls. Leases are extended by a
heartbeat while handlers run; a worker that dies stops heartbeating and its claims are taken
back by the rescuer (see ``pgenough.core.maintenance``), which counts the attempt.

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
import contextlib
import random
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, cast

import psycopg
from psycopg import pq
from psycopg.adapt import Loader
from psycopg.postgres import types as pg_types
from psycopg_pool import AsyncConnectionPool

from pgenough.core import queue
from pgenough.core.queue import Job, PayloadLoader
from pgenough.core.retry import Backoff, Reconnect
from pgenough.core.worker._batches import BatchRunner
from pgenough.core.worker._flight import Flight
from pgenough.core.worker._heartbeat import Heartbeat
from pgenough.core.worker._running import JobRunner
from pgenough.core.worker.config import WorkerConfig
from pgenough.core.worker.handlers import AnyHandler, BatchHandler
from pgenough.core.worker.outcomes import INTERRUPTED, WorkerStats, log

CLAIM_BACKOFF: Final = Backoff(base=0.2, cap=10.0)
"""Retries of a claim loop whose connection failed."""
RESCAN_INTERVAL: Final = 0.5
"""Seconds a claim loop may claim past its last claimed position before it scans the claim
index from the start again (see ``Executor._claim``)."""


class Executor:
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
        self.flight = Flight(config, name)
        self.runner = JobRunner(pool, handlers, self.flight, rng)
        self.batches = BatchRunner(pool, self.flight, self.runner)
        self.heartbeat = Heartbeat(pool, self.flight, self.runner.cancel)
        self._rng = rng
        self._after: tuple[int, datetime, int] | None = None
        """(priority, run_at, id) of the last job claimed, where the next claim starts."""
        self._rescan_at = 0.0
        """When (``time.monotonic()``) the next claim must scan from the start."""
        self._rescan_pending = False
        """The last claim came back short past the position without scanning from the
        start: a job may wait behind the position until that scan."""
        self._may_be_ready = False
        """A ready job may be waiting: the last claim came back full, or a notification named
        the queue since it ran (``notified``)."""
        self._poll_at = 0.0
        """When (``time.monotonic()``) to look again at a queue the last claim found drained
        (``poll_interval`` after it): jobs that come due without a notification."""
        self._rate_wait: float | None = None
        """Seconds until the queue's rate allows another start, as the last claim said."""
        self._limited = False
        """The queue has a fleet-wide limit (the last claim said so): claimed with
        ``queue.claim_limited``."""
        self._stopping = asyncio.Event()

    @property
    def stats(self) -> WorkerStats:
        return self.flight.stats

    def stop(self) -> None:
        self._stopping.set()
        self.flight.wake.set()

    def notified(self) -> None:
        """A notification named this queue (or the listener reconnected): a job may be ready."""
        self._may_be_ready = True
        self.flight.wake.set()

    def interrupt(self) -> None:
        """Cancel the running async handlers (a plain function's thread runs on)."""
        self.runner.interrupt()

    def cancel(self, job_id: int) -> None:
        """An operator cancelled job ``job_id``: if this executor runs it, stop its handler."""
        self.runner.cancel(job_id)

    async def run(self, until_idle: bool) -> None:
        heartbeat = asyncio.create_task(self.heartbeat.run(), name=f"{self.name}:heartbeat")
        try:
            await self._claim_loop(until_idle)
        finally:
            try:
                await self._shutdown()
            finally:
                self.flight.report()
                heartbeat.cancel()
                await asyncio.gather(heartbeat, return_exceptions=True)
                self.runner.close()

    # -- claiming ---------------------------------------------------------------------------

    async def _claim_loop(self, until_idle: bool) -> None:
        conn: psycopg.AsyncConnection[Any] | None = None
        restore: type[Loader] | None = None
        reconnect = Reconnect(f"{self.name}: claim", CLAIM_BACKOFF, logger=log, rng=self._rng)
        refill_at = max(1, min(self.config.batch_size, self.config.concurrency) // 2)
        try:
            while not self._stopping.is_set():
                self.flight.report()
                free = self.flight.free()
                if free < 1:
                    await self._wait(None)  # until a handler finishes
                    continue
                if free < refill_at and self.flight.inflight and not self._worth_a_partial_claim():
                    # A free slot never idles while a job may be ready (the last claim came
                    # back full, a notification came, the poll is due). Otherwise refill in
                    # batches: on a drained queue a claim per finished handler would cost a
                    # round trip and a commit per job, and find nothing.
                    await self._wait(max(0.0, self._next_look() - time.monotonic()))
                    continue
                limit = min(self.config.batch_size, free)
                done, self.flight.done = self.flight.done, []
                try:
                    if conn is None or conn.closed:
                        conn, restore = await self._hold()
                    jobs = await self._claim(conn, done, limit)
                    reconnect.succeeded()
                except psycopg.OperationalError as exc:
                    self.flight.done = done + self.flight.done
                    delay = reconnect.failed(exc)
                    if conn is not None:
                        await self._unhold(conn, restore)
                        conn = None
                    await self._wait(delay)
                    continue
                self._dispatch(jobs)
                if len(jobs) < limit:
                    idle = not jobs and not self.flight.inflight and not self.flight.done
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
        jobs = await self._take(conn, done, limit, None if full else self._after)
        self._rescan_pending = not full and not self._limited and len(jobs) < limit
        if limit and len(jobs) == limit:
            self._may_be_ready = True
        elif limit:
            self._poll_at = now + self.config.poll_interval
        if self._rate_wait is not None:
            self._poll_at = min(self._poll_at, now + self._rate_wait)
            self._rate_wait = None
        jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        if jobs:
            last = jobs[-1]
            self._after = (last.priority, last.run_at, last.id)
            self.flight.metrics.claimed.inc(len(jobs))
            self.flight.stats.claimed += len(jobs)
        return jobs

    async def _take(
        self,
        conn: psycopg.AsyncConnection[Any],
        done: list[Job],
        limit: int,
        after: tuple[int, datetime, int] | None,
    ) -> list[Job]:
        """The claim statement for this queue as it is now: plain, or under its fleet-wide
        limit (``limits.py``); a claim that finds the queue's limit set or lifted switches
        and claims again at once (its acknowledgements are done)."""
        config = self.config
        if not self._limited:
            taken = await queue.claim(
                conn,
                queue=config.queue,
                worker=self.name,
                lease=config.lease,
                limit=limit,
                done=done,
                after=after,
            )
            if not taken.limited:
                return taken.jobs
            log.info(
                "%s: queue %s has a fleet-wide limit: claiming under it", self.name, config.queue
            )
            self._limited, done = True, []
        taken = await queue.claim_limited(
            conn, queue=config.queue, worker=self.name, lease=config.lease, limit=limit, done=done
        )
        if taken.limited:
            if taken.next_start_in is not None:  # the rate held jobs back: look again then
                self._rate_wait = taken.next_start_in
            return taken.jobs
        log.info("%s: queue %s has no limit any more", self.name, config.queue)
        self._limited = False
        return await self._take(conn, [], limit, None)

    def _next_look(self) -> float:
        """When a queue found drained is looked at again without a notification: the poll,
        or sooner the scan from the start a short claim past the position asks for."""
        if self._rescan_pending:
            return min(self._poll_at, self._rescan_at)
        return self._poll_at

    def _worth_a_partial_claim(self) -> bool:
        # Under a fleet-wide limit a claim comes back short while the fleet is at it, not
        # only when the queue is drained: each slot that frees is worth a claim.
        return self._limited or self._may_be_ready or time.monotonic() >= self._next_look()

    async def _flush_acks(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Acknowledge what finished without claiming more (on the way out)."""
        if not self.flight.done:
            return
        done, self.flight.done = self.flight.done, []
        try:
            await self._claim(conn, done, 0)
        except psycopg.OperationalError as exc:
            # Their claims stay 'running' until the rescuer retries them: at-least-once.
            log.error("%s: could not acknowledge %d finished job(s): %s", self.name, len(done), exc)

    async def _wait(self, timeout: float | None) -> None:
        # A timer that sets the event, not wait_for: that would start a task per wait, which
        # at batch 1 (and after each notification) is a wait per job.
        timer = None
        if timeout is not None and not self.flight.wake.is_set():
            timer = asyncio.get_running_loop().call_later(timeout, self.flight.wake.set)
        try:
            await self.flight.wake.wait()
        finally:
            if timer is not None:
                timer.cancel()
        self.flight.wake.clear()

    def _dispatch(self, jobs: list[Job]) -> None:
        """One task per job, or per kind for the jobs of a batch handler."""
        batches: dict[str, list[Job]] = {}
        handlers, start = self.handlers, self.runner.start
        for job in jobs:
            if isinstance(handlers.get(job.kind), BatchHandler):
                batches.setdefault(job.kind, []).append(job)
            else:
                start(job)
        for kind, batch in batches.items():
            self.batches.start(kind, batch)

    # -- shutdown ---------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Let running handlers finish; past ``shutdown_timeout`` cancel the async ones and,
        once their coroutines have ended, give their claims back. A plain function's thread
        cannot be cancelled: its job stays claimed, heartbeats going on, until it returns."""
        if not self.flight.inflight:
            return
        tasks = {task for _, task in self.flight.inflight.values()}  # a batch's jobs share one
        _, pending = await asyncio.wait(tasks, timeout=self.config.shutdown_timeout)
        in_threads = self.flight.in_threads
        threads = {task for i, (_, task) in self.flight.inflight.items() if i in in_threads}
        stoppable = pending - threads
        interrupted = [job for job, task in self.flight.inflight.values() if task in stoppable]
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
