"""The dashboard's tests: a database of their own (the plan service's tests migrate theirs
into the session's), migrated for it (the core and the ``ui`` track, nothing else: no
application's tables), and its table emptied with the core's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import migrate, open_pool
from pgenough.dashboard import MIGRATIONS
from tests.conftest import CORE_TABLES, test_database
from tests.dashboard.helpers import Pair, serving, ui_settings


@pytest.fixture(scope="session")
def database_url(server_url: str) -> Iterator[str]:
    """The dashboard's own database for this run (and xdist worker): the core's schema only."""
    with test_database(server_url, "dashboard_") as url:
        yield url


@pytest.fixture(scope="session")
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool]:
    p = await open_pool(database_url, max_size=20, name="pgenough-dashboard-tests")
    async with p.connection() as conn:
        await migrate(conn, [MIGRATIONS])
    yield p
    await p.close()


@pytest.fixture
async def db(pool: AsyncConnectionPool) -> AsyncIterator[AsyncConnectionPool]:
    """The session pool, with every pgenough and test table emptied first."""
    async with pool.connection() as conn:
        await conn.execute(f"TRUNCATE {CORE_TABLES}, pgenough.ui_revoked_sessions")
    yield pool


@pytest.fixture
async def ui(db: AsyncConnectionPool, database_url: str) -> AsyncIterator[Pair]:
    """The dashboard read-only and without a token, mounted at /ui, called in-process."""
    async with serving(ui_settings(database_url)) as pair:
        yield pair


@pytest.fixture
async def ui_actions(db: AsyncConnectionPool, database_url: str) -> AsyncIterator[Pair]:
    """The dashboard with actions enabled."""
    async with serving(ui_settings(database_url, ui_actions=True)) as pair:
        yield pair
