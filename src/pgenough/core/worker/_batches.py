"""Batch handlers: the claimed jobs of one kind run together in one transaction that also
completes them (batch-transactional completion, see ``_claims``'s "Completion modes"); a
raising batch is bisected until the job at fault fails alone."""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core.logcontext import context_with
from pgenough.core.queue import Job, complete_many
from pgenough.core.worker._flight import Flight
from pgenough.core.worker._running import JobRunner
from pgenough.core.worker.handlers import BatchHandler
from pgenough.core.worker.outcomes import job_ids, jobs_log, log


class BatchRunner:
    """Runs the jobs of a ``BatchHandler``'s kind, one task and one transaction per batch;
    a job that fails alone goes the way of any job (``JobRunner.failed``)."""

    def __init__(self, pool: AsyncConnectionPool, flight: Flight, runner: JobRunner) -> None:
        self.pool = pool
        self.flight = flight
        self.runner = runner
        self.name = flight.name

    def start(self, kind: str, jobs: list[Job]) -> None:
        handler = self.runner.handlers[kind]
        assert isinstance(handler, BatchHandler)
        context = context_with(queue=self.flight.config.queue, kind=kind, batch=len(jobs))
        task = asyncio.create_task(
            self._run_batch(handler, jobs),
            name=f"{self.name}:batch-{jobs[0].id}+{len(jobs) - 1}",
            context=context,
        )
        # Each job is in flight on its own (heartbeats, concurrency, shutdown), on one task.
        for job in jobs:
            self.flight.inflight[job.id] = (job, task)

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
                        await self.runner.failed(job, exc, handler.backoff, started)
                        self.flight.forget(job)
                    else:
                        runnable.append(job)
            await self._run_group(handler, runnable)
        except asyncio.CancelledError:
            inflight = self.flight.inflight
            interrupted = [job for job in jobs if inflight.get(job.id, (None,))[0] is job]
            if interrupted and jobs_log.isEnabledFor(logging.WARNING):
                jobs_log.warning(
                    "%s: %s interrupted (%s, batch of %d, %.3fs): shutting down",
                    self.name,
                    job_ids(interrupted),
                    jobs[0].kind,
                    len(interrupted),
                    time.perf_counter() - started,
                )
            raise
        finally:
            self.flight.metrics.duration.observe(time.perf_counter() - started)
            for job in jobs:  # the ones still here were interrupted
                self.flight.forget(job)

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
                    await self.runner.failed(jobs[0], exc, handler.backoff, started)
                    self.flight.forget(jobs[0])
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
                self.flight.metrics.completed.inc(len(jobs))
                self.flight.stats.completed += len(jobs)
                # One line per call, naming its jobs: a batch task exists to run many jobs
                # at the cost of one, and a line per job would bring a per-job cost back.
                if jobs_log.isEnabledFor(logging.INFO):
                    jobs_log.info(
                        "%s: %s done (%s, batch of %d, %.3fs)",
                        self.name,
                        job_ids(jobs),
                        jobs[0].kind,
                        len(jobs),
                        time.perf_counter() - started,
                    )
                for job in jobs:
                    self.flight.forget(job)
                return
            self.flight.stats.lost += len(lost)
            log.warning(
                "%s: %d job(s) of a batch lost their claims before completing (%s);"
                " rolled back, running the other %d again",
                self.name,
                len(lost),
                ", ".join(str(j.id) for j in lost[:10]),
                len(jobs) - len(lost),
            )
            for job in lost:
                self.flight.forget(job)
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
                self.flight.finishing += finishing
                self.flight.wake.set()
                held = await complete_many(conn, jobs)
                if len(held) < len(jobs):
                    # A lost job's effect is its new owner's to commit (or, cancelled, no
                    # one's); the others' may depend on it, so none of this one commits.
                    raise psycopg.Rollback(tx)
        finally:
            self.flight.finishing -= finishing
        return held
