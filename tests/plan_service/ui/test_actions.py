"""Who may see the dashboard and change things through it: read-only refusal, the token
(Bearer or login cookie), CSRF, and retry/discard changing real jobs."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue, get_job
from pgenough_plans.sim.server import SimServer
from tests.plan_service.api.helpers import IN_PROCESS_HOST, serving
from tests.plan_service.ui import scenes
from tests.plan_service.ui.conftest import TOKEN, ui_settings

pytestmark = pytest.mark.db

Pair = tuple[FastAPI, httpx.AsyncClient]
FORM = {"content-type": "application/x-www-form-urlencoded"}


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" (?:value|content)="([^"]+)"', page)
    assert match, "the page has no CSRF field"
    return match.group(1)


async def job_state(db: AsyncConnectionPool, job_id: int) -> str:
    async with db.connection() as conn:
        job = await get_job(conn, job_id)
    assert job is not None
    return job.state


async def noop_job(db: AsyncConnectionPool) -> int:
    async with db.connection() as conn:
        job_id = await enqueue(conn, "noop", queue="ops")
    assert job_id is not None
    return job_id


async def test_read_only_hides_buttons_and_refuses_posts(
    db: AsyncConnectionPool, sim: SimServer, ui: Pair
) -> None:
    _, client = ui
    scene = await scenes.build(db, sim)
    job = scene.dead[0]
    page = (await client.get("/ui/failures")).text
    assert "retry-dead" not in page and f"/ui/jobs/{job.id}/retry" not in page
    for path in (f"/ui/jobs/{job.id}/retry", f"/ui/jobs/{job.id}/discard", "/ui/jobs/retry-dead"):
        response = await client.post(path, data={"csrf": "x"})
        assert response.status_code == 403, path
        assert "PGENOUGH_UI_ACTIONS" in response.text
    assert await job_state(db, job.id) == "dead"


async def test_retry_and_discard_change_jobs_and_flash(
    db: AsyncConnectionPool, sim: SimServer, ui_actions: Pair
) -> None:
    _, client = ui_actions
    scene = await scenes.build(db, sim)
    first, *rest = scene.dead
    page = (await client.get("/ui/failures")).text
    assert f"/ui/jobs/{first.id}/retry" in page and 'id="retry-dead"' in page
    csrf = csrf_of(page)

    response = await client.post(
        f"/ui/jobs/{first.id}/retry", data={"csrf": csrf, "next": "/ui/failures"}
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/failures"
    assert await job_state(db, first.id) == "ready"
    flashed = await client.get("/ui/failures")
    assert f"job {first.id} will run again now" in flashed.text
    assert "will run again" not in (await client.get("/ui/failures")).text  # shown once

    doomed = await noop_job(db)
    response = await client.post(f"/ui/jobs/{doomed}/discard", data={"csrf": csrf})
    assert response.status_code == 303 and response.headers["location"] == "/ui/failures"
    assert await job_state(db, doomed) == "cancelled"
    assert f"job {doomed} discarded" in (await client.get("/ui/failures")).text

    response = await client.post("/ui/jobs/retry-dead", data={"csrf": csrf, "next": "//evil"})
    assert response.headers["location"] == "/ui/failures"  # no open redirect
    assert all([await job_state(db, j.id) == "ready" for j in rest])
    assert f"{len(rest)} dead jobs will run again now" in (await client.get("/ui")).text

    # A job no longer in a state the action applies to: told so, nothing changes.
    await client.post(f"/ui/jobs/{doomed}/discard", data={"csrf": csrf})
    again = (await client.get("/ui/failures")).text
    assert f"job {doomed}: nothing to cancel" in again


async def test_posts_need_a_valid_csrf_token_from_this_site(
    db: AsyncConnectionPool, ui_actions: Pair
) -> None:
    _, client = ui_actions
    job = await noop_job(db)
    csrf = csrf_of((await client.get("/ui/failures")).text)
    path = f"/ui/jobs/{job}/discard"
    assert (await client.post(path, data={})).status_code == 403
    assert (await client.post(path, data={"csrf": "f" * 64})).status_code == 403
    cross_site = {"origin": "http://evil.example", "sec-fetch-site": "cross-site"}
    assert (await client.post(path, data={"csrf": csrf}, headers=cross_site)).status_code == 403
    other_origin = {"origin": "http://evil.example"}
    assert (await client.post(path, data={"csrf": csrf}, headers=other_origin)).status_code == 403
    assert await job_state(db, job) == "ready"
    same = {"origin": f"http://{IN_PROCESS_HOST}", "sec-fetch-site": "same-origin"}
    assert (await client.post(path, data={"csrf": csrf}, headers=same)).status_code == 303
    assert await job_state(db, job) == "cancelled"


async def test_the_token_is_required_for_every_page_and_action(
    db: AsyncConnectionPool, database_url: str
) -> None:
    job = await noop_job(db)
    settings = ui_settings(database_url, ui_token=TOKEN, ui_actions=True)
    async with serving(settings) as (_, client):
        for path in ("/ui", "/ui/runs", "/ui/runs/1", "/ui/failures"):
            response = await client.get(path)
            assert response.status_code == 303, path
            assert response.headers["location"].startswith("/ui/login?next=/ui")
        for path in ("/ui/api/overview", "/ui/events"):
            response = await client.get(path)
            assert response.status_code == 401, path
            assert response.json()["error"]["code"] == "UNAUTHORIZED"
        assert (await client.post(f"/ui/jobs/{job}/discard", data={})).status_code == 401
        wrong = {"authorization": "Bearer nope"}
        assert (await client.get("/ui/api/overview", headers=wrong)).status_code == 401

        # Bearer: pages, JSON and actions (a browser never sends this header by itself, so
        # it needs no CSRF token).
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/ui", headers=bearer)).status_code == 200
        assert (await client.get("/ui/api/overview", headers=bearer)).status_code == 200
        response = await client.post(f"/ui/jobs/{job}/discard", headers=bearer, data={})
        assert response.status_code == 303
        assert await job_state(db, job) == "cancelled"


async def test_login_sets_a_strict_http_only_cookie(
    db: AsyncConnectionPool, database_url: str
) -> None:
    settings = ui_settings(database_url, ui_token=TOKEN)
    async with serving(settings) as (_, client):
        form = (await client.get("/ui/login?next=/ui/failures")).text
        csrf = csrf_of(form)
        bad = await client.post("/ui/login", data={"csrf": csrf, "token": "guess"})
        assert bad.status_code == 401 and "That is not the dashboard" in bad.text
        assert "pgenough_ui_session" not in client.cookies
        no_csrf = await client.post("/ui/login", data={"token": TOKEN, "next": "/ui"})
        assert no_csrf.status_code == 403

        ok = await client.post(
            "/ui/login", data={"csrf": csrf, "token": TOKEN, "next": "/ui/failures"}
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/ui/failures"
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        assert TOKEN not in ok.headers["set-cookie"]
        assert (await client.get("/ui")).status_code == 200
        assert (await client.get("/ui/api/overview")).status_code == 200

        page = (await client.get("/ui")).text
        out = await client.post("/ui/logout", data={"csrf": csrf_of(page)})
        assert out.status_code == 303
        assert (await client.get("/ui")).status_code == 303


async def test_a_forged_session_cookie_is_refused(database_url: str, db: object) -> None:
    async with serving(ui_settings(database_url, ui_token=TOKEN)) as (_, client):
        client.cookies.set("pgenough_ui_session", f"9999999999.{'0' * 64}", path="/ui")
        assert (await client.get("/ui")).status_code == 303
