"""What one queue's executor holds at a time, shared by its parts: the jobs in flight (each on
the task that runs it), the finished ones its next claim acknowledges, and its counts."""

from __future__ import annotations

import asyncio

from pgenough.core import metrics
from pgenough.core.queue import Job
from pgenough.core.worker.config import WorkerConfig
from pgenough.core.worker.outcomes import WorkerStats


class Flight:
    """The in-hand state of one queue's executor. The claim loop fills it, the runners
    (``_running``, ``_batches``) empty it, the heartbeat extends its leases and the shutdown
    waits on it; ``wake`` tells the claim loop that something changed."""

    def __init__(self, config: WorkerConfig, name: str) -> None:
        self.config = config
        self.name = name
        self.stats = WorkerStats()
        self.metrics = metrics.QueueMetrics(config.queue)
        self.unreported = 0
        """Completions counted in ``stats`` but not yet in the Prometheus counter: they are
        added once per claim (``report``), not once per job."""
        self.inflight: dict[int, tuple[Job, asyncio.Task[None]]] = {}
        self.in_threads: dict[int, float] = {}
        """Jobs whose function is running in a thread now, with when (monotonic) it began:
        they are never cancelled or handed back (see ``ThreadHandler``)."""
        self.finishing = 0
        """In-flight jobs of batches whose handler has returned and whose completion is
        committing: they no longer count against concurrency (as a batched ack in ``done``
        does not), so the next claim overlaps that commit. (Should the commit fail, the batch
        runs again in halves while the next claim's jobs run: briefly past concurrency.)"""
        self.done: list[Job] = []
        """Jobs whose handler returned, acknowledged by the next claim statement (counted in
        ``stats.completed`` and in ``unreported`` as they are added)."""
        self.wake = asyncio.Event()

    def free(self) -> int:
        """Slots of ``concurrency`` that no job holds."""
        return self.config.concurrency - len(self.inflight) + self.finishing

    def forget(self, job: Job) -> None:
        """Take a finished job out of flight (unless its id is in flight for a newer claim)."""
        entry = self.inflight.get(job.id)
        if entry is not None and entry[0] is job:
            del self.inflight[job.id]
        self.wake.set()

    def report(self) -> None:
        """Add the completions counted since the last report to the Prometheus counter."""
        if self.unreported:
            self.metrics.completed.inc(self.unreported)
            self.unreported = 0
