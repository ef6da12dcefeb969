"""Background duties that keep the queue healthy: the rescuer, the cleaner and the vacuum.

Each duty is one family of SQL statements run in ``LIMIT`` batches, each batch in its own
short transaction under a statement timeout. Workers register them as periodic tasks, so each
runs once per interval across all replicas, whichever replicas are alive.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgenough.core import history, metrics, queue, registry
from pgenough.core._sql import PLAN_EACH_TIME, load
from pgenough.core.job_states import JobState
from pgenough.core.periodic import Periodic
from pgenough.core.statements import Atomic, Query, Result, Steps, dual

log = logging.getLogger(__name__)
_Q = load("maintenance")

DEFAULT_RESCUE_INTERVAL = 5.0
DEFAULT_CLEAN_INTERVAL = 60.0
DEFAULT_DEAD_RETENTION = 7 * 24 * 3600.0
DEFAULT_MESSAGE_RETENTION = 3600.0
DEFAULT_VACUUM_INTERVAL = 10.0
DEFAULT_VACUUM_DEAD_ROWS = 50_000
DEFAULT_BATCH = 1000
DEFAULT_MAINTENANCE_STATEMENT_TIMEOUT = 10.0
"""Seconds one maintenance batch may run (not the dashboard's queries' timeout)."""
DEFAULT_STATEMENT_TIMEOUT = DEFAULT_MAINTENANCE_STATEMENT_TIMEOUT
"""Deprecated: ``DEFAULT_MAINTENANCE_STATEMENT_TIMEOUT``'s old name."""


@dataclass(frozen=True)
class MaintenanceConfig:
    rescue_interval: float = DEFAULT_RESCUE_INTERVAL
    clean_interval: float = DEFAULT_CLEAN_INTERVAL
    dead_retention: float = DEFAULT_DEAD_RETENTION
    """Seconds dead and cancelled jobs stay visible to operators."""
    message_retention: float = DEFAULT_MESSAGE_RETENTION
    """Seconds large pub/sub payloads stay fetchable by late subscribers."""
    vacuum_interval: float | None = DEFAULT_VACUUM_INTERVAL
    """Seconds between looks at the jobs table's dead rows (None: leave it to autovacuum)."""
    vacuum_dead_rows: int = DEFAULT_VACUUM_DEAD_ROWS
    """Dead rows past which the vacuum duty vacuums the jobs table."""
    history_retention: float = history.DEFAULT_HISTORY_RETENTION
    """Seconds the queues' history (throughput per minute, backlog samples) is kept."""
    sample_interval: float = history.SAMPLE_INTERVAL
    """Seconds between two samples of every queue's backlog (once across all workers)."""
    batch: int = DEFAULT_BATCH
    statement_timeout: float = DEFAULT_MAINTENANCE_STATEMENT_TIMEOUT

    def __post_init__(self) -> None:
        if min(self.rescue_interval, self.clean_interval, self.statement_timeout) <= 0:
            raise ValueError("maintenance intervals and timeouts must be positive")
        if self.vacuum_interval is not None and self.vacuum_interval <= 0:
            raise ValueError("vacuum_interval must be positive (or None)")
        if self.vacuum_dead_rows < 0:
            raise ValueError("vacuum_dead_rows must be >= 0")
        if self.batch < 1 or min(self.dead_retention, self.message_retention) < 0:
            raise ValueError("maintenance batch must be >= 1 and retentions >= 0")
        if self.history_retention < 0 or self.sample_interval <= 0:
            raise ValueError("history_retention must be >= 0 and sample_interval positive")


@dataclass(frozen=True)
class RescueResult:
    retried: int
    dead: int


@dataclass(frozen=True)
class CleanResult:
    jobs_deleted: int
    messages_deleted: int
    history_deleted: int = 0
    """Rows of throughput counts and backlog samples past ``history_retention``."""
    workers_forgotten: int = 0
    """Rows of workers gone (not seen) for ``registry.GONE_RETENTION``."""


def _batched(statement: Query, timeout: float) -> Steps[tuple[int, list[Any]]]:
    """Run a ``LIMIT``-batched statement (its ``limit`` parameter) until a batch comes back
    short, each batch in its own transaction under a statement timeout.

    Returns the rows affected and the rows returned, over all batches.
    """
    affected = 0
    rows: list[Any] = []
    assert statement.params is not None
    limit = int(statement.params["limit"])
    while True:
        result: Result = yield Atomic(_timed(statement, timeout))
        rows.extend(result.rows)
        affected += result.rowcount
        if result.rowcount < limit:
            return affected, rows


def _timed(statement: Query, timeout: float) -> Steps[Result]:
    yield Query(_Q["statement_timeout"], {"ms": f"{int(timeout * 1000)}ms"})
    result: Result = yield statement
    return result


def _timed_steps(steps: Steps[int], timeout: float) -> Steps[int]:
    """``steps`` in the transaction ``Atomic`` opens, under the statement timeout."""
    yield Query(_Q["statement_timeout"], {"ms": f"{int(timeout * 1000)}ms"})
    return (yield from steps)


@dual
def requeue_stuck(config: MaintenanceConfig = MaintenanceConfig()) -> Steps[RescueResult]:
    """Take back every expired claim: retry it, or dead-letter it when attempts are spent."""
    _, rows = yield from _batched(queue.requeue_stuck_batch(config.batch), config.statement_timeout)
    retried = dead = 0
    for job in rows:
        metrics.JOBS_RECLAIMED.labels(job.queue).inc()
        if job.state == JobState.DEAD:
            metrics.JOBS_DEAD.labels(job.queue).inc()
            dead += 1
        else:
            retried += 1
    if rows:
        log.warning("reclaimed %d expired lease(s): %d to retry, %d dead", len(rows), retried, dead)
    return RescueResult(retried=retried, dead=dead)


rescue_expired = requeue_stuck
"""Deprecated: ``requeue_stuck``'s old name (docs/guides/failures.md, "Renamed names")."""


@dual
def clean(config: MaintenanceConfig = MaintenanceConfig()) -> Steps[CleanResult]:
    """Delete dead/cancelled jobs, stored messages and the queues' history past their
    retention, and forget the workers gone for good."""
    jobs, _ = yield from _batched(
        queue.delete_finished_batch(config.dead_retention, config.batch),
        config.statement_timeout,
    )
    messages, _ = yield from _batched(
        Query(
            _Q["delete_old_messages"],
            {"retention": config.message_retention, "limit": config.batch},
            prepare=PLAN_EACH_TIME,
        ),
        config.statement_timeout,
    )
    old = yield Atomic(
        _timed_steps(
            history.delete_old_history.steps(config.history_retention, config.batch),
            config.statement_timeout,
        )
    )
    gone = yield Atomic(
        _timed_steps(registry.forget_gone_workers.steps(), config.statement_timeout)
    )
    if jobs or messages:
        log.info("cleaned %d finished job(s) and %d stored message(s)", jobs, messages)
    return CleanResult(
        jobs_deleted=jobs, messages_deleted=messages, history_deleted=old, workers_forgotten=gone
    )


@dataclass(frozen=True)
class VacuumResult:
    dead_rows: int
    """The jobs table's dead rows when it looked (``pg_stat_user_tables``)."""
    vacuumed: bool


@dual
def vacuum_jobs(config: MaintenanceConfig = MaintenanceConfig()) -> Steps[VacuumResult]:
    """VACUUM the jobs table when it holds ``vacuum_dead_rows`` dead rows or more.

    Every job leaves three dead row versions (the claim updates it, the completion deletes
    it): at a worker's sustained rate, tens of thousands a second (docs/benchmarks/history.md,
    "The vacuum duty, A/B"). Autovacuum looks at a database at most once per
    ``autovacuum_naptime`` (a minute by default), so between two of its runs the table grows
    by millions of dead rows, past shared_buffers, and every claim and completion touches more
    pages. This duty looks far more often and vacuums only the jobs table. ``SKIP_LOCKED``: a
    vacuum already running (autovacuum's) is not waited for. Run it in autocommit mode: VACUUM
    cannot run inside a transaction.
    """
    dead = yield from queue.dead_rows()
    if dead < config.vacuum_dead_rows:
        return VacuumResult(dead, vacuumed=False)
    yield from queue.vacuum()
    metrics.JOBS_VACUUMS.inc()
    log.debug("vacuumed pgenough.jobs (%d dead rows)", dead)
    return VacuumResult(dead, vacuumed=True)


def register(periodic: Periodic, pool: AsyncConnectionPool, config: MaintenanceConfig) -> None:
    """Schedule the rescuer, the cleaner, the vacuum and the backlog's sampling on
    ``periodic`` (each once per interval overall)."""

    async def rescue() -> None:
        async with pool.connection() as conn:
            await requeue_stuck(conn, config)

    async def cleanup() -> None:
        async with pool.connection() as conn:
            await clean(conn, config)

    async def vacuum() -> None:
        async with pool.connection() as conn:
            await vacuum_jobs(conn, config)

    async def sample() -> None:
        async with pool.connection() as conn:
            await history.sample_queues(conn)

    periodic.every(config.rescue_interval, "pgenough.rescue", rescue)
    periodic.every(config.clean_interval, "pgenough.clean", cleanup)
    if config.vacuum_interval is not None:
        periodic.every(config.vacuum_interval, "pgenough.vacuum", vacuum)
    periodic.every(config.sample_interval, "pgenough.sample", sample)


__all__ = [
    "CleanResult",
    "MaintenanceConfig",
    "RescueResult",
    "VacuumResult",
    "clean",
    "requeue_stuck",
    "rescue_expired",
    "vacuum_jobs",
]
