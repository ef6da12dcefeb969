"""Periodic tasks that run at most once per tick across every replica.

A task has a schedule (``schedule.py``): a fixed interval (``every``) or a cron expression in a
timezone (``cron``). Each replica wakes at each of the task's ticks, reads the database clock,
and tries to claim the schedule's latest tick with one conditional upsert on
``pgenough.periodic``; only the replica whose upsert moved the tick forward runs the task. A
replica that dies mid-run loses that tick's run: at most once, never twice.

Ticks that pass while no replica is up are handled by the task's ``missed`` policy: ``once``
runs the latest of them once on recovery and drops the older ones; ``skip`` runs none that is
claimed more than ``grace`` seconds after its time. A cron task seen for the first time does
not run for a tick that passed before it was registered; an interval task runs its current
period at once (the period is still going on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, TypeAlias

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core import metrics
from pgenough.core._sql import PLAN_EACH_TIME, load
from pgenough.core.errors import first_line
from pgenough.core.retry import Backoff, Reconnect
from pgenough.core.schedule import (
    DEFAULT_GRACE,
    MISSED_POLICIES,
    Cron,
    Interval,
    Missed,
    Schedule,
    Tick,
    from_spec,
    is_late,
)
from pgenough.core.service import Service
from pgenough.core.statements import Query, Steps, dual

log = logging.getLogger(__name__)
_Q = load("periodic")

CLAIM_BACKOFF = Backoff(base=1.0, cap=30.0)
"""Retries of a tick's claim while the database cannot be reached."""

MISSED_COUNTED = 10_000
"""Ticks missed in one outage counted at most (a per-second cron down for a day: 86,400)."""
OVERDUE_SLACK = 5.0
"""Seconds past its due time before a tick nobody claimed counts as overdue (replicas claim
a few milliseconds after each tick, with jitter)."""

TaskFn: TypeAlias = Callable[[], Awaitable[None]]
Outcome: TypeAlias = Literal["run", "skipped", "recorded"]


@dataclass(frozen=True)
class PeriodicTask:
    """A task, its schedule, and what it does about ticks missed while no replica was up.

    ``grace`` is how late (seconds) a claim may come after its tick and still be on time:
    under ``missed="skip"`` a later tick is not run; under ``"once"`` it runs, logged as late.
    None (the default of ``every``) takes no tick as late.
    """

    name: str
    schedule: Schedule
    fn: TaskFn
    missed: Missed = "once"
    grace: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a periodic task needs a name")
        if self.missed not in MISSED_POLICIES:
            raise ValueError(f"missed must be one of {MISSED_POLICIES}, got {self.missed!r}")
        if self.grace is not None and self.grace < 0:
            raise ValueError("grace must not be negative")
        if self.missed == "skip" and self.grace is None:
            raise ValueError('missed="skip" needs a grace')


@dataclass(frozen=True)
class Claim:
    """One replica's attempt at a task's latest tick, at database time ``now``.

    ``outcome`` is None when this replica did not move the tick forward (another did, or it
    was claimed already); otherwise this replica runs it, skipped it as late, or recorded it
    without running (a first registration or a changed schedule).
    """

    now: datetime
    tick: Tick | None
    outcome: Outcome | None

    @property
    def runs(self) -> bool:
        return self.outcome == "run"


class Periodic(Service):
    """A set of periodic tasks run by this replica, each at most once per tick overall.

    A ``Service``: ``start()`` runs it in a task, and ``stop()`` then also cancels that task
    (a running task function with it); ``await run()`` instead returns at ``stop()`` once the
    running functions have returned.

    ::

        periodic = Periodic(pool)

        @periodic.every(60, "minutely-report")
        async def report() -> None: ...

        @periodic.cron("30 2 * * *", "nightly-report", timezone="Europe/Berlin")
        async def nightly() -> None: ...

        await periodic.run()          # until stop() is called
    """

    def __init__(self, pool: AsyncConnectionPool, *, replica: str | None = None) -> None:
        self._pool = pool
        self.replica = replica or f"replica-{uuid.uuid4().hex[:12]}"
        self.service_name = f"{self.replica}:periodic"
        self._tasks: dict[str, PeriodicTask] = {}
        self._stop = asyncio.Event()
        self._rng = random.Random()

    def every(
        self, seconds: float, name: str, fn: TaskFn | None = None
    ) -> Callable[[TaskFn], TaskFn]:
        """Register ``fn`` to run every ``seconds`` under the cluster-wide ``name``.

        Usable directly (``every(10, "x", fn)``) or as a decorator (``@every(10, "x")``).
        """
        return self._register(name, Interval(seconds), fn, "once", None)

    def cron(
        self,
        expr: str,
        name: str,
        fn: TaskFn | None = None,
        *,
        timezone: str = "UTC",
        missed: Missed = "once",
        grace: float = DEFAULT_GRACE,
    ) -> Callable[[TaskFn], TaskFn]:
        """Register ``fn`` to run at each tick of the cron expression ``expr`` (five fields,
        or six with a leading seconds field) in the IANA ``timezone``, under ``name``.

        Usable directly or as a decorator, like ``every``. A bad expression or an unknown
        timezone raises ``ValueError`` here. ``missed`` and ``grace``: see ``PeriodicTask``.
        """
        return self._register(name, Cron(expr, timezone), fn, missed, grace)

    def _register(
        self,
        name: str,
        schedule: Schedule,
        fn: TaskFn | None,
        missed: Missed,
        grace: float | None,
    ) -> Callable[[TaskFn], TaskFn]:
        # Built before any function is given, so a bad schedule fails at the call site even
        # in the decorator form.
        PeriodicTask(name, schedule, _never, missed, grace)

        def register(f: TaskFn) -> TaskFn:
            self.add(PeriodicTask(name, schedule, f, missed, grace))
            return f

        if fn is not None:
            register(fn)
        return register

    def add(self, task: PeriodicTask) -> None:
        """Register a task built beforehand (``every`` and ``cron`` build theirs)."""
        if task.name in self._tasks:
            raise ValueError(f"periodic task {task.name!r} is already registered")
        self._tasks[task.name] = task

    async def claim_at(
        self, conn: psycopg.AsyncConnection[Any], task: PeriodicTask, now: datetime
    ) -> Claim:
        """Try to claim ``task``'s latest tick at database time ``now`` on ``conn``."""
        tick = task.schedule.latest(now)
        if tick is None:
            return Claim(now, None, None)
        late = task.grace is not None and is_late(tick, now, task.grace)
        skip = late and task.missed == "skip"
        cur = await conn.execute(
            _Q["claim_tick"],
            {
                "name": task.name,
                "schedule": task.schedule.spec,
                "tick": tick.key,
                "first_runs": task.schedule.first_tick_runs,
                "skip": skip,
                "replica": self.replica,
            },
            prepare=PLAN_EACH_TIME,
        )
        row = await cur.fetchone()
        if row is None:
            return Claim(now, tick, None)
        runs, previous = row
        # No previous tick under this schedule: a first claim, which only runs an interval's.
        outcome: Outcome = "run" if runs else "recorded" if previous is None else "skipped"
        _log_claim(task, tick, now, outcome, previous)
        if previous is not None:
            missed = task.schedule.ticks_between(previous, tick.key, MISSED_COUNTED)
            missed += outcome == "skipped"
            if missed:
                await conn.execute(
                    _Q["add_missed"],
                    {"missed": missed, "name": task.name, "tick": tick.key},
                    prepare=PLAN_EACH_TIME,
                )
        return Claim(now, tick, outcome)

    async def claim(self, task: PeriodicTask) -> tuple[float, bool]:
        """Try to claim the current tick of ``task``: (database epoch seconds, claimed)."""
        claim = await self._claim(task)
        return claim.now.timestamp(), claim.runs

    async def _claim(self, task: PeriodicTask) -> Claim:
        metrics.PERIODIC_CLAIMS.labels(task.name).inc()
        async with self._pool.connection() as conn:
            cur = await conn.execute(_Q["database_now"])
            row = await cur.fetchone()
            assert row is not None
            return await self.claim_at(conn, task, row[0])

    async def run_once(self, task: PeriodicTask) -> tuple[float, bool]:
        """Claim and, if this replica won the tick, run ``task``; (db time, ran)."""
        claim = await self._run_once(task)
        return claim.now.timestamp(), claim.runs

    async def _run_once(self, task: PeriodicTask) -> Claim:
        claim = await self._claim(task)
        if claim.runs:
            metrics.PERIODIC_RUNS.labels(task.name).inc()
            try:
                await task.fn()
            except psycopg.OperationalError as exc:
                # Its connection failed under it (a reset, a dead link, a restart): the
                # network's doing, not the task's; a traceback would say nothing more.
                metrics.PERIODIC_ERRORS.labels(task.name).inc()
                log.warning(
                    "periodic task %s failed: its connection failed (%s); it runs again at"
                    " its next tick",
                    task.name,
                    first_line(exc),
                )
            except Exception:  # a service loop: log and keep the schedule
                metrics.PERIODIC_ERRORS.labels(task.name).inc()
                log.exception("periodic task %s failed", task.name)
        return claim

    async def _loop(self, task: PeriodicTask) -> None:
        reconnect = Reconnect(
            f"periodic task {task.name}: claim of its tick",
            CLAIM_BACKOFF,
            logger=log,
            rng=self._rng,
            stop=self._stop,
        )
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                claim = await self._run_once(task)
                reconnect.succeeded()
                # Sleep to the next tick as measured at claim time, so a slow run does not
                # shift the schedule; the small jitter spreads replicas' claims.
                wait = task.schedule.next_after(claim.now).at - claim.now
                delay = wait.total_seconds() + self._rng.uniform(0, 0.02)
                delay = max(0.0, delay - (time.monotonic() - started))
            except psycopg.Error as exc:  # a service loop: log and carry on
                delay = reconnect.failed(exc)
            await reconnect.wait(delay)

    async def serve(self) -> None:
        await self.run()

    async def run(self) -> None:
        """Run every registered task until ``stop()``."""
        self._stop.clear()
        async with asyncio.TaskGroup() as group:
            for task in self._tasks.values():
                group.create_task(self._loop(task), name=f"periodic:{task.name}")

    def stop(self) -> None:
        self._stop.set()
        super().stop()


@dataclass(frozen=True)
class PeriodicInfo:
    """A periodic task as the database knows it, from the ticks claimed: what the dashboard
    and ``pgenough status`` show. Only tasks some replica has claimed once are known."""

    name: str
    schedule: str
    """Its schedule as text (``every 60.0s``, ``cron 30 2 * * * Europe/Berlin``)."""
    last_tick_at: datetime | None
    """The last tick claimed (run, skipped, or recorded on a first claim)."""
    last_claimed_at: datetime
    last_run_at: datetime | None
    """When a tick of it last ran, and by which replica (``last_run_by``)."""
    last_run_by: str | None
    next_run_at: datetime | None
    """Its next tick after now (None: a schedule with none left)."""
    missed: int
    """Ticks that passed without running: skipped as late, or dropped while no replica was
    up (counted when the next one is claimed)."""
    overdue: int
    """Ticks due since the last claim that nobody has claimed yet, ``OVERDUE_SLACK`` seconds
    after their time: no replica runs it now (a worker down, or the task removed)."""


def periodic_info(row: Mapping[str, Any]) -> PeriodicInfo:
    """A row of ``list_periodic`` with what its schedule says of now."""
    now: datetime = row["now"]
    try:
        schedule: Schedule | None = from_spec(row["schedule"] or "")
    except ValueError:  # a row from before schedules were recorded
        schedule = None
    last_tick = next_run = None
    overdue = 0
    if schedule is not None:
        last = schedule.tick(row["period"])
        last_tick = last.at
        with contextlib.suppress(ValueError):
            next_run = schedule.next_after(now).at
        latest = schedule.latest(now - timedelta(seconds=OVERDUE_SLACK))
        if latest is not None and latest.key > last.key:
            overdue = 1 + schedule.ticks_between(last.key, latest.key, MISSED_COUNTED)
    return PeriodicInfo(
        name=row["name"],
        schedule=row["schedule"] or "",
        last_tick_at=last_tick,
        last_claimed_at=row["claimed_at"],
        last_run_at=row["last_run_at"],
        last_run_by=row["last_run_by"],
        next_run_at=next_run,
        missed=row["missed"],
        overdue=overdue,
    )


@dual
def list_periodic() -> Steps[list[PeriodicInfo]]:
    """Every periodic task some replica has claimed, by name."""
    result = yield Query(_Q["list_periodic"], prepare=PLAN_EACH_TIME)
    columns = (
        "name",
        "schedule",
        "period",
        "claimed_at",
        "claimed_by",
        "last_run_at",
        "last_run_by",
        "missed",
        "now",
    )
    return [periodic_info(dict(zip(columns, r, strict=True))) for r in result.rows]


async def _never() -> None:
    """Stands in for a task's function while its schedule is checked."""


def _log_claim(
    task: PeriodicTask, tick: Tick, now: datetime, outcome: Outcome, previous: int | None
) -> None:
    at, late_s = tick.at.isoformat(), (now - tick.at).total_seconds()
    if outcome == "skipped":
        log.info(
            "periodic task %s: skipped tick %s, claimed %.1f s after it (grace %g s); "
            "it runs again at its next tick",
            task.name,
            at,
            late_s,
            task.grace,
        )
        return
    if outcome == "recorded":
        log.debug("periodic task %s: first claim under its schedule, at tick %s", task.name, at)
        return
    late = task.grace is not None and is_late(tick, now, task.grace)
    before = task.schedule.latest(tick.at - timedelta(microseconds=1))
    dropped = previous is not None and before is not None and previous < before.key
    if late or dropped:
        log.info(
            "periodic task %s: ticks passed while no replica claimed them; running the "
            "latest, %s, once (%.1f s after it), the older ones not at all",
            task.name,
            at,
            late_s,
        )


__all__ = [
    "Claim",
    "Periodic",
    "PeriodicInfo",
    "PeriodicTask",
    "list_periodic",
]
