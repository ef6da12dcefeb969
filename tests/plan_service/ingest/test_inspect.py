"""The operators' read model and repairs, on real ingestions and real failures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue, get_job, repair
from pgenough.jsonable import as_json
from pgenough_plans.ingest import inspect
from pgenough_plans.sim.server import SimServer
from tests.plan_service.ingest.pipeline import break_chunks, fetch, heal_chunks, ingest, process

pytestmark = pytest.mark.db


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(plans=1_500, seed=11) as server:
        yield server


@pytest.fixture
async def broken_chunks(db: AsyncConnectionPool) -> AsyncIterator[None]:
    await break_chunks(db)
    yield
    await heal_chunks(db)


async def test_overview_and_runs_show_a_real_ingestion(
    db: AsyncConnectionPool, sim: SimServer
) -> None:
    ok = await ingest(db, f"{sim.url}?version=1&fault=malformed:0.05", name="alpha")
    bad = await fetch(db, f"{sim.url}?fault=404", name="beta")
    assert (ok.status, bad.status) == ("STAGED", "FAILED")

    async with db.connection() as conn:
        view = await inspect.overview(conn)
        runs = await inspect.list_runs(conn)
        failed = await inspect.list_runs(conn, status="failed")
        recent_failures = await inspect.failed_runs(conn)
        none_yet = await inspect.failed_runs(conn, window=0)
        alpha_runs = await inspect.list_runs(conn, provider="alpha")
        detail = await inspect.get_run(conn, ok.run_id)
        bad_detail = await inspect.get_run(conn, bad.run_id)
        missing = await inspect.get_run(conn, 10**9)
        names = await inspect.provider_names(conn)

    alpha, beta = view.providers
    assert (alpha.provider, alpha.last_run_id, alpha.last_status) == (
        "alpha",
        ok.run_id,
        "PROCESSED",
    )
    assert alpha.plans_staged == ok.plans_staged == 1_500 - ok.plans_skipped
    assert alpha.plans_skipped == ok.plans_skipped > 0
    assert alpha.plans_written == ok.plans_staged
    assert alpha.throughput is not None and alpha.throughput > 0
    assert alpha.last_success_at is not None and alpha.runs_failed == 0
    assert (beta.last_status, beta.last_success_at, beta.runs_failed) == ("FAILED", None, 1)
    assert beta.last_reason and "404" in beta.last_reason
    assert view.failures.runs_failed == 1
    assert sum(p.plans for p in view.throughput) == ok.plans_staged
    assert all(q.ready == 0 and q.running == 0 for q in view.queues)

    assert names == ["alpha", "beta"]
    assert [r.id for r in runs] == [bad.run_id, ok.run_id]
    assert [r.id for r in failed] == [bad.run_id]
    assert [r.id for r in alpha_runs] == [ok.run_id]
    assert runs[1].chunks_total == runs[1].chunks_done > 0
    assert runs[1].finished_at is not None and runs[1].duration > 0

    assert detail is not None and missing is None
    assert [a["status"] for a in detail.attempts] == [200]
    assert detail.skip_samples and all(s["reason"] for s in detail.skip_samples)
    assert detail.jobs == [] and detail.row_failures == []
    assert bad_detail is not None and bad_detail.status == "FAILED"
    assert bad_detail.attempts[0]["status"] == 404
    assert [(r.id, r.reason) for r in recent_failures] == [(bad.run_id, bad_detail.reason)]
    assert recent_failures[0].finished_at == bad_detail.failed_at and none_yet == []

    data = as_json(detail)
    assert data["id"] == ok.run_id and isinstance(data["started_at"], str)


async def test_bad_filters_are_refused(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        with pytest.raises(ValueError, match="status must be one of"):
            await inspect.list_runs(conn, status="DONE")
        with pytest.raises(ValueError, match="limit"):
            await inspect.list_runs(conn, limit=0)
        with pytest.raises(ValueError, match="limit"):
            await inspect.failed_runs(conn, limit=0)


async def test_a_dead_chunk_is_seen_retried_and_its_run_completes(
    db: AsyncConnectionPool, sim: SimServer, broken_chunks: None
) -> None:
    staged = await fetch(db, f"{sim.url}?version=1")
    async with db.connection() as conn:
        # One attempt each, so the failing chunks are dead-lettered at once.
        await conn.execute("UPDATE pgenough.jobs SET max_attempts = 1")
    await process(db)

    async with db.connection() as conn:
        failing = await inspect.failed_jobs(conn)
        view = await inspect.overview(conn)
        run = await inspect.get_run(conn, staged.run_id)
    assert failing and all(j.state == "dead" for j in failing)
    assert all("disk full (test)" in (j.last_error or "") for j in failing)
    assert view.failures.jobs_dead == len(failing)
    assert view.failures.job_attempts_failed == len(failing)
    assert run is not None and run.status == "STAGED"
    assert {j.id for j in run.jobs} == {j.id for j in failing}

    await heal_chunks(db)
    async with db.connection() as conn:
        first = await repair.retry(conn, failing[0].id)
        assert first.state == "ready"
        assert await repair.retry_all_dead(conn) == len(failing) - 1
    await process(db)

    async with db.connection() as conn:
        run = await inspect.get_run(conn, staged.run_id)
        assert await inspect.failed_jobs(conn) == []
    assert run is not None and run.status == "PROCESSED" and run.jobs == []
    assert run.plans_written == staged.plans_staged


async def test_chunk_run_names_the_run_of_chunk_jobs_only(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        chunk = await enqueue(conn, "apply_chunk", {"run_id": 7, "lo": "a"}, queue="plans")
        other = await enqueue(conn, "report", {"run_id": 7}, queue="plans")
        elsewhere = await enqueue(conn, "apply_chunk", {"run_id": 7}, queue="ops")
        odd = await enqueue(conn, "apply_chunk", [7], queue="plans")
        jobs = [await get_job(conn, j) for j in (chunk, other, elsewhere, odd) if j is not None]
    assert [inspect.chunk_run(j) for j in jobs if j is not None] == [7, None, None, None]
