"""The overview's read model: every queue's jobs by state, its oldest ready job's age, its
jobs done and its failures of the last window, the same for all queues together, the history
of all of them over the last hour (``history.py``), how many workers are alive and periodic
tasks overdue, and the extensions' sections.

Read through the core's public calls (``queue_stats``, ``queue_history``,
``job_failures_by_queue``, ``queue_trend``, ``list_workers``, ``list_periodic``) and each
extension's ``Section.read``, on one connection; the totals are summed here, without I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, Final

from pgenough.core.admin import (
    JOB_STATES,
    JobFailures,
    PeriodicInfo,
    QueuePoint,
    QueueStats,
    WorkerInfo,
    job_failures_by_queue,
    list_periodic,
    list_workers,
    queue_history,
    queue_stats,
)
from pgenough.core.db import AsyncConn, named_queries
from pgenough.dashboard.extension import Section
from pgenough.dashboard.history import History, read_history

_Q = named_queries("pgenough.dashboard", "overview")

ALL_QUEUES: Final = ""
"""The queue name of the totals row."""
NO_FAILURES: Final = JobFailures(0, 0)
NO_JOBS: Final = QueueStats("", 0, 0, 0, 0, 0, 0.0)


@dataclass(frozen=True)
class QueueView(QueueStats):
    """One queue (or all of them, ``queue == ALL_QUEUES``) as the overview shows it: its
    depths (``QueueStats``), and what failed and was done in the window."""

    dead_recently: int = 0
    """Jobs dead-lettered in the window."""
    attempts_failed: int = 0
    """Failed attempts recorded in the window (on jobs still kept)."""
    done: int = 0
    """Jobs completed in the window (the workers' counts: completed jobs are deleted)."""

    @classmethod
    def of(cls, stats: QueueStats, failures: JobFailures, done: int) -> QueueView:
        depths = {f.name: getattr(stats, f.name) for f in fields(QueueStats)}
        return cls(
            **depths,
            dead_recently=failures.dead,
            attempts_failed=failures.attempts_failed,
            done=done,
        )


@dataclass(frozen=True)
class Fleet:
    """What runs the queues, in numbers: the overview's links to the workers and the periodic
    tasks."""

    workers_alive: int
    workers_gone: int
    """Registered, and no heartbeat for ``ALIVE_AFTER``: died without stopping."""
    periodic: int
    periodic_overdue: int
    """Periodic tasks with ticks due and unclaimed: no replica runs them."""

    @classmethod
    def of(cls, workers: Sequence[WorkerInfo], periodic: Sequence[PeriodicInfo]) -> Fleet:
        alive = sum(w.alive for w in workers)
        overdue = sum(p.overdue > 0 for p in periodic)
        return cls(alive, len(workers) - alive, len(periodic), overdue)


@dataclass(frozen=True)
class Overview:
    at: datetime
    """The database's clock when it was read."""
    window: float
    """Seconds of failures counted."""
    queues: list[QueueView]
    total: QueueView
    history: History
    """Every queue's throughput and backlog over the last hour (``history.DEFAULT``)."""
    fleet: Fleet
    sections: dict[str, Any] = field(default_factory=dict)
    """Each extension section's data, by the section's name."""


def totals(queues: Sequence[QueueView]) -> QueueView:
    """Every queue together: the counts summed, the oldest ready age the largest."""

    def total(name: str) -> int:
        return sum(int(getattr(q, name)) for q in queues)

    return QueueView(
        ALL_QUEUES,
        total("ready"),
        total("scheduled"),
        total("running"),
        total("dead"),
        total("cancelled"),
        max((q.oldest_ready_age for q in queues if q.ready), default=0.0),
        dead_recently=total("dead_recently"),
        attempts_failed=total("attempts_failed"),
        done=total("done"),
    )


def merge(
    stats: Sequence[QueueStats],
    failures: dict[str, JobFailures],
    done: Sequence[QueuePoint] = (),
) -> list[QueueView]:
    """A row per queue that has jobs (a queue's failing jobs are among them) or history in
    the window (``done``: ``queue_history``'s points; a queue that drained still shows what it
    did), by name."""
    completed: dict[str, int] = {}
    for point in done:
        completed[point.queue] = completed.get(point.queue, 0) + point.completed
    by_queue = {s.queue: s for s in stats}
    return [
        QueueView.of(
            by_queue.get(name, replace(NO_JOBS, queue=name)),
            failures.get(name, NO_FAILURES),
            completed.get(name, 0),
        )
        for name in sorted(by_queue.keys() | completed.keys())
    ]


async def database_now(conn: AsyncConn) -> datetime:
    """The database's clock: what a page's ages and "ago"s are read against (the core's
    reads measure theirs by it too)."""
    cur = await conn.execute(_Q["now"])
    row = await cur.fetchone()
    assert row is not None  # SELECT now(): always one row
    found: datetime = row[0]
    return found


async def read_overview(
    conn: AsyncConn, window: float, sections: Sequence[Section] = ()
) -> Overview:
    """The overview as of now, on ``conn``: queues, their failures of the last ``window``
    seconds, and ``sections``' data."""
    at = await database_now(conn)
    queues = merge(
        await queue_stats(conn),
        await job_failures_by_queue(conn, window),
        await queue_history(conn, window=window),
    )
    history = await read_history(conn)
    fleet = Fleet.of(await list_workers(conn), await list_periodic(conn))
    data = {s.name: await s.read(conn, window) for s in sections}
    return Overview(at, window, queues, totals(queues), history, fleet, data)


def state_totals(counts: Sequence[QueueStats], queue: str | None = None) -> dict[str, int]:
    """Jobs per state of ``JOB_STATES`` (of one ``queue``, or all) from ``queue_stats``: the
    scheduled among the ready, as ``list_jobs(state="ready")`` lists them."""
    totals: dict[str, int] = dict.fromkeys(JOB_STATES, 0)
    for c in counts:
        if queue is None or c.queue == queue:
            for state, n in c.by_state().items():
                totals[state] += n
    return totals
