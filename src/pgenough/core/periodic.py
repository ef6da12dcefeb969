"""Periodic tasks that run at most once per period across every replica.

Each replica wakes at each period boundary (by the database clock) and tries to claim the
period with one conditional upsert on ``pgenough.periodic``; only the replica whose upsert
moved the period forward runs the task. A replica that dies mid-run loses that period's run:
at most once, never twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeAlias

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core import metrics
from pgenough.core._sql import load

log = logging.getLogger(__name__)
_Q = load("periodic")

TaskFn: TypeAlias = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class PeriodicTask:
    name: str
    seconds: float
    fn: TaskFn

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise ValueError("a period must be positive")
        if not self.name:
            raise ValueError("a periodic task needs a name")


def seconds_to_next_period(now_s: float, seconds: float) -> float:
    """Time from ``now_s`` (epoch seconds) to the start of the next period."""
    return seconds - (now_s % seconds)


class Periodic:
    """A set of periodic tasks run by this replica, each at most once per period overall.

    ::

        periodic = Periodic(pool)

        @periodic.every(60, "nightly-report")
        async def report() -> None: ...

        await periodic.run()          # until stop() is called
    """

    def __init__(self, pool: AsyncConnectionPool, *, replica: str | None = None) -> None:
        self._pool = pool
        self.replica = replica or f"replica-{uuid.uuid4().hex[:12]}"
        self._tasks: dict[str, PeriodicTask] = {}
        self._stop = asyncio.Event()
        self._rng = random.Random()

    def every(
        self, seconds: float, name: str, fn: TaskFn | None = None
    ) -> Callable[[TaskFn], TaskFn]:
        """Register ``fn`` to run every ``seconds`` under the cluster-wide ``name``.

        Usable directly (``every(10, "x", fn)``) or as a decorator (``@every(10, "x")``).
        """

        def register(f: TaskFn) -> TaskFn:
            if name in self._tasks:
                raise ValueError(f"periodic task {name!r} is already registered")
            self._tasks[name] = PeriodicTask(name, seconds, f)
            return f

        if fn is not None:
            register(fn)
        return register

    async def claim(self, task: PeriodicTask) -> tuple[float, bool]:
        """Try to claim the current period of ``task``: (database epoch seconds, claimed)."""
        metrics.PERIODIC_CLAIMS.labels(task.name).inc()
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                _Q["claim_period"],
                {"name": task.name, "seconds": task.seconds, "replica": self.replica},
            )
            row = await cur.fetchone()
        assert row is not None
        return float(row[0]), row[1] is not None

    async def run_once(self, task: PeriodicTask) -> tuple[float, bool]:
        """Claim and, if this replica won the period, run ``task``; (db time, ran)."""
        now_s, claimed = await self.claim(task)
        if claimed:
            metrics.PERIODIC_RUNS.labels(task.name).inc()
            try:
                await task.fn()
            except Exception:  # a service loop: log and keep the schedule
                metrics.PERIODIC_ERRORS.labels(task.name).inc()
                log.exception("periodic task %s failed", task.name)
        return now_s, claimed

    async def _loop(self, task: PeriodicTask) -> None:
        failures = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                now_s, _ = await self.run_once(task)
                failures = 0
                # Sleep to the next boundary as measured at claim time, so a slow run does
                # not shift the schedule; the small jitter spreads replicas' claims.
                delay = seconds_to_next_period(now_s, task.seconds) + self._rng.uniform(0, 0.02)
                delay = max(0.0, delay - (time.monotonic() - started))
            except psycopg.Error as exc:  # a service loop: log and carry on
                failures += 1
                delay = min(30.0, 0.5 * 2 ** min(failures, 6))
                log.warning(
                    "periodic task %s: could not claim its period (%s); retry in %.1fs",
                    task.name,
                    exc,
                    delay,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=delay)

    async def run(self) -> None:
        """Run every registered task until ``stop()``."""
        self._stop.clear()
        async with asyncio.TaskGroup() as group:
            for task in self._tasks.values():
                group.create_task(self._loop(task), name=f"periodic:{task.name}")

    def stop(self) -> None:
        self._stop.set()
