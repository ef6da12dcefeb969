"""Fleet-wide concurrency limits: at most N jobs of a queue run at once across every worker.

A limit is a row (``pgenough.queue_limits``, ``sql/limits.sql``). The plain claim takes
nothing of a limited queue and says it is limited; its workers then claim it with
``queue.claim_limited``, one statement calling ``pgenough.claim_limited`` (migration 0007): the
acknowledgements, a transaction-level advisory lock per queue (one claimer at a time across
the fleet), then the claim, which counts the queue's running jobs with a snapshot taken after
the lock (each statement of a volatile function takes its own) and claims at most what the
limit leaves. So the limit is exact: the count is the jobs table itself, and a worker killed with
its jobs running keeps its slots until the rescuer takes them back when their leases expire.

Each worker's own ``concurrency`` still bounds what it runs; the limit bounds the fleet. A
task that needs its own limit gets its own queue (``@app.task(queue="partner-api")``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pgenough.core._sql import PLAN_EACH_TIME, load
from pgenough.core.queue import JOBS_CHANNEL
from pgenough.core.statements import Query, Steps, dual
from pgenough.core.worker.config import MAX_CONCURRENCY

_Q = load("limits")


@dataclass(frozen=True)
class QueueLimit:
    """A queue's fleet-wide limit: at most ``max_running`` of its jobs run at once."""

    queue: str
    max_running: int
    set_at: datetime


@dual
def set_queue_limit(queue: str, running: int) -> Steps[None]:
    """Let at most ``running`` jobs of ``queue`` run at once across every worker, from each
    worker's next claim; its workers are woken on commit."""
    if not queue:
        raise ValueError("a queue name is needed")
    if not 1 <= running <= MAX_CONCURRENCY:
        raise ValueError(f"the limit must be 1 to {MAX_CONCURRENCY}")
    params = {"queue": queue, "running": running, "channel": JOBS_CHANNEL}
    yield Query(_Q["set_queue_limit"], params, prepare=PLAN_EACH_TIME)


@dual
def clear_queue_limit(queue: str) -> Steps[bool]:
    """Lift ``queue``'s limit (its workers woken on commit); True if it had one."""
    params = {"queue": queue, "channel": JOBS_CHANNEL}
    result = yield Query(_Q["clear_queue_limit"], params, prepare=PLAN_EACH_TIME)
    return bool(result.rows)


@dual
def queue_limits() -> Steps[list[QueueLimit]]:
    """The queues with a limit, by name."""
    result = yield Query(_Q["queue_limits"], record=QueueLimit)
    limits: list[QueueLimit] = result.rows
    return limits


__all__ = ["QueueLimit", "clear_queue_limit", "queue_limits", "set_queue_limit"]
