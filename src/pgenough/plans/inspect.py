"""What operators look at and the few things they may do: the read model behind
``pgenough status``/``runs``/``failures``/``jobs`` and the dashboard, and the repairs both
offer. Single jobs and lists of them are the core's own (``get_job``, ``list_jobs``); this
module adds what only the plan service knows (which run a chunk job belongs to).

Reads are plain queries on ``pgenough.runs`` and ``plan_failures`` (``sql/inspect.sql``),
and the core's public calls for jobs (``queue_stats``, ``job_failures``, ``jobs_by_payload``,
``list_jobs``), returned as frozen dataclasses that turn into JSON with
``pgenough.jsonable.as_json``.
Repairs go only through the core's documented operations (``retry_job``, ``retry_dead``,
``cancel_job``, ``rescue_expired``), each in its own transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import class_row, dict_row

from pgenough.core import (
    JOB_STATES,
    JobRecord,
    QueueStats,
    job_failures,
    jobs_by_payload,
    list_jobs,
    named_queries,
    queue_stats,
)
from pgenough.core.statements import AsyncConn
from pgenough.plans.defaults import RUN_STATUSES
from pgenough.plans.process import CHUNK_KIND, PLANS_QUEUE

_Q = named_queries("pgenough.plans", "inspect")


DEFAULT_WINDOW = 3600.0
ROW_FAILURES_SHOWN = 100


@dataclass(frozen=True)
class ProviderSummary:
    provider: str
    last_run_id: int
    last_status: str
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


@dataclass(frozen=True)
class Failures:
    runs_failed: int
    rows_failed: int
    jobs_dead: int
    job_attempts_failed: int
    """Failed attempts recorded on jobs still in the queue (retrying or dead)."""


@dataclass(frozen=True)
class ThroughputPoint:
    minute: datetime
    plans: int


@dataclass(frozen=True)
class Overview:
    at: datetime
    window: float
    providers: list[ProviderSummary]
    queues: list[QueueStats]
    failures: Failures
    throughput: list[ThroughputPoint]


@dataclass(frozen=True)
class RunSummary:
    id: int
    provider: str
    status: str
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


@dataclass(frozen=True)
class RowFailure:
    seq: int
    base_plan_id: str | None
    plan_id: str | None
    error: str
    at: datetime


@dataclass(frozen=True)
class RunDetail(RunSummary):
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
    row_failures: list[RowFailure] = dataclasses.field(default_factory=list)
    """The first ``ROW_FAILURES_SHOWN`` rows that could not be written."""
    jobs: list[JobRecord] = dataclasses.field(default_factory=list)
    """Chunk jobs still queued: waiting, running, retrying, dead or cancelled."""


async def overview(conn: AsyncConn, window: float = DEFAULT_WINDOW) -> Overview:
    """Providers, queues, failures and throughput over the last ``window`` seconds."""
    params = {"window": window}
    names = await provider_names(conn)
    async with conn.cursor(row_factory=class_row(ProviderSummary)) as cur:
        await cur.execute(_Q["providers"], {**params, "names": names})
        providers = await cur.fetchall()
    async with conn.cursor(row_factory=dict_row) as fcur:
        await fcur.execute(_Q["failures_since"], params)
        row = await fcur.fetchone()
    assert row is not None  # an aggregate: always one row
    at = row.pop("at")
    jobs = await job_failures(conn, window)
    failures = Failures(**row, jobs_dead=jobs.dead, job_attempts_failed=jobs.attempts_failed)
    async with conn.cursor(row_factory=class_row(ThroughputPoint)) as tcur:
        await tcur.execute(_Q["throughput"], params)
        throughput = await tcur.fetchall()
    return Overview(at, window, providers, await queue_stats(conn), failures, throughput)


async def provider_names(conn: AsyncConn) -> list[str]:
    """Every provider that has at least one run, in name order."""
    cur = await conn.execute(_Q["provider_names"])
    return [str(row[0]) for row in await cur.fetchall()]


async def list_runs(
    conn: AsyncConn,
    *,
    status: str | None = None,
    provider: str | None = None,
    limit: int = 50,
    before: int | None = None,
) -> list[RunSummary]:
    """Runs newest first, filtered by status and provider; page with ``before`` (an id)."""
    if status is not None and status.upper() not in RUN_STATUSES:
        raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}")
    if limit < 1:
        raise ValueError("limit must be >= 1")
    params = {
        "status": status.upper() if status else None,
        "provider": provider,
        "limit": limit,
        "before": before,
    }
    async with conn.cursor(row_factory=class_row(RunSummary)) as cur:
        await cur.execute(_Q["list_runs"], params)
        return await cur.fetchall()


async def failed_runs(
    conn: AsyncConn, *, window: float = DEFAULT_WINDOW, limit: int = 50
) -> list[RunSummary]:
    """Runs that failed in the last ``window`` seconds, the most recent failure first."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    async with conn.cursor(row_factory=class_row(RunSummary)) as cur:
        await cur.execute(_Q["failed_runs_since"], {"window": window, "limit": limit})
        return await cur.fetchall()


async def get_run(conn: AsyncConn, run_id: int) -> RunDetail | None:
    """One run with its attempts, skipped samples, failed rows and queued chunk jobs."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_Q["run_detail"], {"id": run_id})
        row = await cur.fetchone()
        if row is None:
            return None
        await cur.execute(_Q["run_row_failures"], {"id": run_id, "limit": ROW_FAILURES_SHOWN})
        row_failures = [RowFailure(**r) for r in await cur.fetchall()]
    jobs = await jobs_by_payload(
        conn, queue=PLANS_QUEUE, kind=CHUNK_KIND, key="run_id", value=run_id
    )
    return RunDetail(**row, row_failures=row_failures, jobs=jobs)


def state_totals(counts: Sequence[QueueStats], queue: str | None = None) -> dict[str, int]:
    """Jobs per state of ``JOB_STATES`` (of one ``queue``, or all) from ``queue_stats``: the
    scheduled count among the ready, as ``list_jobs(state="ready")`` lists them."""
    totals: dict[str, int] = dict.fromkeys(JOB_STATES, 0)
    for c in counts:
        if queue is None or c.queue == queue:
            for state, n in c.by_state().items():
                totals[state] += n
    return totals


def chunk_run(job: JobRecord) -> int | None:
    """The run whose chunk ``job`` applies, or None for any other job."""
    if job.queue != PLANS_QUEUE or job.kind != CHUNK_KIND or not isinstance(job.payload, dict):
        return None
    run_id = job.payload.get("run_id")
    return run_id if isinstance(run_id, int) else None


async def failed_jobs(
    conn: AsyncConn, *, queue: str | None = None, limit: int = 100
) -> list[JobRecord]:
    """Jobs whose last attempt failed: dead ones, and those waiting to retry."""
    return await list_jobs(conn, queue=queue, failing=True, limit=limit)
