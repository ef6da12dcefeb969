"""The overview's read model: every queue's jobs by state, its oldest ready job's age and its
failures of the last window, the same for all queues together, and the extensions' sections.

Read through the core's public calls (``queue_stats``, ``job_failures_by_queue``) and each
extension's ``Section.read``, on one connection; the totals are summed here, without I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pgenough.core import (
    JOB_STATES,
    AsyncConn,
    JobFailures,
    QueueStats,
    job_failures_by_queue,
    named_queries,
    queue_stats,
)
from pgenough.dashboard.extension import Section

_Q = named_queries("pgenough.dashboard", "overview")

ALL_QUEUES: Final = ""
"""The queue name of the totals row."""
NO_FAILURES: Final = JobFailures(0, 0)


@dataclass(frozen=True)
class QueueView:
    """One queue (or all of them, ``queue == ALL_QUEUES``) as the overview shows it."""

    queue: str
    ready: int
    scheduled: int
    running: int
    dead: int
    cancelled: int
    oldest_ready_age: float
    """Seconds the oldest runnable job has waited; 0 when none is ready."""
    dead_recently: int
    """Jobs dead-lettered in the window."""
    attempts_failed: int
    """Failed attempts recorded in the window (on jobs still kept)."""

    @classmethod
    def of(cls, stats: QueueStats, failures: JobFailures) -> QueueView:
        return cls(
            stats.queue,
            stats.ready,
            stats.scheduled,
            stats.running,
            stats.dead,
            stats.cancelled,
            stats.oldest_ready_age,
            failures.dead,
            failures.attempts_failed,
        )


@dataclass(frozen=True)
class Overview:
    at: datetime
    """The database's clock when it was read."""
    window: float
    """Seconds of failures counted."""
    queues: list[QueueView]
    total: QueueView
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
        total("dead_recently"),
        total("attempts_failed"),
    )


def merge(stats: Sequence[QueueStats], failures: dict[str, JobFailures]) -> list[QueueView]:
    """A row per queue that has jobs (a queue's failing jobs are among them), by name."""
    return [QueueView.of(s, failures.get(s.queue, NO_FAILURES)) for s in stats]


async def read_overview(
    conn: AsyncConn, window: float, sections: Sequence[Section] = ()
) -> Overview:
    """The overview as of now, on ``conn``: queues, their failures of the last ``window``
    seconds, and ``sections``' data."""
    cur = await conn.execute(_Q["now"])
    row = await cur.fetchone()
    assert row is not None  # SELECT now(): always one row
    queues = merge(await queue_stats(conn), await job_failures_by_queue(conn, window))
    data = {s.name: await s.read(conn, window) for s in sections}
    return Overview(row[0], window, queues, totals(queues), data)


def state_totals(counts: Sequence[QueueStats], queue: str | None = None) -> dict[str, int]:
    """Jobs per state of ``JOB_STATES`` (of one ``queue``, or all) from ``queue_stats``: the
    scheduled among the ready, as ``list_jobs(state="ready")`` lists them."""
    totals: dict[str, int] = dict.fromkeys(JOB_STATES, 0)
    for c in counts:
        if queue is None or c.queue == queue:
            for state, n in c.by_state().items():
                totals[state] += n
    return totals
