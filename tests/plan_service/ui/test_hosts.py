"""The dashboard's Host check (pgenough's, ``tests/dashboard/test_hosts.py``) where the plan
service mounts it: /ui answers only to its names, /search to every client as before; the
address the API binds is one of the dashboard's names; a bad name stops the API in one line."""

from __future__ import annotations

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.plan_service.api.helpers import api_start_error
from tests.plan_service.ui.conftest import ui_settings
from tests.plan_service.ui.server import UiServer

pytestmark = pytest.mark.db

FOREIGN = "rebound.example"


async def test_the_dashboard_refuses_a_foreign_host_and_search_does_not(
    db: AsyncConnectionPool, database_url: str
) -> None:
    settings = ui_settings(database_url, ui_allowed_hosts="", api_host="192.0.2.10")
    with UiServer(settings) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            foreign = {"host": f"{FOREIGN}:{server.port}"}
            for path in ("/ui/", "/ui/runs", "/ui/runs/1", "/ui/ext/plans/providers.js"):
                response = await client.get(path, headers=foreign)
                assert response.status_code == 421, path
                assert response.headers["x-frame-options"] == "DENY"
            search = await client.get("/search", headers=foreign)
            assert search.status_code == 200 and "x-frame-options" not in search.headers
            for host in ("192.0.2.10:8000", "localhost"):
                assert (await client.get("/ui/runs", headers={"host": host})).status_code == 200


def test_a_bad_allowed_host_stops_the_api_with_one_line(worker_env: dict[str, str]) -> None:
    env = dict(worker_env, PGENOUGH_UI_ALLOWED_HOSTS="dash.example.com, http://x")
    assert api_start_error(env) == (
        "error: invalid configuration: ui_allowed_hosts: 'http://x' is not a host name"
        " (comma-separated names, or * for any)"
    )
