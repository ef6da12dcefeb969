"""The jobs browser (/ui/jobs, /ui/jobs/{id}) on real jobs: one in each state, the running one
held by a real worker, the dead one failed by real attempts, and chunk jobs of a real run."""

from __future__ import annotations

import dataclasses
import html as markup
import re

import httpx
import pytest
from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue
from pgenough_plans.sim.server import SimServer
from tests.plan_service.api.helpers import serving
from tests.plan_service.ui import scenes
from tests.plan_service.ui.conftest import TOKEN, ui_settings
from tests.plan_service.ui.test_actions import csrf_of, job_state
from tests.plan_service.ui.test_pages import html, text

pytestmark = pytest.mark.db

Pair = tuple[FastAPI, httpx.AsyncClient]


def listed(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'<tr id="job-\d+" data-job="(\d+)"', page)]


def row(page: str, job_id: int) -> str:
    match = re.search(rf'<tr id="job-{job_id}".*?</tr>', page, flags=re.DOTALL)
    assert match, f"job {job_id} is not listed"
    return text(match.group(0))


async def test_jobs_page_lists_each_state_and_queue(db: AsyncConnectionPool, ui: Pair) -> None:
    _, client = ui
    async with scenes.jobs(db) as s:
        page = html(await client.get("/ui/jobs"))
        assert listed(page) == s.everything
        assert '<a href="/ui/jobs" class="active">Jobs</a>' in page
        # Tabs count every state, scheduled jobs among the ready.
        assert "all 5 ready 2 running 1 dead 1 cancelled 1" in text(page)

        by_state = {
            "ready": [s.scheduled, s.ready],
            "running": [s.running],
            "dead": [s.dead],
            "cancelled": [s.cancelled],
        }
        for state, ids in by_state.items():
            got = html(await client.get("/ui/jobs", params={"state": state}))
            assert listed(got) == ids, state
        slow = html(await client.get("/ui/jobs", params={"queue": "slow"}))
        assert listed(slow) == [s.running]
        assert "all 1 ready 0 running 1 dead 0 cancelled 0" in text(slow)
        ops = html(await client.get("/ui/jobs", params={"queue": "ops", "state": "READY"}))
        assert listed(ops) == [s.scheduled, s.ready]
        none = html(await client.get("/ui/jobs", params={"queue": "ops", "state": "running"}))
        assert listed(none) == [] and "No jobs match." in none
        assert '<option value="slow" >slow</option>' in none  # the queue filter's names

        running = row(page, s.running)
        assert s.worker in running and "running" in running
        assert re.search(r"\d+ s ", running), running  # the lease, relative ("in 29 s")
        assert re.search(r"in 4 min \d+ s", row(page, s.scheduled))
        dead = row(page, s.dead)
        assert "gave up: upstream said no" in dead and "2/5" in dead
        # Read-only: no buttons, no forms posting anywhere.
        assert "/retry" not in page and "/discard" not in page

    overview = html(await client.get("/ui"))
    assert '<a href="/ui/jobs?queue=ops">ops</a>' in overview


async def test_jobs_page_is_keyset_paged(db: AsyncConnectionPool, ui: Pair) -> None:
    app, client = ui
    state = app.state.ui
    app.state.ui = dataclasses.replace(state, config=dataclasses.replace(state.config, jobs_page=2))
    async with scenes.jobs(db) as s:
        seen: list[int] = []
        url: str | None = "/ui/jobs?state=&queue="
        while url is not None:
            page = html(await client.get(url))
            ids = listed(page)
            assert len(ids) <= 2
            seen += ids
            older = re.search(r'id="older" href="([^"]+)"', page)
            url = markup.unescape(older.group(1)) if older else None
        assert seen == s.everything
        ready = html(await client.get("/ui/jobs", params={"state": "ready", "before": s.scheduled}))
        assert listed(ready) == [s.ready] and 'id="older"' not in ready


async def test_job_detail_shows_payload_times_and_error_history(
    db: AsyncConnectionPool, ui: Pair
) -> None:
    _, client = ui
    async with scenes.jobs(db) as s:
        page = html(await client.get(f"/ui/jobs/{s.dead}"))
        payload = re.search(r'<pre class="payload" id="payload">(.*?)</pre>', page, re.DOTALL)
        assert payload is not None
        assert markup.unescape(payload.group(1)) == (
            '{\n  "note": "naïve <b>bold</b>",\n  "order": 7\n}'
        )
        assert "<b>bold</b>" not in page  # escaped, never markup
        errors = re.search(r'<table class="grid" id="errors">.*?</table>', page, re.DOTALL)
        assert errors is not None
        history = text(errors.group(0))
        assert re.search(r"1 \S+ \S+ UTC flaky-worker upstream timed out \(retry in 0s\)", history)
        assert re.search(r"2 \S+ \S+ UTC flaky-worker gave up: upstream said no", history)
        assert "Errors (2;" in text(page) and "2 of 5" in text(page)

        held = text(html(await client.get(f"/ui/jobs/{s.running}")))
        assert s.worker in held and "lease until" in held and "claimed" in held
        assert "No failed attempt recorded." in held and '"n": 4' in markup.unescape(held)


async def test_chunk_jobs_link_to_their_run(
    db: AsyncConnectionPool, sim: SimServer, ui: Pair
) -> None:
    _, client = ui
    staged = await scenes.dead_chunks(db, sim, "gamma")
    async with db.connection() as conn:
        # Not a chunk job, though its payload names a run.
        other = await enqueue(conn, "report", {"run_id": staged.run_id}, queue="ops")
    page = html(await client.get("/ui/jobs", params={"queue": "plans", "state": "dead"}))
    chunks = listed(page)
    assert chunks and all(f"#{staged.run_id}" in row(page, j) for j in chunks)
    assert f'href="/ui/runs/{staged.run_id}"' in page
    detail = html(await client.get(f"/ui/jobs/{chunks[0]}"))
    assert f'href="/ui/runs/{staged.run_id}"' in detail and "disk full (test)" in detail
    assert f"/ui/runs/{staged.run_id}" not in html(await client.get(f"/ui/jobs/{other}"))


async def test_unknown_job_and_bad_filters(ui: Pair) -> None:
    _, client = ui
    missing = text(html(await client.get("/ui/jobs/999999999"), 404))
    assert "there is no job 999999999" in missing
    assert "completed jobs are deleted; it may have finished" in missing
    for params, message in (
        ({"state": "done"}, "state must be one of ready, running, dead, cancelled"),
        ({"before": "abc"}, "before must be a job id"),
        ({"before": "-1"}, "before must be a job id"),
    ):
        page = html(await client.get("/ui/jobs", params=params), 400)
        assert message in page and "Bad filter" in page
    assert "no page" in html(await client.get("/ui/jobs/abc"), 404)


async def test_retry_and_discard_from_the_jobs_pages(
    db: AsyncConnectionPool, ui_actions: Pair
) -> None:
    _, client = ui_actions
    async with scenes.jobs(db) as s:
        page = html(await client.get("/ui/jobs", params={"state": "dead"}))
        assert f"/ui/jobs/{s.dead}/retry" in page and f"/ui/jobs/{s.dead}/discard" in page
        csrf = csrf_of(page)
        back = "/ui/jobs?state=dead&queue="
        response = await client.post(f"/ui/jobs/{s.dead}/retry", data={"csrf": csrf, "next": back})
        assert response.status_code == 303 and response.headers["location"] == back
        assert await job_state(db, s.dead) == "ready"
        assert f"job {s.dead} will run again now" in (await client.get(back)).text

        detail = html(await client.get(f"/ui/jobs/{s.running}"))
        assert f"/ui/jobs/{s.running}/discard" in detail
        assert f"/ui/jobs/{s.running}/retry" not in detail  # a running job is not retried
        here = f"/ui/jobs/{s.running}"
        response = await client.post(f"{here}/discard", data={"csrf": csrf, "next": here})
        assert response.status_code == 303 and response.headers["location"] == here
        assert await job_state(db, s.running) == "cancelled"
        after = text(html(await client.get(here)))
        assert f"job {s.running} discarded" in after and "cancelled" in after


async def test_the_jobs_pages_need_the_token(db: AsyncConnectionPool, database_url: str) -> None:
    async with db.connection() as conn:
        job = await enqueue(conn, "noop", queue="ops")
    settings = ui_settings(database_url, ui_token=TOKEN)
    async with serving(settings) as (_, client):
        for path in ("/ui/jobs", f"/ui/jobs/{job}", "/ui/jobs?state=nope"):
            response = await client.get(path)
            assert response.status_code == 303, path
            assert response.headers["location"].startswith("/ui/login?next=/ui/jobs")
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/ui/jobs", headers=bearer)).status_code == 200
        assert (await client.get(f"/ui/jobs/{job}", headers=bearer)).status_code == 200
