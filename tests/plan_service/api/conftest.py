from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import migrate, open_pool
from pgenough_plans.api import MIGRATIONS
from tests.helpers.standby import StandbyPair
from tests.plan_service.api.helpers import api_settings, serving

pytestmark = pytest.mark.db


@pytest.fixture
async def client(db: AsyncConnectionPool, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The API (cache off) on an emptied test database, called in-process."""
    async with serving(api_settings(database_url)) as (_, c):
        yield c


@pytest.fixture(scope="module")
async def primary(pair: StandbyPair) -> AsyncIterator[AsyncConnectionPool]:
    """The migrated primary of the module's ``pair`` (a fixture of the replica tests)."""
    pool = await open_pool(pair.primary_url, max_size=2, name="test-primary")
    try:
        async with pool.connection() as conn:
            await migrate(conn, MIGRATIONS)
        yield pool
    finally:
        await pool.close()
