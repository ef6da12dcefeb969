"""The runs of the plan service: one row of ``plans.runs`` per fetch of one provider's
snapshot. This module runs every statement on that table (``sql/runs.sql``) and owns its
records:

- ``RunStatus``: ``RUNNING`` → ``STAGED`` → ``PROCESSED``, or ``RUNNING`` → ``FAILED`` (the
  database's ``plans.run_status``; a test checks the two agree);
- ``RunSummary``, a run in a list, and ``Run``, one run whole (``plans.inspect.RunDetail``
  adds its failed rows and chunk jobs); ``ProviderSummary`` and ``ThroughputPoint`` for the
  overview; the small results of the transitions (``FailedRun``, ``ProcessedRun``).

Rows are read by name into these records; tests/plan_service/ingest/test_runs.py pins each
statement's
SELECT or RETURNING list to its record. Every function runs on the caller's connection, in
the caller's transaction: fetch and process combine a run's transition with its staging table
(``store``) and its notification (``events``) in one.

Light on purpose (psycopg and the core only, no httpx or lxml), so that the command line and
the dashboard may import ``RunStatus`` in an installation without the ``service`` extra.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from psycopg import sql
from psycopg.rows import class_row

from pgenough.core.db import PLAN_EACH_TIME, AsyncConn, named_queries

_Q = named_queries("pgenough_plans.ingest", "runs")


class RunStatus(StrEnum):
    """Where a run is in its life (``plans.run_status``, in the same order)."""

    RUNNING = "RUNNING"
    """Streaming the snapshot into its staging table."""
    STAGED = "STAGED"
    """Sealed: its chunk jobs are queued."""
    PROCESSED = "PROCESSED"
    """Its last chunk is applied (or it had no plans)."""
    FAILED = "FAILED"
    """Ended with a reason; nothing of it reached ``plans``."""

    @classmethod
    def lookup(cls, text: str) -> RunStatus | None:
        """The status spelled ``text``, in any case; None if there is none."""
        return next((s for s in cls if s == text.upper()), None)

    @classmethod
    def choices(cls) -> str:
        """The statuses, for messages: "RUNNING, STAGED, PROCESSED, FAILED"."""
        return ", ".join(cls)


@dataclass(frozen=True)
class RunSummary:
    """A run in a list (``run_summary_columns``)."""

    id: int
    provider: str
    status: RunStatus
    started_at: datetime
    finished_at: datetime | None
    duration: float
    """Seconds from start to PROCESSED or FAILED, or until now while in progress."""
    bytes: int
    plans_staged: int
    plans_skipped: int
    plans_duplicate: int
    """Staged listings of a plan the snapshot had already listed (the last one counts)."""
    plans_written: int
    rows_failed: int
    chunks_total: int | None
    chunks_done: int
    reason: str | None

    def __post_init__(self) -> None:
        # Read as text: the record holds the enum, whatever the row factory passed.
        object.__setattr__(self, "status", RunStatus(self.status))


@dataclass(frozen=True)
class Run(RunSummary):
    """One run whole: its summary and ``run_detail_columns``."""

    url: str
    owner: str
    heartbeat_at: datetime
    staged_at: datetime | None
    processed_at: datetime | None
    failed_at: datetime | None
    variant: str | None
    attempts: list[dict[str, Any]]
    """Every HTTP attempt of the fetch: status, error, timings (``provider.Attempt``)."""
    skip_samples: list[dict[str, Any]]
    """The first records the parser skipped, with why."""
    phase: str | None
    """What the fetch was last doing ("streaming the body (attempt 1 of 4)"); while RUNNING,
    what it is doing."""


@dataclass(frozen=True)
class ProviderSummary:
    """A provider in the overview: its newest run, its last success, its recent failures."""

    provider: str
    last_run_id: int
    last_status: RunStatus
    last_started_at: datetime
    last_age: float
    """Seconds since the newest run started."""
    plans_staged: int
    plans_skipped: int
    plans_written: int
    rows_failed: int
    last_reason: str | None
    last_success_at: datetime | None
    """When the newest PROCESSED run finished; None if none ever did."""
    throughput: float | None
    """Plans per second of the newest PROCESSED run, fetch start to last chunk."""
    runs_failed: int
    """Runs of this provider that failed in the window."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "last_status", RunStatus(self.last_status))


@dataclass(frozen=True)
class ThroughputPoint:
    minute: datetime
    plans: int


@dataclass(frozen=True)
class FailedRun:
    """A run failed by a sweep (orphaned or stale), with why."""

    id: int
    provider: str
    reason: str


@dataclass(frozen=True)
class ProcessedRun:
    """What a run that just became PROCESSED wrote."""

    plans_written: int
    rows_failed: int


def _with_columns(name: str) -> sql.Composed:
    """Statement ``name`` with the read models' column lists spliced in."""
    return sql.SQL(_Q[name]).format(
        summary=sql.SQL(_Q["run_summary_columns"]), detail=sql.SQL(_Q["run_detail_columns"])
    )


STATEMENTS: Final[dict[str, sql.Composed]] = {
    name: _with_columns(name) for name in _Q if not name.endswith("_columns")
}
"""Every statement of this module, ready to run (the column fragments spliced in)."""


# -- a run's life ------------------------------------------------------------------------------


async def open_run(conn: AsyncConn, *, provider: str, url: str, owner: str) -> int:
    """A new RUNNING run; its id."""
    cur = await conn.execute(
        STATEMENTS["open_run"], {"provider": provider, "url": url, "owner": owner}
    )
    row = await cur.fetchone()
    assert row is not None  # an INSERT ... RETURNING
    return int(row[0])


async def fail_orphaned_runs(conn: AsyncConn, provider: str) -> list[FailedRun]:
    """Fail ``provider``'s RUNNING runs: call while holding its lock (their owner lost it)."""
    async with conn.cursor(row_factory=class_row(FailedRun)) as cur:
        await cur.execute(
            STATEMENTS["fail_orphaned_runs"], {"provider": provider}, prepare=PLAN_EACH_TIME
        )
        return await cur.fetchall()


async def fail_stale_runs(conn: AsyncConn, stale_after: float) -> list[FailedRun]:
    """Fail the RUNNING runs not heartbeating for ``stale_after`` seconds, any provider's."""
    async with conn.cursor(row_factory=class_row(FailedRun)) as cur:
        await cur.execute(
            STATEMENTS["fail_stale_runs"], {"stale_after": stale_after}, prepare=PLAN_EACH_TIME
        )
        return await cur.fetchall()


async def heartbeat(
    conn: AsyncConn, run_id: int, *, bytes: int, staged: int, skipped: int, phase: str
) -> bool:
    """Record a RUNNING run's progress and phase; False if it is no longer RUNNING."""
    cur = await conn.execute(
        STATEMENTS["heartbeat_run"],
        {"id": run_id, "bytes": bytes, "staged": staged, "skipped": skipped, "phase": phase},
        prepare=PLAN_EACH_TIME,
    )
    return await cur.fetchone() is not None


async def record_attempt(conn: AsyncConn, run_id: int, attempt: dict[str, Any]) -> None:
    """Append one HTTP attempt (``provider.Attempt.as_json()``) to the run."""
    await conn.execute(
        STATEMENTS["record_attempt"],
        {"id": run_id, "attempt": json.dumps(attempt)},
        prepare=PLAN_EACH_TIME,
    )


async def seal_run(
    conn: AsyncConn,
    run_id: int,
    *,
    bytes: int,
    variant: str | None,
    staged: int,
    skipped: int,
    duplicates: int,
    samples: str,
    chunks: int,
) -> None:
    """RUNNING → STAGED with the snapshot's counts (``samples``: the skip samples as JSON)."""
    await conn.execute(
        STATEMENTS["seal_run"],
        {
            "id": run_id,
            "bytes": bytes,
            "variant": variant,
            "staged": staged,
            "skipped": skipped,
            "duplicates": duplicates,
            "samples": samples,
            "chunks": chunks,
        },
        prepare=PLAN_EACH_TIME,
    )


async def fail_run(
    conn: AsyncConn,
    run_id: int,
    *,
    provider: str,
    owner: str,
    reason: str,
    bytes: int,
    staged: int,
    skipped: int,
    samples: str,
) -> bool:
    """RUNNING → FAILED with ``reason`` and what the run had done; False when no RUNNING run
    of ``provider`` opened by ``owner`` has that id (someone else failed it, or after a
    failover the id is another run's)."""
    cur = await conn.execute(
        STATEMENTS["fail_run"],
        {
            "id": run_id,
            "provider": provider,
            "owner": owner,
            "reason": reason,
            "bytes": bytes,
            "staged": staged,
            "skipped": skipped,
            "samples": samples,
        },
        prepare=PLAN_EACH_TIME,
    )
    return await cur.fetchone() is not None


async def fail_staged_run(conn: AsyncConn, run_id: int, *, reason: str) -> bool:
    """STAGED → FAILED with ``reason``; False if the run was no longer STAGED."""
    cur = await conn.execute(
        STATEMENTS["fail_staged_run"], {"id": run_id, "reason": reason}, prepare=PLAN_EACH_TIME
    )
    return await cur.fetchone() is not None


async def chunk_done(conn: AsyncConn, run_id: int, *, written: int, failed: int) -> bool:
    """Count one applied chunk of a STAGED run; True if it was the run's last."""
    cur = await conn.execute(
        STATEMENTS["chunk_done"],
        {"id": run_id, "written": written, "failed": failed},
        prepare=PLAN_EACH_TIME,
    )
    row = await cur.fetchone()
    return row is not None and bool(row[0])


async def mark_processed(conn: AsyncConn, run_id: int) -> ProcessedRun | None:
    """STAGED → PROCESSED; what the run wrote, or None if it was not STAGED."""
    async with conn.cursor(row_factory=class_row(ProcessedRun)) as cur:
        await cur.execute(STATEMENTS["mark_processed"], {"id": run_id}, prepare=PLAN_EACH_TIME)
        return await cur.fetchone()


# -- reading runs ------------------------------------------------------------------------------


async def get_run(conn: AsyncConn, run_id: int) -> Run | None:
    """One run whole, or None."""
    async with conn.cursor(row_factory=class_row(Run)) as cur:
        await cur.execute(STATEMENTS["get_run"], {"id": run_id}, prepare=PLAN_EACH_TIME)
        return await cur.fetchone()


async def list_runs(
    conn: AsyncConn,
    *,
    status: str | None = None,
    provider: str | None = None,
    limit: int = 50,
    before: int | None = None,
) -> list[RunSummary]:
    """Runs newest first, filtered by status (any case) and provider; page with ``before``
    (an id)."""
    wanted = None if status is None else RunStatus.lookup(status)
    if status is not None and wanted is None:
        raise ValueError(f"status must be one of {RunStatus.choices()}")
    if limit < 1:
        raise ValueError("limit must be >= 1")
    params = {
        "status": wanted and wanted.value,
        "provider": provider,
        "limit": limit,
        "before": before,
    }
    async with conn.cursor(row_factory=class_row(RunSummary)) as cur:
        await cur.execute(STATEMENTS["list_runs"], params)
        return await cur.fetchall()


async def failed_runs(conn: AsyncConn, *, window: float, limit: int = 50) -> list[RunSummary]:
    """Runs that failed in the last ``window`` seconds, the most recent failure first."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    async with conn.cursor(row_factory=class_row(RunSummary)) as cur:
        await cur.execute(STATEMENTS["failed_runs_since"], {"window": window, "limit": limit})
        return await cur.fetchall()


async def count_failed_since(conn: AsyncConn, window: float) -> int:
    """How many runs failed in the last ``window`` seconds."""
    cur = await conn.execute(STATEMENTS["count_failed_since"], {"window": window})
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def provider_names(conn: AsyncConn) -> list[str]:
    """Every provider that has at least one run, in name order."""
    cur = await conn.execute(STATEMENTS["provider_names"])
    return [str(row[0]) for row in await cur.fetchall()]


async def provider_summaries(
    conn: AsyncConn, names: list[str], window: float
) -> list[ProviderSummary]:
    """Each of ``names``: its newest run, its last success, its failures in the window."""
    async with conn.cursor(row_factory=class_row(ProviderSummary)) as cur:
        await cur.execute(STATEMENTS["providers"], {"window": window, "names": names})
        return await cur.fetchall()


async def throughput(conn: AsyncConn, window: float) -> list[ThroughputPoint]:
    """Plans processed per minute over the last ``window`` seconds."""
    async with conn.cursor(row_factory=class_row(ThroughputPoint)) as cur:
        await cur.execute(STATEMENTS["throughput"], {"window": window})
        return await cur.fetchall()
