"""The plan service's dashboard on a role that may read only the plans (the API's): every
page, the plan service's too, its JSON and its live stream say which setting to change,
instead of failing with a 500, while /search is unaffected; and the API without it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api import grant_api_role
from tests.dashboard.server import sse
from tests.plan_service.api.helpers import serving
from tests.plan_service.ui.conftest import ui_settings
from tests.plan_service.ui.server import UiServer

pytestmark = pytest.mark.db

PASSWORD = "plans-only"


@pytest.fixture
async def plans_reader(db: AsyncConnectionPool, database_url: str) -> AsyncIterator[str]:
    """The URL of a role that may read plans.plans and nothing else (the API's role)."""
    name = f"pgenough_ui_{uuid.uuid4().hex[:8]}"
    async with db.connection() as conn:
        await grant_api_role(conn, name, PASSWORD)
    yield make_conninfo(database_url, user=name, password=PASSWORD)
    async with db.connection() as conn:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        await conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        await conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


async def test_missing_privileges_name_the_setting(database_url: str, plans_reader: str) -> None:
    # The API on the owner's URL, the dashboard on a role that may only read the plans.
    settings = ui_settings(database_url, ui_database_url=plans_reader)
    async with serving(settings) as (_, client):
        for path in ("/ui/", "/ui/runs", "/ui/failures", "/ui/runs/1", "/ui/jobs"):
            page = await client.get(path)
            assert page.status_code == 503, path
            assert page.headers["content-type"].startswith("text/html")
            assert "PGENOUGH_UI_DATABASE_URL" in page.text and "Traceback" not in page.text
            assert "lacks privileges" in page.text
        body = (await client.get("/ui/api/overview")).json()
        assert body["data"] is None and body["error"]["code"] == "UNAVAILABLE"
        assert "PGENOUGH_UI_DATABASE_URL" in body["error"]["message"]
        assert (await client.get("/search")).status_code == 200  # the API is unaffected

    with UiServer(settings) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=20) as client,
            client.stream("GET", "/ui/events") as stream,
        ):
            name, data = await anext(sse(stream))
    assert name == "problem" and "PGENOUGH_UI_DATABASE_URL" in data["message"]


async def test_a_disabled_dashboard_is_not_served(database_url: str, db: object) -> None:
    async with serving(ui_settings(database_url, ui_enabled=False)) as (app, client):
        assert (await client.get("/ui")).status_code == 404
        assert (await client.get("/ui/")).status_code == 404
        assert not hasattr(app.state, "dashboard")
