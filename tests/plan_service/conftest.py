"""The plan service's tests: the session's database migrated for it too, and emptied of its
tables (and the runs' staging tables) before each test that asks for ``db``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from pgenough.core import migrate, open_pool
from pgenough_plans.api import MIGRATIONS
from pgenough_plans.ingest.store import SCHEMA
from tests.conftest import CORE_TABLES

PLAN_TABLES = "plans.runs, plans.plans, plans.plan_seen, plans.plan_failures, plans.read_pressure"


@pytest.fixture(scope="session")
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool]:
    p = await open_pool(database_url, max_size=20, name="pgenough-plans-tests")
    async with p.connection() as conn:
        await migrate(conn, MIGRATIONS)
    yield p
    await p.close()


@pytest.fixture
async def db(pool: AsyncConnectionPool) -> AsyncIterator[AsyncConnectionPool]:
    """The session pool, with every pgenough, plan service and test table emptied first."""
    async with pool.connection() as conn:
        await conn.execute(f"TRUNCATE {CORE_TABLES}, {PLAN_TABLES}, pgenough.ui_revoked_sessions")
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables"
            " WHERE schemaname = %s AND tablename LIKE 'staging\\_%%'",
            [SCHEMA],
        )
        for (table,) in await cur.fetchall():
            await conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(SCHEMA, table)))
    yield pool
