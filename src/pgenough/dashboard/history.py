"""The queues' throughput and backlog over time, as the overview draws them: a window of
``WINDOWS`` (an hour of minutes, 6 h of 5 minutes, 24 h of 15 minutes, a week of 2 hours: at
most 96 points a chart, however many queues), of every queue together or of one, read
through the core's ``queue_trend`` (the workers' per-minute counts and the backlog sampled
once a minute, kept for ``PGENOUGH_HISTORY_RETENTION``); and the numbers beside the charts.

The live overview carries ``DEFAULT``'s history of every queue in each snapshot; a page
showing another window or one queue reads ``/api/history`` (``pages.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pgenough.core.admin import QueuePoint, queue_trend
from pgenough.core.db import AsyncConn
from pgenough.dashboard import params


@dataclass(frozen=True)
class Window:
    """A span of history the overview offers: ``name`` in its query string (``?window=6h``)."""

    name: str
    label: str
    seconds: float
    step: float
    """Seconds of one bucket: a bar of the throughput chart, a point of the backlog's."""
    per: str
    """One bucket, in words: the charts are "per minute", "per 5 min"..."""


WINDOWS: Final = (
    Window("1h", "1 h", 3600.0, 60.0, "minute"),
    Window("6h", "6 h", 6 * 3600.0, 300.0, "5 min"),
    Window("24h", "24 h", 24 * 3600.0, 900.0, "15 min"),
    Window("7d", "7 d", 7 * 24 * 3600.0, 2 * 3600.0, "2 h"),
)
DEFAULT: Final = WINDOWS[0]


def window_param(raw: str) -> Window:
    """The window a query string names (empty: ``DEFAULT``); a 400 page for any other."""
    value = params.text("window", raw).lower()
    if not value:
        return DEFAULT
    for window in WINDOWS:
        if window.name == value:
            return window
    names = ", ".join(w.name for w in WINDOWS)
    raise params.bad(f"window must be one of {names}, not {value!r}")


@dataclass(frozen=True)
class History:
    """One series (``queue``, or every queue when ``""``) over a window, and its summary."""

    window: str
    label: str
    seconds: float
    step: float
    per: str
    queue: str
    points: list[QueuePoint]
    """Every bucket of the window, oldest first: the current one last."""
    completed: int
    """Jobs completed in the window (summed over the buckets), likewise the next two."""
    failed: int
    dead: int
    sampled_at: datetime | None
    """The bucket of the latest backlog sample (None: none in the window); its depths follow."""
    ready: int | None
    running: int | None
    oldest_ready_age: float | None
    peak_ready: int | None
    """The largest sampled in the window, likewise the next."""
    peak_oldest_ready_age: float | None

    @classmethod
    def of(cls, window: Window, queue: str, points: list[QueuePoint]) -> History:
        sampled = [p for p in points if p.ready is not None]
        last = sampled[-1] if sampled else None
        return cls(
            window=window.name,
            label=window.label,
            seconds=window.seconds,
            step=window.step,
            per=window.per,
            queue=queue,
            points=points,
            completed=sum(p.completed for p in points),
            failed=sum(p.failed for p in points),
            dead=sum(p.dead for p in points),
            sampled_at=None if last is None else last.at,
            ready=None if last is None else last.ready,
            running=None if last is None else last.running,
            oldest_ready_age=None if last is None else last.oldest_ready_age,
            peak_ready=max((p.ready for p in sampled if p.ready is not None), default=None),
            peak_oldest_ready_age=max(
                (p.oldest_ready_age for p in sampled if p.oldest_ready_age is not None),
                default=None,
            ),
        )


async def read_history(conn: AsyncConn, window: Window = DEFAULT, queue: str = "") -> History:
    """``queue``'s history (every queue's when ``""``) over ``window``, on ``conn``."""
    points = await queue_trend(conn, window=window.seconds, step=window.step, queue=queue or None)
    return History.of(window, queue, points)
