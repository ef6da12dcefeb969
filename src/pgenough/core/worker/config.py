"""A worker's configuration, its defaults and its bounds, in one place: ``WorkerConfig`` (one
per queue), and what every command that starts a worker (``pgenough worker run``,
``manage.py pgenough worker``) and every setting (``pgenough.settings``, the Django
``PGENOUGH`` dict) parses and bounds its options with."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from pgenough.core import maintenance
from pgenough.core.queue import DEFAULT_QUEUE
from pgenough.core.retry import Backoff

DEFAULT_CONCURRENCY: Final = 10
DEFAULT_BATCH_SIZE: Final = 10
DEFAULT_LEASE: Final = 30.0
DEFAULT_POLL_INTERVAL: Final = 2.0
DEFAULT_SHUTDOWN_TIMEOUT: Final = 30.0
DEFAULT_STATS_INTERVAL: Final = 10.0
DEFAULT_UNHANDLED_GRACE: Final = 3600.0

MAX_CONCURRENCY: Final = 10_000
"""The most jobs or chunks a worker runs at once, per queue: the bound of every concurrency
setting and option (each may hold a database connection)."""
MAX_BATCH_SIZE: Final = 1000
"""The most jobs one claim takes (``--batch-size``, ``PGENOUGH_WORKER_BATCH_SIZE``, the
Django worker's ``BATCH_SIZE``): a claim and its acknowledgement carry every id in one
statement, and a batch task's call gets its items in one transaction."""


def parse_queues(values: Iterable[str]) -> dict[str, int | None]:
    """``NAME`` or ``NAME=CONCURRENCY`` each, as ``{name: concurrency or None}``; a
    ``ValueError`` saying what to write instead for a repeated name or a bad concurrency."""
    queues: dict[str, int | None] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not name or name in queues:
            raise ValueError(f"{value!r}: give each queue once, as NAME or NAME=N")
        if sep:
            if not (count.isascii() and count.isdigit()) or not 1 <= int(count) <= MAX_CONCURRENCY:
                raise ValueError(f"{value!r}: the concurrency must be 1 to {MAX_CONCURRENCY}")
            queues[name] = int(count)
        else:
            queues[name] = None
    return queues


@dataclass(frozen=True)
class WorkerConfig:
    queue: str = DEFAULT_QUEUE
    concurrency: int = DEFAULT_CONCURRENCY
    """Jobs whose handlers run at once (a batch counts each of its jobs)."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Most jobs taken by one claim."""
    lease: float = DEFAULT_LEASE
    """Seconds a claim stays ours without a heartbeat; heartbeats come every lease / 3."""
    poll_interval: float = DEFAULT_POLL_INTERVAL
    """Longest idle wait between claims when no notification arrives."""
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    """On stop, how long running handlers may take to finish before they are interrupted."""
    stats_interval: float = DEFAULT_STATS_INTERVAL
    backoff: Backoff = field(default_factory=Backoff)
    maintenance: maintenance.MaintenanceConfig | None = field(
        default_factory=maintenance.MaintenanceConfig
    )
    """Rescuer and cleaner duties (once per interval across workers); None disables them."""
    unhandled_grace: float = DEFAULT_UNHANDLED_GRACE
    """Seconds after its enqueue that a job whose kind no handler of this worker knows is
    still handed back for another worker (its attempt not counted); past them it is
    dead-lettered (docs/guides/tasks.md, "Jobs no task handles")."""

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be 1 to {MAX_CONCURRENCY}")
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be 1 to {MAX_BATCH_SIZE}")
        if min(self.lease, self.poll_interval, self.stats_interval) <= 0:
            raise ValueError("lease, poll_interval and stats_interval must be positive")
        if self.shutdown_timeout < 0 or self.unhandled_grace < 0:
            raise ValueError("shutdown_timeout and unhandled_grace must be >= 0")
