"""What operators look at and the few things they may do: the read model behind
``pgenough status``/``runs``/``failures``/``jobs`` and the dashboard, and the repairs both
offer. Single jobs and lists of them are the core's own (``get_job``, ``list_jobs``); this
module adds what only the plan service knows (which run a chunk job belongs to).

Runs are read through ``plans.runs`` (which owns every statement on ``plans.runs`` and
its records); ``plan_failures`` here (``sql/inspect.sql``); jobs through the core's public
calls (``queue_stats``, ``job_failures``, ``jobs_by_payload``, ``list_jobs``). All come
back as frozen dataclasses that turn into JSON with ``pgenough.jsonable.as_json``.
Repairs go only through the core's documented operations (``retry_job``, ``retry_dead``,
``discard_job``, ``requeue_stuck``), each in its own transaction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import dict_row

from pgenough.core import JobRecord
from pgenough.core.admin import QueueStats, job_failures, jobs_by_payload, list_jobs, queue_stats
from pgenough.core.db import AsyncConn, named_queries
from pgenough_plans.ingest.process import CHUNK_KIND, PLANS_QUEUE
from pgenough_plans.ingest.runs import (
    ProviderSummary,
    Run,
    RunSummary,
    ThroughputPoint,
    count_failed_since,
    list_runs,
    provider_names,
    provider_summaries,
    throughput,
)
from pgenough_plans.ingest.runs import failed_runs as _failed_runs
from pgenough_plans.ingest.runs import get_run as _get_run

__all__ = [
    "DEFAULT_WINDOW",
    "Failures",
    "Overview",
    "ProviderSummary",
    "ProvidersView",
    "RowFailure",
    "RunDetail",
    "RunSummary",
    "ThroughputPoint",
    "chunk_run",
    "failed_jobs",
    "failed_runs",
    "get_run",
    "list_runs",
    "overview",
    "provider_names",
    "providers_view",
]

_Q = named_queries("pgenough_plans.ingest", "inspect")


DEFAULT_WINDOW = 3600.0
ROW_FAILURES_SHOWN = 100


@dataclass(frozen=True)
class Failures:
    runs_failed: int
    rows_failed: int
    jobs_dead: int
    job_attempts_failed: int
    """Failed attempts recorded on jobs still in the queue (retrying or dead)."""


@dataclass(frozen=True)
class Overview:
    at: datetime
    window: float
    providers: list[ProviderSummary]
    queues: list[QueueStats]
    failures: Failures
    throughput: list[ThroughputPoint]


@dataclass(frozen=True)
class RowFailure:
    seq: int
    base_plan_id: str | None
    plan_id: str | None
    error: str
    at: datetime


@dataclass(frozen=True)
class RunDetail(Run):
    """One run as operators look at it: the run, its failed rows and its chunk jobs."""

    row_failures: list[RowFailure] = dataclasses.field(default_factory=list)
    """The first ``ROW_FAILURES_SHOWN`` rows that could not be written."""
    jobs: list[JobRecord] = dataclasses.field(default_factory=list)
    """Chunk jobs still queued: waiting, running, retrying, dead or cancelled."""


async def overview(conn: AsyncConn, window: float = DEFAULT_WINDOW) -> Overview:
    """Providers, queues, failures and throughput over the last ``window`` seconds."""
    providers = await provider_summaries(conn, await provider_names(conn), window)
    async with conn.cursor(row_factory=dict_row) as fcur:
        await fcur.execute(_Q["failures_since"], {"window": window})
        row = await fcur.fetchone()
    assert row is not None  # an aggregate: always one row
    at = row.pop("at")
    jobs = await job_failures(conn, window)
    failures = Failures(
        runs_failed=await count_failed_since(conn, window),
        **row,
        jobs_dead=jobs.dead,
        job_attempts_failed=jobs.attempts_failed,
    )
    points = await throughput(conn, window)
    return Overview(at, window, providers, await queue_stats(conn), failures, points)


@dataclass(frozen=True)
class ProvidersView:
    """The providers as the dashboard's overview shows them (its Providers section)."""

    providers: list[ProviderSummary]
    runs_failed: int
    """Runs failed in the window."""
    rows_failed: int
    """Rows that could not be written in the window."""
    throughput: list[ThroughputPoint]


async def providers_view(conn: AsyncConn, window: float = DEFAULT_WINDOW) -> ProvidersView:
    """Every provider's last run, the runs and rows failed, and plans processed per minute,
    over the last ``window`` seconds."""
    providers = await provider_summaries(conn, await provider_names(conn), window)
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_Q["failures_since"], {"window": window})
        row = await cur.fetchone()
    assert row is not None  # an aggregate: always one row
    return ProvidersView(
        providers,
        await count_failed_since(conn, window),
        row["rows_failed"],
        await throughput(conn, window),
    )


async def failed_runs(
    conn: AsyncConn, *, window: float = DEFAULT_WINDOW, limit: int = 50
) -> list[RunSummary]:
    """Runs that failed in the last ``window`` seconds, the most recent failure first."""
    return await _failed_runs(conn, window=window, limit=limit)


async def get_run(conn: AsyncConn, run_id: int) -> RunDetail | None:
    """One run with its attempts, skipped samples, failed rows and queued chunk jobs."""
    run = await _get_run(conn, run_id)
    if run is None:
        return None
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_Q["run_row_failures"], {"id": run_id, "limit": ROW_FAILURES_SHOWN})
        row_failures = [RowFailure(**r) for r in await cur.fetchall()]
    jobs = await jobs_by_payload(
        conn, queue=PLANS_QUEUE, kind=CHUNK_KIND, key="run_id", value=run_id
    )
    fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(run)}
    return RunDetail(**fields, row_failures=row_failures, jobs=jobs)


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
