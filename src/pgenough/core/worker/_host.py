"""The worker: the process host of the queues' executors (``_executor``).

One ``Worker`` runs one executor per queue (claim loop, concurrency, lease, heartbeat,
completion) and shares the rest across them: one listener connection (``_listener``), one
set of periodic duties (maintenance, yours), one queue-stats refresh, the signal handlers and
the pool.
"""

from __future__ import annotations

import asyncio
import random
import signal
import uuid
from collections.abc import Mapping
from dataclasses import fields

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core import maintenance
from pgenough.core.history import CountsFlusher
from pgenough.core.periodic import Periodic
from pgenough.core.queue import refresh_queue_metrics
from pgenough.core.registry import Registration
from pgenough.core.service import Service, Services, TaskService
from pgenough.core.worker._executor import Executor
from pgenough.core.worker._listener import Notifier
from pgenough.core.worker.config import WorkerConfig
from pgenough.core.worker.handlers import AnyHandler
from pgenough.core.worker.outcomes import WorkerStats, log


class Worker(Service):
    """Runs the handlers of one or more queues in this process until stopped.

    ``handlers`` maps a job's ``kind`` to an async function taking the ``Job``. Raise to fail
    the attempt (retried with backoff, dead-lettered when attempts are spent), raise
    ``RetryIn(seconds)`` to choose the delay, ``GiveUp`` to dead-letter at once. A handler
    with a ``backoff`` attribute (a task does) retries on that policy instead of the queue's.
    A ``BatchHandler`` takes the claimed jobs of its kind together, in one transaction that
    also completes them (see ``_executor``'s "Completion modes").

    Each ``WorkerConfig`` (one per queue; the default queue when none is given) gets its own
    executor: claim loop, concurrency, lease and heartbeat. The process shares the rest, as
    River's client does: ONE listening connection whatever the number of queues, ONE set of
    periodic duties (rescuer, cleaner, yours on ``periodic``), one queue-stats refresh, one
    row in ``pgenough.workers`` (``registry.py``) and one flush of its throughput into
    ``pgenough.job_counts`` (``history.py``).
    So every config must carry the same ``maintenance``.

    The listener connects to ``listen_url``, by default the pool's conninfo. Behind a
    transaction pooler (PgBouncer ``pool_mode = transaction``) the pool goes through the
    pooler and ``listen_url`` must be a direct (session) connection to the server: a LISTEN
    through the pooler lands on whichever server connection that transaction got, and its
    notifications on a session nobody reads (docs/operations/index.md, "Behind PgBouncer").

    A ``Service`` itself (``start()``, ``stop()``, ``wait_stopped()``) for a host that runs it
    beside others; its own services start in order (listener, periodic duties, queue stats)
    and stop in reverse once its claim loops are done.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool,
        handlers: Mapping[str, AnyHandler],
        *configs: WorkerConfig,
        name: str | None = None,
        rng: random.Random | None = None,
        listen_url: str | None = None,
    ) -> None:
        configs = configs or (WorkerConfig(),)
        queues = [c.queue for c in configs]
        if len(set(queues)) != len(queues):
            raise ValueError(f"one config per queue: {', '.join(queues)}")
        if any(c.maintenance != configs[0].maintenance for c in configs):
            raise ValueError("maintenance runs once per process: give every queue the same")
        if listen_url is None and not isinstance(pool.conninfo, str):
            raise TypeError("the worker's pool needs a conninfo string (for its listener)")
        self.pool = pool
        self.handlers = dict(handlers)
        self.config = configs[0]
        """The first queue's config (the only one, for a one-queue worker)."""
        self.configs = configs
        self.name = name or f"worker-{uuid.uuid4().hex[:12]}"
        self.service_name = self.name
        rng = rng or random.Random()
        multi = len(configs) > 1
        self._executors = [
            Executor(
                pool,
                self.handlers,
                config,
                # Job rows record the executor: with several queues, which one claimed it.
                name=f"{self.name}/{config.queue}" if multi else self.name,
                rng=rng,
            )
            for config in configs
        ]
        self._notifier = Notifier(
            listen_url or str(pool.conninfo),
            name=self.name,
            check_interval=min(c.poll_interval for c in configs) * 5,
        )
        for executor in self._executors:
            self._notifier.register(executor.config.queue, executor.notified)
            self._notifier.register_cancel(executor.cancel)
        self._stopping = False
        self.periodic = Periodic(pool, replica=self.name)
        """Periodic duties of this process (maintenance; add your own before run())."""
        if self.config.maintenance is not None:
            maintenance.register(self.periodic, pool, self.config.maintenance)

    # -- public ---------------------------------------------------------------------------

    @property
    def queues(self) -> list[str]:
        return [c.queue for c in self.configs]

    @property
    def stats(self) -> WorkerStats:
        """Totals over every queue of this worker."""
        total = WorkerStats()
        for executor in self._executors:
            for f in fields(WorkerStats):
                setattr(total, f.name, getattr(total, f.name) + getattr(executor.stats, f.name))
        return total

    def queue_stats(self) -> dict[str, WorkerStats]:
        """Counts per queue."""
        return {e.config.queue: e.stats for e in self._executors}

    def stop(self) -> None:
        """Stop claiming; running handlers get ``shutdown_timeout`` to finish."""
        self._stopping = True
        for executor in self._executors:
            executor.stop()

    async def wait_listening(self, timeout: float = 10.0) -> None:
        """Wait until the worker's LISTEN is active (notifications will wake it)."""
        await asyncio.wait_for(self._notifier.listening.wait(), timeout)

    async def run(self, *, until_idle: bool = False, handle_signals: bool = False) -> WorkerStats:
        """Work until ``stop()`` (or SIGTERM/SIGINT with ``handle_signals``).

        ``until_idle`` returns once nothing is claimable and nothing is running, in any of
        the worker's queues.
        """
        if handle_signals:
            self._install_signal_handlers()
        async with Services() as services:
            # Listed while it runs, its throughput counted (a drain's too: the flusher adds
            # its last counts when it stops).
            await services.start(Registration(self.pool, self.name, self.queues))
            await services.start(CountsFlusher(self.pool, self.name, self.queue_stats))
            if not until_idle:
                await services.start(self._notifier)
                await services.start(self.periodic)
                await services.start(TaskService(f"{self.name}:stats", self._refresh_stats))
            try:
                await asyncio.gather(*(e.run(until_idle) for e in self._executors))
            finally:
                self.stop()
        return self.stats

    async def serve(self) -> None:
        await self.run()

    # -- background services ----------------------------------------------------------------

    async def _refresh_stats(self) -> None:
        interval = min(c.stats_interval for c in self.configs)
        while True:
            try:
                async with self.pool.connection() as conn:
                    await refresh_queue_metrics(conn)
            except psycopg.Error as exc:  # a service loop: log and carry on
                log.warning("%s: queue stats failed: %s", self.name, exc)
            await asyncio.sleep(interval)

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if self._stopping:
                log.warning("%s: second signal, interrupting running handlers", self.name)
                for executor in self._executors:
                    executor.interrupt()
                return
            log.info(
                "%s: %s received, finishing running jobs (up to %.0fs)",
                self.name,
                signal.Signals(signum).name,
                max(c.shutdown_timeout for c in self.configs),
            )
            self.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
