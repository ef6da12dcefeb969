"""Prometheus metrics of the plan service (prometheus-client's default registry, beside the
core's and the API's).

Counted by the process that does the work: fetch metrics by fetch workers, chunk and row
metrics by process workers. Rows are counted once their transaction committed (a run when it
is sealed, a chunk when it is applied), so the counters match ``plans.runs`` exactly.
Processing failures, retries and dead chunks are the core's ``pgenough_jobs_*{queue="plans"}``.
Labels are bounded: ``provider`` is the configured provider names, ``outcome`` and ``reason``
the fixed sets below.
"""

from __future__ import annotations

import time
from typing import Final, Literal, TypeAlias

from prometheus_client import Counter, Gauge, Histogram

from pgenough_plans.ingest.errors import FeedError, ProviderError, ProviderFailure
from pgenough_plans.ingest.runs import RunStatus

Outcome = Literal["staged", "processed_empty", "failed", "skipped_locked"]
FailureReason: TypeAlias = (
    ProviderFailure
    | Literal["feed", "database", "stopped", "internal", "orphaned", "stale", "staging_lost"]
)
_OF_OTHERS: Final = frozenset({"orphaned", "stale", "staging_lost"})
"""Reasons recorded for a run by someone other than its own fetch (it is no fetch outcome)."""

FETCHES = Counter(
    "pgenough_plans_fetches",
    "Fetch attempts of a provider by outcome: staged, processed_empty (a snapshot without "
    "plans), failed, skipped_locked (another worker holds the provider's lock).",
    ["provider", "outcome"],
)
FETCH_DURATION = Histogram(
    "pgenough_plans_fetch_duration_seconds",
    "Time from opening a run to sealing or failing it (retries and backoff included).",
    ["provider"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)
RUNS_FAILED = Counter(
    "pgenough_plans_runs_failed",
    "Runs marked FAILED, by reason: provider (an HTTP status), transport (timeouts, resets, "
    "too slow), redirect (a loop or a refused redirect), decoding (a body that does not "
    "decode), url, deadline (the run's overall deadline), feed (unparsable or hostile XML), "
    "database (connection lost), stopped (the worker was stopped), internal (a bug), "
    "orphaned (its fetcher died), stale (stopped heartbeating), staging_lost (a server crash or "
    "a failover emptied its staging before it was applied).",
    ["provider", "reason"],
)
PLANS_STAGED = Counter(
    "pgenough_plans_staged", "Plans staged by sealed runs (counted at seal).", ["provider"]
)
PLANS_SKIPPED = Counter(
    "pgenough_plans_skipped",
    "Bad records skipped by sealed runs (counted at seal; samples on the run).",
    ["provider"],
)
PLANS_DUPLICATES = Counter(
    "pgenough_plans_duplicates",
    "Listings of a plan already listed earlier in the same snapshot, by sealed runs (counted "
    "at seal; the last listing gives the plan's content).",
    ["provider"],
)
PLANS_WRITTEN = Counter(
    "pgenough_plans_written",
    "Plans written to the canonical table by applied chunks.",
    ["provider"],
)
ROWS_FAILED = Counter(
    "pgenough_plans_rows_failed",
    "Staged rows PostgreSQL refused while applying chunks (in plans.plan_failures).",
    ["provider"],
)
CHUNKS_APPLIED = Counter(
    "pgenough_plans_chunks_applied", "Chunks applied and committed.", ["provider"]
)
PLANS_VACUUMS = Counter(
    "pgenough_plans_vacuums",
    "VACUUMs of plans.plans by the process workers' vacuum duty (pgenough.plans.vacuum).",
)
LAST_SUCCESS = Gauge(
    "pgenough_plans_last_success_timestamp_seconds",
    "Unix time this process last sealed a run of the provider (STAGED or empty PROCESSED).",
    ["provider"],
)


def failure_reason(exc: Exception) -> FailureReason:
    """The bounded reason class of a fetch that raised (the full text is on the run)."""
    if isinstance(exc, FeedError):
        return "feed"
    if isinstance(exc, ProviderError):
        return exc.kind
    return "internal"


def record_sealed(
    provider: str, status: RunStatus, staged: int, skipped: int, duplicates: int
) -> None:
    FETCHES.labels(provider, "staged" if status == RunStatus.STAGED else "processed_empty").inc()
    PLANS_STAGED.labels(provider).inc(staged)
    PLANS_SKIPPED.labels(provider).inc(skipped)
    PLANS_DUPLICATES.labels(provider).inc(duplicates)
    LAST_SUCCESS.labels(provider).set(time.time())


def record_failed(provider: str, reason: FailureReason) -> None:
    RUNS_FAILED.labels(provider, reason).inc()
    if reason not in _OF_OTHERS:
        FETCHES.labels(provider, "failed").inc()


def record_chunk(provider: str, written: int, failed: int) -> None:
    CHUNKS_APPLIED.labels(provider).inc()
    PLANS_WRITTEN.labels(provider).inc(written)
    ROWS_FAILED.labels(provider).inc(failed)
