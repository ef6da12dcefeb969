"""The dashboard's pages on a core-only database (the core's schema and the dashboard's table,
nothing of any application): what the overview shows per queue and overall, its JSON, the
static files, its errors, and a dashboard whose lifespan nobody ran."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue
from tests.dashboard import scenes
from tests.dashboard.helpers import Pair, dashboard_of, host_app, html, text, ui_settings

pytestmark = pytest.mark.db


async def test_the_overview_shows_each_queue_and_all_of_them(
    db: AsyncConnectionPool, ui: Pair
) -> None:
    _, client = ui
    dead = await scenes.dead_letters(db)
    async with scenes.jobs(db):
        async with db.connection() as conn:
            await conn.execute(
                "UPDATE pgenough.jobs SET run_at = now() - interval '90 seconds'"
                " WHERE queue = 'ops' AND state = 'ready' AND run_at <= now()"
            )
        async with db.connection() as conn:
            schemas = await conn.execute("SELECT to_regnamespace('plans') IS NOT NULL")
            assert await schemas.fetchone() == (False,)  # nothing but the queue's own
        page = html(await client.get("/ui/"))
        body = (await client.get("/ui/api/overview")).json()
    shown = text(page)
    # Per queue: ready, scheduled, running, dead, oldest ready, done, dead lately, failed
    # attempts (nothing completed: every job here failed, waits or runs).
    assert "billing 0 0 0 4 — 0 4 4" in shown
    assert "ops 1 1 0 1 1 min 30 s 0 1 2" in shown
    assert "slow 0 0 1 0 — 0 0 0" in shown
    assert "all queues 1 1 1 5 1 min 30 s 0 5 6" in shown
    assert 'href="/ui/jobs?queue=billing"' in page
    assert "jobs dead-lettered" in shown and "failed job attempts" in shown
    assert "runs failed" not in shown and "Providers" not in shown  # no application's
    assert "read-only" in shown
    assert len(dead) == 4

    assert body["error"] is None
    data = body["data"]
    assert [q["queue"] for q in data["queues"]] == ["billing", "ops", "slow"]
    assert data["total"]["dead"] == 5 and data["total"]["queue"] == ""
    assert data["window"] == 3600.0 and data["sections"] == {}


async def test_an_empty_queue_says_so(ui: Pair) -> None:
    _, client = ui
    page = text(html(await client.get("/ui/")))
    assert "No jobs queued." in page and "all queues 0 0 0 0 — 0 0 0" in page


async def test_unknown_pages_are_404_pages_and_json_endpoints_say_it_in_json(ui: Pair) -> None:
    _, client = ui
    assert "no page /nowhere" in html(await client.get("/ui/nowhere"), 404)
    assert "no page" in html(await client.get("/ui/jobs/abc"), 404)
    response = await client.get("/ui/api/nowhere")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"
    # A method a page does not take: the same 404 page, never a bare JSON detail.
    assert "no page /jobs" in html(await client.post("/ui/jobs"), 404)
    # A method no page takes: the dashboard's page too, not the framework's JSON.
    put = html(await client.put("/ui/jobs"), 405)
    assert "Method Not Allowed" in put and 'href="/ui/static/ui.css"' in put


async def test_static_files_are_served(ui: Pair) -> None:
    _, client = ui
    css = await client.get("/ui/static/ui.css")
    js = await client.get("/ui/static/live.js")
    assert css.status_code == js.status_code == 200
    assert "EventSource" in js.text and "pgenoughDashboard" in js.text


async def test_a_bug_shows_the_error_page_with_a_request_id(
    db: AsyncConnectionPool, ui: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = ui

    async def broken(*args: object, **kwargs: object) -> list[str]:
        raise RuntimeError("a bug")

    monkeypatch.setattr("pgenough.dashboard.pages.list_jobs", broken)
    response = await client.get("/ui/jobs")
    page = html(response, 500)
    rid = response.headers["x-request-id"]
    assert rid and f"request id {rid}" in page
    assert "Something went wrong" in page and "a bug" not in page
    # A client's own id is kept, for its logs and ours.
    again = await client.get("/ui/jobs", headers={"x-request-id": "mine-42"})
    assert again.headers["x-request-id"] == "mine-42" and "request id mine-42" in again.text


async def test_a_dashboard_whose_lifespan_nobody_ran_says_how_to_run_it(
    database_url: str, db: object
) -> None:
    import httpx

    dashboard = dashboard_of(ui_settings(database_url))
    # Starlette runs no lifespan of a mounted app: the host forgot to run the dashboard's.
    app = host_app(dashboard, "/queue", lifespan=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as client:
        for path in ("/queue/", "/queue/jobs", "/queue/login"):
            response = await client.get(path)
            page = html(response, 503)
            assert "Dashboard not started" in page, path
            assert "lifespan=dashboard.lifespan" in page and "Traceback" not in page
            assert 'href="/queue/static/ui.css"' in page  # still styled, at its mount
        api = await client.get("/queue/api/overview")
        assert api.status_code == 503 and api.json()["error"]["code"] == "UNAVAILABLE"
        assert (await client.get("/queue/static/ui.css")).status_code == 200


async def test_the_queues_page_links_follow_the_filters(db: AsyncConnectionPool, ui: Pair) -> None:
    _, client = ui
    async with db.connection() as conn:
        await enqueue(conn, "send_mail", {"to": "ann"}, queue="mail")
    page = html(await client.get("/ui/jobs", params={"queue": "mail", "task": "send_mail"}))
    # Each state's tab keeps the other filters.
    assert 'href="/ui/jobs?state=dead&amp;queue=mail&amp;task=send_mail&amp;text="' in page
