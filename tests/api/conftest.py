from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.api.helpers import api_settings, serving

pytestmark = pytest.mark.db


@pytest.fixture
async def client(db: AsyncConnectionPool, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The API (cache off) on an emptied test database, called in-process."""
    async with serving(api_settings(database_url)) as (_, c):
        yield c
