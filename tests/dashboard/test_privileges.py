"""A dashboard whose role may not read what it shows says which setting to change, on its
pages, its JSON and its live stream, instead of failing with a 500; and one on a database
that was never migrated says what to run."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgenough.core.db import create_database, drop_database, with_database
from tests.dashboard.helpers import serving, ui_settings
from tests.dashboard.server import UiServer, sse

pytestmark = pytest.mark.db

PASSWORD = "reads-nothing"


@pytest.fixture
async def outsider(db: AsyncConnectionPool, database_url: str) -> AsyncIterator[str]:
    """The URL of a role that may connect, and read nothing of pgenough's."""
    name = f"pgenough_ui_{uuid.uuid4().hex[:8]}"
    async with db.connection() as conn:
        await conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(name), sql.Literal(PASSWORD)
            )
        )
    yield make_conninfo(database_url, user=name, password=PASSWORD)
    async with db.connection() as conn:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        await conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        await conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


async def test_missing_privileges_name_the_setting(database_url: str, outsider: str) -> None:
    settings = ui_settings(database_url, ui_database_url=outsider)
    async with serving(settings) as (_, client):
        for path in (
            "/ui/",
            "/ui/jobs",
            "/ui/failures",
            "/ui/jobs/1",
            "/ui/workers",
            "/ui/periodic",
        ):
            page = await client.get(path)
            assert page.status_code == 503, path
            assert page.headers["content-type"].startswith("text/html")
            assert "PGENOUGH_UI_DATABASE_URL" in page.text and "Traceback" not in page.text
            assert "lacks privileges" in page.text
        for api in ("/ui/api/overview", "/ui/api/history"):
            body = (await client.get(api)).json()
            assert body["data"] is None and body["error"]["code"] == "UNAVAILABLE"
            assert "PGENOUGH_UI_DATABASE_URL" in body["error"]["message"]

    with UiServer(settings) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=20) as client,
            client.stream("GET", "/ui/events") as stream,
        ):
            name, data = await anext(sse(stream))
    assert name == "problem" and "PGENOUGH_UI_DATABASE_URL" in data["message"]


async def test_a_database_never_migrated_says_to_run_pgenough_migrate(server_url: str) -> None:
    name = f"pgenough_bare_{uuid.uuid4().hex[:8]}"
    create_database(server_url, name)
    try:
        async with serving(ui_settings(with_database(server_url, name))) as (_, client):
            page = await client.get("/ui/jobs")
            assert page.status_code == 503
            assert "`pgenough migrate`" in page.text and "not up to date" in page.text
    finally:
        drop_database(server_url, name)
