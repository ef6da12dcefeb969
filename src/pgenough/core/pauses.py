"""Pausing a queue across the fleet: while it is paused, no worker claims its jobs.

The pause is a row (``pgenough.queue_pauses``, ``sql/pauses.sql``) that the claim statement
itself looks for (``sql/queue.sql``), so it holds from the next claim of every worker, whether
or not its listener is connected, and a worker that starts while the queue is paused claims
nothing either. What runs when the queue is paused runs on to its end (cancel a job to stop
it); enqueueing goes on, so the backlog grows and is visible. Resuming deletes the row and
notifies the queue in the same transaction, so idle workers claim at once on commit.

Like every producer-side call, these take a sync or an async connection, and run in its
transaction (``statements.py``): a pause commits with the caller's own writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pgenough.core._sql import PLAN_EACH_TIME, load
from pgenough.core.queue import JOBS_CHANNEL
from pgenough.core.statements import Query, Steps, dual

_Q = load("pauses")


@dataclass(frozen=True)
class QueuePause:
    """A paused queue: since when, and why (as its pauser said; None when not said)."""

    queue: str
    paused_at: datetime
    reason: str | None


@dual
def pause_queue(queue: str, *, reason: str | None = None) -> Steps[bool]:
    """Pause ``queue`` across every worker from their next claim; True if this call paused
    it, False if it already was (its first pause, and reason, stand)."""
    if not queue:
        raise ValueError("a queue name is needed")
    params = {"queue": queue, "reason": reason}
    result = yield Query(_Q["pause_queue"], params, prepare=PLAN_EACH_TIME)
    return bool(result.rows)


@dual
def resume_queue(queue: str) -> Steps[bool]:
    """Resume ``queue``: its idle workers are notified and claim at once on commit; True if
    it was paused, False if it was not."""
    params = {"queue": queue, "channel": JOBS_CHANNEL}
    result = yield Query(_Q["resume_queue"], params, prepare=PLAN_EACH_TIME)
    return bool(result.rows)


@dual
def paused_queues() -> Steps[list[QueuePause]]:
    """The paused queues, by name."""
    result = yield Query(_Q["paused_queues"], record=QueuePause)
    pauses: list[QueuePause] = result.rows
    return pauses


__all__ = ["QueuePause", "pause_queue", "paused_queues", "resume_queue"]
