"""The plans tables' own rules, below the pipeline."""

from __future__ import annotations

import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue_many
from pgenough.plans import store
from pgenough.plans.fetch import chunk_jobs
from pgenough.plans.store import plan_uuid

pytestmark = pytest.mark.db


@pytest.mark.parametrize(
    ("provider", "base_plan_id", "plan_id"),
    [("fever", "291", "291"), ("prövïdér-ñ", "🎭", "x\x1fy"), ("a", "", "b")],
)
async def test_sql_and_python_derive_the_same_plan_id(
    db: AsyncConnectionPool, provider: str, base_plan_id: str, plan_id: str
) -> None:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT pgenough.plan_uuid(%s, %s, %s)", (provider, base_plan_id, plan_id)
        )
        row = await cur.fetchone()
    assert row is not None
    assert row[0] == plan_uuid(provider, base_plan_id, plan_id)
    assert row[0].version == 3


async def test_a_row_postgres_refuses_is_isolated_and_its_neighbours_written(
    db: AsyncConnectionPool,
) -> None:
    from tests.plans.pipeline import process, run_row

    async with db.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO pgenough.runs (provider, url, owner, status, chunks_total)"
            " VALUES ('poison', 'http://x', 'test', 'STAGED', 1) RETURNING id"
        )
        row = await cur.fetchone()
        assert row is not None
        run_id = row[0]
        await store.create_staging(conn, run_id, "poison")
        # Seq 5 breaks a CHECK of plans (min above max): the parser never stages such a
        # row, which is exactly why the worker must survive one.
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} (seq, base_plan_id, plan_id, title, sell_mode,"
                " organizer_company_id, starts_at, ends_at, sell_from, sell_to, sold_out,"
                " min_price, max_price) SELECT n, 'b', n::text, 'title', 'online', NULL,"
                " '2030-01-01Z', '2030-01-02Z', NULL, NULL, false,"
                " CASE WHEN n = 5 THEN 9 ELSE 1 END, 2 FROM generate_series(0, 9) n"
            ).format(store.staging_table(run_id))
        )
        await enqueue_many(conn, chunk_jobs(run_id, await store.chunk_ranges(conn, run_id)))
    await process(db)
    run = await run_row(db, run_id)
    assert run["status"] == "PROCESSED"
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT plan_id FROM pgenough.plans WHERE provider = 'poison' ORDER BY plan_id::int"
        )
        assert [r[0] for r in await cur.fetchall()] == ["0", "1", "2", "3", "4", "6", "7", "8", "9"]
        cur = await conn.execute(
            "SELECT seq, base_plan_id, plan_id, error FROM pgenough.plan_failures"
        )
        [(seq, base, plan, error)] = await cur.fetchall()
        cur = await conn.execute("SELECT rows_failed FROM pgenough.runs WHERE id = %s", (run_id,))
        assert await cur.fetchone() == (1,)
    assert (seq, base, plan) == (5, "b", "5")
    assert "check constraint" in error


async def test_the_reaper_fails_runs_whose_worker_stopped_heartbeating(
    db: AsyncConnectionPool,
) -> None:
    from pgenough.plans.fetch import fail_stale_runs
    from tests.plans.pipeline import run_row

    async with db.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO pgenough.runs (provider, url, owner, heartbeat_at) VALUES"
            " ('a', 'http://x', 'gone', now() - interval '10 minutes'),"
            " ('b', 'http://x', 'alive', now()) RETURNING id"
        )
        stale, alive = [r[0] for r in await cur.fetchall()]
        for run_id in (stale, alive):
            await store.create_staging(conn, run_id, "poison")
        assert await fail_stale_runs(conn, stale_after=60) == [stale]
    dead = await run_row(db, stale)
    assert dead["status"] == "FAILED"
    assert str(dead["reason"]).startswith("fetch worker stopped heartbeating at ")
    assert not dead["has_staging"]
    live = await run_row(db, alive)
    assert (live["status"], live["has_staging"]) == ("RUNNING", True)
