"""The plan service's pages of the dashboard (pgenough's, mounted at /ui by the API, with
the plan service's extension) from real ingestions: the overview's Providers section, the
runs and a run, the failures of chunk jobs; their filters and errors."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.sim.server import SimServer
from tests.dashboard.helpers import html, text
from tests.plan_service.api.helpers import serving
from tests.plan_service.ui import scenes
from tests.plan_service.ui.conftest import ui_settings

pytestmark = pytest.mark.db

Pair = tuple[FastAPI, httpx.AsyncClient]


async def test_pages_show_a_real_ingestion(
    db: AsyncConnectionPool, sim: SimServer, ui: Pair
) -> None:
    _, client = ui
    scene = await scenes.build(db, sim)

    bare = await client.get("/ui")
    assert bare.status_code == 307 and bare.headers["location"] == "/ui/"
    page = html(await client.get("/ui/"))
    overview = text(page)
    for provider in ("alpha", "beta", "gamma"):
        assert provider in overview
    assert f"#{scene.ok.run_id}" in overview and f"#{scene.failed.run_id}" in overview
    assert f"{scene.ok.plans_staged:,}" in overview
    assert "PROCESSED" in overview and "FAILED" in overview and "STAGED" in overview
    assert "404" in overview  # beta's reason
    assert "1 runs failed" in overview and "plans processed / min" in overview
    assert "read-only" in overview
    # The queue's own part, below: the plans queue's dead chunks.
    assert re.search(rf"plans 0 0 0 {len(scene.dead)} ", overview), overview
    assert '<script src="/ui/ext/plans/providers.js">' in page
    assert '<a href="/ui/runs" >Runs</a>' in page  # the extension's navigation entry

    runs = text(html(await client.get("/ui/runs")))
    assert all(f"#{r.run_id}" in runs for r in (scene.ok, scene.failed, scene.stuck))

    run = html(await client.get(f"/ui/runs/{scene.ok.run_id}"))
    assert "Skipped records" in run and f"{scene.ok.plans_skipped:,}" in text(run)
    assert "fetch and stage" in run and "process" in run
    assert 'class="pill st-processed"' in run  # the HTTP attempt's 200 and the run itself

    stuck = text(html(await client.get(f"/ui/runs/{scene.stuck.run_id}")))
    assert "disk full (test)" in stuck and "dead" in stuck
    assert all(str(j.id) in stuck for j in scene.dead)

    failures = html(await client.get("/ui/failures"))
    assert "disk full (test)" in failures
    assert f'href="/ui/runs/{scene.stuck.run_id}"' in failures  # each chunk's run
    assert "Retry" not in text(failures) and "/retry" not in failures  # read-only: no buttons
    failed_runs = text(html(await client.get("/ui/runs", params={"status": "FAILED"})))
    assert f"#{scene.failed.run_id}" in failed_runs and f"#{scene.ok.run_id}" not in failed_runs

    body = (await client.get("/ui/api/overview")).json()
    assert body["error"] is None
    section = body["data"]["sections"]["providers"]
    assert [p["provider"] for p in section["providers"]] == ["alpha", "beta", "gamma"]
    assert section["runs_failed"] == 1 and section["throughput"]


async def test_runs_filters_and_keyset_paging(
    db: AsyncConnectionPool, sim: SimServer, database_url: str
) -> None:
    scene = await scenes.build(db, sim)
    async with serving(ui_settings(database_url)) as (_, client):
        failed = text(html(await client.get("/ui/runs", params={"status": "failed"})))
        assert f"#{scene.failed.run_id}" in failed and f"#{scene.ok.run_id}" not in failed
        alpha = text(html(await client.get("/ui/runs", params={"provider": "alpha"})))
        assert f"#{scene.ok.run_id}" in alpha and f"#{scene.failed.run_id}" not in alpha
        older = text(html(await client.get("/ui/runs", params={"before": scene.stuck.run_id})))
        assert f"#{scene.stuck.run_id}" not in older and f"#{scene.ok.run_id}" in older
        bad = html(await client.get("/ui/runs", params={"status": "DONE"}), 400)
        assert "status must be one of" in bad


async def test_runs_page_links_to_older_runs(
    db: AsyncConnectionPool, sim: SimServer, ui: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = ui
    scene = await scenes.build(db, sim)
    monkeypatch.setattr("pgenough_plans.api.ui.pages.RUNS_PAGE", 2)
    page = html(await client.get("/ui/runs"))
    assert f'before={scene.failed.run_id}"' in page  # the third run is on the next page
    nxt = text(html(await client.get("/ui/runs", params={"before": scene.failed.run_id})))
    assert f"#{scene.ok.run_id}" in nxt and f"#{scene.stuck.run_id}" not in nxt


async def test_unknown_run_and_page_are_404_pages(ui: Pair) -> None:
    _, client = ui
    page = html(await client.get("/ui/runs/999999999"), 404)
    assert "there is no run 999999999" in page
    assert "no page" in html(await client.get("/ui/nowhere"), 404)
    assert "no page" in html(await client.get("/ui/runs/abc"), 404)
    # The JSON endpoints answer with the API's envelope.
    response = await client.get("/ui/api/nowhere")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"


async def test_static_files_are_served(ui: Pair) -> None:
    _, client = ui
    css = await client.get("/ui/static/ui.css")
    js = await client.get("/ui/static/live.js")
    providers = await client.get("/ui/ext/plans/providers.js")
    assert css.status_code == js.status_code == providers.status_code == 200
    assert "EventSource" in js.text and 'section("providers"' in providers.text


async def test_a_bug_shows_the_error_page_with_a_request_id(
    ui: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = ui

    async def broken(conn: object) -> list[str]:
        raise RuntimeError("a bug")

    monkeypatch.setattr("pgenough_plans.ingest.inspect.provider_names", broken)
    page = html(await client.get("/ui/runs"), 500)
    rid = (await client.get("/ui/runs")).headers["x-request-id"]
    assert "Something went wrong" in page and "request id" in page and "a bug" not in page
    assert rid
