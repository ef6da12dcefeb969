"""A chunk's apply reads the plans table by key, whatever the table's statistics say.

The trap (issue 33): a snapshot's first ingestion grows ``plans`` from empty to a million rows
within one run, faster than autovacuum analyses it, and each chunk's statement is planned with
the statistics of a far smaller table (``PLAN_EACH_TIME``). Planned that way, the ever-online
check of apply_rows (is this plan already ever-online?) became a Merge Anti Join over a sort of
every plan of the provider: each chunk read the whole table so far, the 1M ingestion's process
phase went from 13.4 s to 41.4 s (e76aa10 against a5d4403, one sitting), and the cost grew with
the square of the snapshot. So this test gives ``plans`` the statistics of an empty table,
loads many plans without ANALYZE (autovacuum off for the tables meanwhile), stages a chunk the
way a run does, and reads the plan PostgreSQL executed for the product's own ``apply_chunk``
from ``auto_explain``: no node may read more plans than the chunk holds. Nothing here depends
on timing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from pgenough.core import open_pool
from pgenough_plans.ingest import store
from tests.helpers.explain import Plans, explain_on

pytestmark = pytest.mark.db

PLANS = 100_000
"""Plans already in the table, none of them in the chunk (as in a first ingestion)."""
CHUNK = 5_000
"""Staged rows in the one chunk applied: all online, so every one goes through the check."""
TABLES = ("plans.plans", "plans.plan_seen")


def scans(node: dict[str, Any], relation: str) -> Iterator[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan that reads ``relation``."""
    if node.get("Relation Name") == relation and "Scan" in node.get("Node Type", ""):
        yield node
    for child in node.get("Plans", []):
        yield from scans(child, relation)


@pytest.fixture
async def explained(
    db: AsyncConnectionPool, database_url: str
) -> AsyncIterator[tuple[AsyncConnectionPool, list[dict[str, Any]]]]:
    """A one-connection pool whose every statement's executed plan is collected."""
    plans = Plans()
    # Bounded: on the plan this guards against, a bigger table would take minutes.
    pool = await open_pool(database_url, min_size=1, max_size=1, statement_timeout=60)
    try:
        async with pool.connection() as conn:
            await explain_on(conn, plans, "log_min_duration = 0", "log_nested_statements = on")
    except BaseException:
        await pool.close()
        raise
    async with db.connection() as conn:
        for table in TABLES:
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    try:
        yield pool, plans.reports
    finally:
        await pool.close()
        async with db.connection() as conn:
            for table in TABLES:
                await conn.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")


async def test_a_chunk_reads_no_more_plans_than_it_holds_on_stale_statistics(
    db: AsyncConnectionPool,
    explained: tuple[AsyncConnectionPool, list[dict[str, Any]]],
) -> None:
    pool, reports = explained
    async with db.connection() as conn:
        # The statistics of the fresh database's empty tables...
        for table in TABLES:
            await conn.execute(f"ANALYZE {table}")
        # ...then a first snapshot's earlier chunks, ever-online, which no ANALYZE has seen.
        await conn.execute(
            "INSERT INTO plans.plans (provider, base_plan_id, plan_id, id, title, sell_mode,"
            " starts_at, ends_at, sold_out, min_price, max_price, ever_online)"
            " SELECT 'p', 'b' || i, 'x' || i, plans.plan_uuid('p', 'b' || i, 'x' || i),"
            " 'Plan ' || i, 'online', '2030-01-01Z', '2030-01-02Z', false, 10, 20, true"
            " FROM generate_series(1, %s) AS i",
            (PLANS,),
        )
        cur = await conn.execute(
            "INSERT INTO plans.runs (provider, url, owner, status, chunks_total)"
            " VALUES ('p', 'http://x', 'test', 'STAGED', 1) RETURNING id"
        )
        row = await cur.fetchone()
        assert row is not None
        run_id = int(row[0])
        await store.create_staging(conn, run_id, "p")
        # The next chunk's plans, new ones: staged and analysed as a sealed run's are.
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} (seq, base_plan_id, plan_id, title, sell_mode,"
                " organizer_company_id, starts_at, ends_at, sell_from, sell_to, sold_out,"
                " min_price, max_price) SELECT n, 'new' || n, 'y' || n, 'title', 'online', NULL,"
                " '2030-01-01Z', '2030-01-02Z', NULL, NULL, false, 1, 2"
                " FROM generate_series(1, %s) n"
            ).format(store.staging_table(run_id)),
            (CHUNK,),
        )
        await store.analyze_staging(conn, run_id)
        [(lo, hi)] = await store.chunk_ranges(conn, run_id, pages_per_chunk=10**6)

    async with pool.connection() as conn:
        first = len(reports)
        result = await store.apply_chunk(
            conn,
            run_id=run_id,
            provider="p",
            snapshot_at=datetime(2030, 1, 1, tzinfo=UTC),
            lo=lo,
            hi=hi,
        )
    assert (result.rows, result.written, result.failed) == (CHUNK, CHUNK, 0)
    [apply] = [r for r in reports[first:] if "plans.plan_seen" in r["Query Text"]]
    read = {
        f"{n['Node Type']} (x{n['Actual Loops']})": n["Actual Rows"] * n["Actual Loops"]
        for n in scans(apply["Plan"], "plans")
    }
    assert read, "the statement reads plans somewhere (the ever-online check)"
    assert sum(read.values()) <= CHUNK, (
        f"a chunk of {CHUNK} rows read {read} rows of plans ({PLANS:,} in the table)"
    )
