"""Fleet-wide limits: at most N jobs of a queue run at once across every worker, and at most
M of them start in any T seconds (a rate).

A limit is a row (``pgenough.queue_limits``, ``sql/limits.sql``). The plain claim takes
nothing of a limited queue and says it is limited; its workers then claim it with
``queue.claim_limited``, one statement calling ``pgenough.claim_limited`` (migration 0006): the
acknowledgements, a transaction-level advisory lock per queue (one claimer at a time across
the fleet), then the claim, which counts the queue's running jobs with a snapshot taken after
the lock (each statement of a volatile function takes its own) and claims at most what the
limit leaves. A rate counts the queue's starts within its interval (``pgenough.queue_starts``,
under the same lock: a sliding window, exact), and when it holds jobs back the claim says
when the next start is allowed, so that the worker looks again then; the jobs wait, ready,
neither failed nor retried. So the limits are exact: the count is the jobs table itself (and
the starts' own), and a worker killed with its jobs running keeps its slots until the rescuer
takes them back when their leases expire.

Each worker's own ``concurrency`` still bounds what it runs; the limit bounds the fleet. A
task that needs its own limit gets its own queue (``@app.task(queue="partner-api")``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pgenough.core._sql import PLAN_EACH_TIME, load
from pgenough.core.queue import JOBS_CHANNEL
from pgenough.core.statements import Query, Steps, dual
from pgenough.core.worker.config import MAX_CONCURRENCY

_Q = load("limits")

MAX_RATE_STARTS: Final = 100_000
"""The most starts a rate may allow per interval: each start within the interval is a row
(``pgenough.queue_starts``) that the limited claim counts."""
MAX_RATE_INTERVAL: Final = 86_400.0
"""The longest interval of a rate, in seconds (a day)."""


@dataclass(frozen=True)
class QueueLimit:
    """A queue's fleet-wide limits: at most ``max_running`` of its jobs run at once, at most
    ``rate_count`` start in any ``rate_interval`` seconds (None: not limited so)."""

    queue: str
    max_running: int | None
    rate_count: int | None
    rate_interval: float | None
    set_at: datetime


@dual
def set_queue_limit(
    queue: str, running: int | None = None, *, starts: int | None = None, per: float | None = None
) -> Steps[None]:
    """Let at most ``running`` jobs of ``queue`` run at once across every worker, and (with
    ``starts`` and ``per``) at most ``starts`` of them start in any ``per`` seconds; either
    or both. Replaces the queue's limits, from each worker's next claim; its workers are
    woken on commit."""
    check_limits(queue, running, starts, per)
    params = {
        "queue": queue,
        "running": running,
        "starts": starts,
        "per": per,
        "channel": JOBS_CHANNEL,
    }
    yield Query(_Q["set_queue_limit"], params, prepare=PLAN_EACH_TIME)


def check_limits(queue: str, running: int | None, starts: int | None, per: float | None) -> None:
    """A ``ValueError`` saying what is wrong with these limits (``set_queue_limit``'s
    arguments), if anything: the one check of them, which ``pgenough limit`` makes too."""
    if not queue:
        raise ValueError("a queue name is needed")
    if running is None and starts is None:
        raise ValueError("give a limit: running, or starts and per, or both")
    if running is not None and not 1 <= running <= MAX_CONCURRENCY:
        raise ValueError(f"the limit must be 1 to {MAX_CONCURRENCY}")
    if (starts is None) != (per is None):
        raise ValueError("a rate is starts per seconds: give both")
    if starts is not None and per is not None:
        if not 1 <= starts <= MAX_RATE_STARTS:
            raise ValueError(f"a rate's starts must be 1 to {MAX_RATE_STARTS}")
        if not 0 < per <= MAX_RATE_INTERVAL:
            raise ValueError(f"a rate's seconds must be more than 0, at most {MAX_RATE_INTERVAL:g}")


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


__all__ = [
    "MAX_RATE_INTERVAL",
    "MAX_RATE_STARTS",
    "QueueLimit",
    "check_limits",
    "clear_queue_limit",
    "queue_limits",
    "set_queue_limit",
]
