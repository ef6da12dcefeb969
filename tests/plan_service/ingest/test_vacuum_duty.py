"""The plans vacuum duty: a snapshot that changes plans takes /search's index-only scans to
the heap until the plans are vacuumed; the duty vacuums once the dead row versions reach a
share of the table, and the scan is index-only again."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg import AsyncClientCursor, AsyncConnection
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api.search import Q as SEARCH_Q
from pgenough_plans.api.search import SearchQuery
from pgenough_plans.ingest import store
from pgenough_plans.ingest.defaults import VACUUM_MIN_DEAD_ROWS

pytestmark = pytest.mark.db

PLANS = 20_000
QUERY = SearchQuery(
    starts_at=datetime(2021, 1, 1, tzinfo=UTC),
    ends_at=datetime(2021, 12, 31, tzinfo=UTC),
    limit=50,
    offset=1000,
)


async def heap_fetches(url: str) -> int:
    """The heap fetches of a /search page (its own statement) as it runs now."""
    async with await AsyncConnection.connect(url, cursor_factory=AsyncClientCursor) as conn:
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + SEARCH_Q["page"],
            QUERY.sql_params(None, QUERY.offset),
        )
        row = await cur.fetchone()
    assert row is not None
    total = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal total
        total += int(node.get("Heap Fetches", 0))
        for child in node.get("Plans", []):
            walk(child)

    walk(row[0][0]["Plan"])
    return total


async def change_titles(conn: AsyncConnection[Any], every: int) -> None:
    """A new title for one plan in ``every``, as a snapshot that renames them writes it; its
    statistics flushed at once (PostgreSQL 15 flushes a backend's at most once a second)."""
    await conn.execute(
        "UPDATE plans.plans SET title = title || ' - Nueva fecha'"
        " WHERE (hashtext(plan_id) & 2147483647) %% %s = 0",
        (every,),
    )
    await conn.execute("SELECT pg_stat_force_next_flush()")


async def vacuums(conn: AsyncConnection[Any]) -> int:
    cur = await conn.execute(
        "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'plans.plans'::regclass"
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_the_duty_vacuums_changed_plans_so_searches_leave_the_heap_again(
    db: AsyncConnectionPool, database_url: str
) -> None:
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO plans.plans (provider, base_plan_id, plan_id, id, title, sell_mode,"
            " starts_at, ends_at, sold_out, min_price, max_price, ever_online)"
            " SELECT 'p', 'b' || i, 'x' || i, plans.plan_uuid('p', 'b' || i, 'x' || i),"
            " 'Plan ' || i, 'online', t, t + interval '2 hours', false, 10, 20, true"
            " FROM generate_series(1, %s) AS i,"
            " LATERAL (SELECT timestamptz '2021-01-01' + i * interval '25 minutes') AS s(t)",
            (PLANS,),
        )
        await conn.execute("VACUUM (ANALYZE) plans.plans")
        assert await heap_fetches(database_url) == 0

        # A few changes: below the share (1% of the live rows) and the floor, no vacuum.
        await change_titles(conn, 200)
        before = await vacuums(conn)
        result = await store.vacuum_plans(conn)
        assert not result.vacuumed
        assert 0 < result.dead_rows < VACUUM_MIN_DEAD_ROWS
        assert await vacuums(conn) == before

        # A snapshot that renames a tenth of the plans: nearly every page loses its
        # all-visible bit and a search reads the heap for most of what it scans...
        await change_titles(conn, 10)
        fetched = await heap_fetches(database_url)
        assert fetched > QUERY.offset // 2
        result = await store.vacuum_plans(conn)
        # ...until the duty vacuums: index-only again.
        assert result.vacuumed
        assert result.dead_rows >= PLANS // 10 * 0.8
        assert await vacuums(conn) == before + 1
        assert await heap_fetches(database_url) == 0


def test_the_duty_is_scheduled_ahead_of_chunks() -> None:
    from pgenough_plans.ingest import process

    vacuum = process.app.tasks["pgenough.plans.vacuum"]
    chunk = process.app.tasks["apply_chunk"]
    assert vacuum.options.priority > chunk.options.priority
    assert vacuum.options.max_attempts == 1
