"""The plan service's metrics move by exactly what the runs record (deltas: the registry is
shared by the whole test session)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY
from psycopg_pool import AsyncConnectionPool

from pgenough.core import NewJob, advisory_lock, enqueue_many
from pgenough_plans.ingest.fetch import lock_name
from pgenough_plans.ingest.process import CHUNK_KIND, PLANS_QUEUE, fail_stale_runs
from pgenough_plans.sim.server import SimServer
from tests.plan_service.ingest.pipeline import fetch, process, run_row

pytestmark = pytest.mark.db


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Deltas:
    """Sample values now, to compare with later."""

    def __init__(self, *samples: tuple[str, dict[str, str]]) -> None:
        self.before = {(n, tuple(sorted(lb.items()))): value(n, **lb) for n, lb in samples}

    def __call__(self, name: str, **labels: str) -> float:
        return value(name, **labels) - self.before[(name, tuple(sorted(labels.items())))]


def per_provider(provider: str, *names: str) -> list[tuple[str, dict[str, str]]]:
    return [(n, {"provider": provider}) for n in names]


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(plans=1_500, seed=11) as server:
        yield server


async def test_a_fetch_and_its_processing_count_exactly_what_the_run_records(
    db: AsyncConnectionPool, sim: SimServer
) -> None:
    p = "metrics-ok"
    delta = Deltas(
        *per_provider(
            p,
            "pgenough_plans_staged_total",
            "pgenough_plans_skipped_total",
            "pgenough_plans_written_total",
            "pgenough_plans_rows_failed_total",
            "pgenough_plans_chunks_applied_total",
            "pgenough_plans_fetch_duration_seconds_count",
        ),
        ("pgenough_plans_fetches_total", {"provider": p, "outcome": "staged"}),
        ("pgenough_jobs_completed_total", {"queue": PLANS_QUEUE}),
        ("pgenough_jobs_enqueued_total", {"queue": PLANS_QUEUE}),
    )
    result = await fetch(db, f"{sim.url}?version=1&fault=malformed:0.05", p)
    assert result.status == "STAGED"
    staged = await run_row(db, result.run_id)
    assert delta("pgenough_plans_fetches_total", provider=p, outcome="staged") == 1
    assert delta("pgenough_plans_fetch_duration_seconds_count", provider=p) == 1
    assert delta("pgenough_plans_staged_total", provider=p) == staged["plans_staged"] > 0
    assert delta("pgenough_plans_skipped_total", provider=p) == staged["plans_skipped"] > 0
    assert delta("pgenough_jobs_enqueued_total", queue=PLANS_QUEUE) == staged["chunks_total"]
    assert value("pgenough_plans_last_success_timestamp_seconds", provider=p) > 0

    await process(db)
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT plans_written, rows_failed, chunks_done FROM plans.runs WHERE id = %s",
            (result.run_id,),
        )
        row = await cur.fetchone()
    assert row is not None
    written, failed, chunks = row
    assert delta("pgenough_plans_written_total", provider=p) == written > 0
    assert delta("pgenough_plans_rows_failed_total", provider=p) == failed
    assert delta("pgenough_plans_chunks_applied_total", provider=p) == chunks
    assert delta("pgenough_jobs_completed_total", queue=PLANS_QUEUE) == chunks


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("404", "provider"), ("reset:0.3", "transport"), ("truncate:0.5", "feed")],
)
async def test_a_failed_fetch_counts_its_reason_class(
    db: AsyncConnectionPool, sim: SimServer, fault: str, reason: str
) -> None:
    p = f"metrics-{reason}"
    delta = Deltas(
        ("pgenough_plans_runs_failed_total", {"provider": p, "reason": reason}),
        ("pgenough_plans_fetches_total", {"provider": p, "outcome": "failed"}),
        ("pgenough_plans_fetch_duration_seconds_count", {"provider": p}),
        ("pgenough_plans_staged_total", {"provider": p}),
    )
    sim.set_faults([fault])
    result = await fetch(db, f"{sim.url}?version=1", p, max_attempts=1)
    assert result.status == "FAILED"
    assert delta("pgenough_plans_runs_failed_total", provider=p, reason=reason) == 1
    assert delta("pgenough_plans_fetches_total", provider=p, outcome="failed") == 1
    assert delta("pgenough_plans_fetch_duration_seconds_count", provider=p) == 1
    assert delta("pgenough_plans_staged_total", provider=p) == 0  # nothing of it counts


async def test_a_provider_being_fetched_elsewhere_counts_as_skipped(
    db: AsyncConnectionPool, sim: SimServer
) -> None:
    import httpx

    from pgenough_plans.ingest.fetch import fetch_provider
    from tests.plan_service.ingest.pipeline import provider

    p = "metrics-locked"
    delta = Deltas(("pgenough_plans_fetches_total", {"provider": p, "outcome": "skipped_locked"}))
    async with advisory_lock(db, lock_name(p)), httpx.AsyncClient() as client:
        assert await fetch_provider(db, client, provider(sim.url, p), owner="t") is None
    assert delta("pgenough_plans_fetches_total", provider=p, outcome="skipped_locked") == 1


async def test_stale_runs_count_as_failed_by_the_reaper(db: AsyncConnectionPool) -> None:
    p = "metrics-stale"
    delta = Deltas(("pgenough_plans_runs_failed_total", {"provider": p, "reason": "stale"}))
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO plans.runs (provider, url, owner, heartbeat_at)"
            " VALUES (%s, 'http://x', 'gone', now() - interval '10 minutes')",
            (p,),
        )
        assert len(await fail_stale_runs(conn, stale_after=60)) == 1
    assert delta("pgenough_plans_runs_failed_total", provider=p, reason="stale") == 1


async def test_chunk_failures_are_the_cores_job_metrics_on_the_plans_queue(
    db: AsyncConnectionPool,
) -> None:
    q = {"queue": PLANS_QUEUE}
    delta = Deltas(
        ("pgenough_jobs_failed_total", q),
        ("pgenough_jobs_retried_total", q),
        ("pgenough_jobs_dead_total", q),
    )
    async with db.connection() as conn, conn.transaction():
        await enqueue_many(
            conn,
            [
                NewJob(
                    CHUNK_KIND,
                    {"run_id": "not-a-run", "lo": "a", "hi": "b"},
                    queue=PLANS_QUEUE,
                    max_attempts=1,
                ),
                NewJob(
                    CHUNK_KIND,
                    {"run_id": "not-a-run", "lo": "a", "hi": "b"},
                    queue=PLANS_QUEUE,
                    max_attempts=2,
                    dedupe_key="retried",
                ),
            ],
        )
    await process(db)
    assert delta("pgenough_jobs_failed_total", **q) == 2
    assert delta("pgenough_jobs_dead_total", **q) == 1
    assert delta("pgenough_jobs_retried_total", **q) == 1
