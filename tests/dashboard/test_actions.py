"""Who may see the dashboard and change things through it: read-only refusal, the token
(Bearer or login cookie), CSRF, and retry/discard changing real jobs, one at a time or in
bulk (the jobs checked, or every dead job a filter matches), and pausing and resuming a
queue."""

from __future__ import annotations

import re

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue, get_job
from pgenough.core.admin import paused_queues, set_queue_limit
from tests.dashboard import scenes
from tests.dashboard.helpers import (
    IN_PROCESS_HOST,
    TOKEN,
    Pair,
    csrf_of,
    html,
    serving,
    text,
    ui_settings,
)

pytestmark = pytest.mark.db


async def job_state(db: AsyncConnectionPool, job_id: int) -> str:
    async with db.connection() as conn:
        job = await get_job(conn, job_id)
    assert job is not None
    return job.state


async def states(db: AsyncConnectionPool, ids: list[int]) -> list[str]:
    return [await job_state(db, i) for i in ids]


async def noop_job(db: AsyncConnectionPool) -> int:
    async with db.connection() as conn:
        job_id = await enqueue(conn, "noop", queue="ops")
    assert job_id is not None
    return job_id


ACTIONS = ("retry", "discard", "retry-dead", "discard-dead")


async def test_read_only_hides_buttons_and_refuses_posts(db: AsyncConnectionPool, ui: Pair) -> None:
    _, client = ui
    dead = await scenes.dead_letters(db)
    page = (await client.get("/ui/failures")).text
    assert "retry-dead" not in page and f"/ui/jobs/{dead[0]}/retry" not in page
    assert 'name="ids"' not in page and "Retry checked" not in page and "/jobs/retry" not in page
    paths = [f"/ui/jobs/{dead[0]}/retry", f"/ui/jobs/{dead[0]}/discard"]
    paths += [f"/ui/jobs/{action}" for action in ACTIONS]
    paths += ["/ui/queues/pause", "/ui/queues/resume"]
    for path in paths:
        data = {"csrf": "x", "ids": str(dead[0]), "queue": "billing"}
        response = await client.post(path, data=data)
        assert response.status_code == 403, path
        assert "PGENOUGH_UI_ACTIONS" in response.text
    assert await states(db, dead) == ["dead"] * 4
    queue_page = (await client.get("/ui/jobs?queue=billing")).text
    assert 'id="queue-pause"' in queue_page and "/queues/pause" not in queue_page
    async with db.connection() as conn:
        assert await paused_queues(conn) == []


async def test_retry_and_discard_change_jobs_and_flash(
    db: AsyncConnectionPool, ui_actions: Pair
) -> None:
    _, client = ui_actions
    first, *rest = await scenes.dead_letters(db)
    page = (await client.get("/ui/failures")).text
    assert f"/ui/jobs/{first}/retry" in page and 'id="retry-dead"' in page
    csrf = csrf_of(page)

    response = await client.post(
        f"/ui/jobs/{first}/retry", data={"csrf": csrf, "next": "/ui/failures"}
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/failures"
    assert await job_state(db, first) == "ready"
    flashed = await client.get("/ui/failures")
    assert f"job {first} will run again now" in flashed.text
    assert "will run again" not in (await client.get("/ui/failures")).text  # shown once

    doomed = await noop_job(db)
    response = await client.post(
        f"/ui/jobs/{doomed}/discard", data={"csrf": csrf, "next": "/ui/failures"}
    )
    assert response.status_code == 303 and response.headers["location"] == "/ui/failures"
    assert await job_state(db, doomed) == "cancelled"
    assert f"job {doomed} discarded" in (await client.get("/ui/failures")).text

    response = await client.post("/ui/jobs/retry-dead", data={"csrf": csrf, "next": "//evil"})
    assert response.headers["location"] == "/ui/"  # no open redirect: the overview
    assert await states(db, rest) == ["ready"] * 3
    assert f"{len(rest)} dead jobs will run again now" in (await client.get("/ui/")).text

    # A job no longer in a state the action applies to: told so, nothing changes.
    await client.post(f"/ui/jobs/{doomed}/discard", data={"csrf": csrf})
    again = (await client.get("/ui/")).text
    assert f"job {doomed}: nothing to cancel" in again


async def test_the_jobs_checked_are_retried_or_discarded_together(
    db: AsyncConnectionPool, ui_actions: Pair
) -> None:
    _, client = ui_actions
    charge_ann, charge_bob, charge_other_ann, refund_ann = await scenes.dead_letters(db)
    page = html(await client.get("/ui/failures", params={"state": "dead"}))
    for job_id in (charge_ann, charge_bob, charge_other_ann, refund_ann):
        assert f'name="ids" value="{job_id}"' in page
    csrf = csrf_of(page)
    back = "/ui/failures?state=dead"

    checked = [("csrf", csrf), ("next", back), ("ids", str(charge_ann)), ("ids", str(refund_ann))]
    response = await client.post("/ui/jobs/retry", data=dict(checked[:2]), params=None)
    assert response.status_code == 303  # nothing checked: told so
    assert "no job checked" in (await client.get(back)).text
    response = await client.post(
        "/ui/jobs/retry",
        content="&".join(f"{k}={v}" for k, v in checked),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 303 and response.headers["location"] == back
    assert await states(db, [charge_ann, charge_bob, charge_other_ann, refund_ann]) == [
        "ready",
        "dead",
        "dead",
        "ready",
    ]
    assert "2 jobs will run again now" in (await client.get(back)).text

    # One already done (the retried charge is ready: a discard still applies to it), one
    # gone: counted apart.
    body = f"csrf={csrf}&next={back}&ids={charge_bob}&ids={charge_ann}&ids=999999999"
    response = await client.post(
        "/ui/jobs/discard",
        content=body,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 303
    assert await states(db, [charge_ann, charge_bob, charge_other_ann]) == [
        "cancelled",
        "cancelled",
        "dead",
    ]
    flash = text((await client.get(back)).text)
    assert "2 jobs discarded; 1 job no longer in a state it applies to" in flash


async def test_every_dead_job_matching_the_filter_is_retried_or_discarded(
    db: AsyncConnectionPool, ui_actions: Pair
) -> None:
    _, client = ui_actions
    charge_ann, charge_bob, charge_other_ann, refund_ann = await scenes.dead_letters(db)
    other_queue = await scenes.dead_letters(db, queue="billing-eu")
    filtered = "/ui/failures?state=dead&queue=billing&task=charge&text=ANN"
    page = html(await client.get(filtered))
    # The form carries the filter the page shows.
    for field in ('name="queue" value="billing"', 'name="task" value="charge"'):
        assert field in page
    csrf = csrf_of(page)
    form = {"csrf": csrf, "next": filtered, "queue": "billing", "task": "charge", "text": "ANN"}
    response = await client.post("/ui/jobs/retry-dead", data=form)
    assert response.status_code == 303 and response.headers["location"] == filtered
    assert await states(db, [charge_ann, charge_bob, charge_other_ann, refund_ann]) == [
        "ready",
        "dead",
        "ready",
        "dead",
    ]
    assert "2 dead jobs will run again now" in (await client.get(filtered)).text
    assert await states(db, other_queue) == ["dead"] * 4

    form = {"csrf": csrf, "next": filtered, "queue": "billing", "task": "", "text": ""}
    response = await client.post("/ui/jobs/discard-dead", data=form)
    assert response.status_code == 303
    assert await states(db, [charge_bob, refund_ann]) == ["cancelled", "cancelled"]
    assert await states(db, [charge_ann, charge_other_ann]) == ["ready", "ready"]
    assert await states(db, other_queue) == ["dead"] * 4
    assert "2 dead jobs discarded" in (await client.get(filtered)).text


async def test_a_queue_is_paused_and_resumed_from_its_jobs_page(
    db: AsyncConnectionPool, ui_actions: Pair
) -> None:
    _, client = ui_actions
    await noop_job(db)
    page = html(await client.get("/ui/jobs?queue=ops"))
    assert 'id="pause-queue"' in page and 'data-paused=""' in page
    csrf = csrf_of(page)
    form = {"csrf": csrf, "next": "/ui/jobs?queue=ops", "queue": "ops", "reason": "  deploy  "}
    response = await client.post("/ui/queues/pause", data=form)
    assert response.status_code == 303 and response.headers["location"] == "/ui/jobs?queue=ops"
    async with db.connection() as conn:
        assert [(p.queue, p.reason) for p in await paused_queues(conn)] == [("ops", "deploy")]
    page = html(await client.get("/ui/jobs?queue=ops"))
    assert "queue ops paused" in page  # the flash
    assert 'data-paused="1"' in page and 'id="resume-queue"' in page and "(deploy)" in page
    async with db.connection() as conn:
        await set_queue_limit(conn, "ops", 4)
    overview = html(await client.get("/ui/"))
    assert re.search(r'data-queue="ops".*?st-paused.*?limit 4', overview, re.S), overview
    await client.post("/ui/queues/pause", data=form)
    assert "queue ops was already paused" in html(await client.get("/ui/jobs?queue=ops"))

    response = await client.post("/ui/queues/resume", data={"csrf": csrf, "queue": "ops"})
    assert response.status_code == 303
    async with db.connection() as conn:
        assert await paused_queues(conn) == []
    assert "queue ops resumed" in html(await client.get("/ui/"))
    await client.post("/ui/queues/resume", data={"csrf": csrf, "queue": "ops"})
    assert "queue ops was not paused" in html(await client.get("/ui/"))
    # No queue named, or a reason too long: nothing paused, said so.
    await client.post("/ui/queues/pause", data={"csrf": csrf, "queue": " "})
    assert "no queue given: nothing done" in html(await client.get("/ui/"))
    long = {"csrf": csrf, "queue": "ops", "reason": "x" * 201}
    assert (await client.post("/ui/queues/pause", data=long)).status_code == 400
    async with db.connection() as conn:
        assert await paused_queues(conn) == []


async def test_posts_need_a_valid_csrf_token_from_this_site(
    db: AsyncConnectionPool, ui_actions: Pair
) -> None:
    _, client = ui_actions
    job = await noop_job(db)
    csrf = csrf_of((await client.get("/ui/failures")).text)
    for path, data in (
        (f"/ui/jobs/{job}/discard", {}),
        ("/ui/jobs/discard", {"ids": str(job)}),
        ("/ui/jobs/discard-dead", {}),
        ("/ui/queues/pause", {"queue": "ops"}),
    ):
        assert (await client.post(path, data=data)).status_code == 403
        assert (await client.post(path, data={**data, "csrf": "f" * 64})).status_code == 403
        cross_site = {"origin": "http://evil.example", "sec-fetch-site": "cross-site"}
        forged = {**data, "csrf": csrf}
        assert (await client.post(path, data=forged, headers=cross_site)).status_code == 403
        other_origin = {"origin": "http://evil.example"}
        assert (await client.post(path, data=forged, headers=other_origin)).status_code == 403
    assert await job_state(db, job) == "ready"
    same = {"origin": f"http://{IN_PROCESS_HOST}", "sec-fetch-site": "same-origin"}
    path = f"/ui/jobs/{job}/discard"
    assert (await client.post(path, data={"csrf": csrf}, headers=same)).status_code == 303
    assert await job_state(db, job) == "cancelled"


async def test_the_token_is_required_for_every_page_and_action(
    db: AsyncConnectionPool, database_url: str
) -> None:
    job = await noop_job(db)
    settings = ui_settings(database_url, ui_token=TOKEN, ui_actions=True)
    async with serving(settings) as (_, client):
        for path in (
            "/ui/",
            "/ui/jobs",
            "/ui/jobs/1",
            "/ui/failures",
            "/ui/workers",
            "/ui/periodic",
        ):
            response = await client.get(path)
            assert response.status_code == 303, path
            assert response.headers["location"].startswith("/ui/login?next=/ui/")
        for path in ("/ui/api/overview", "/ui/api/history", "/ui/events"):
            response = await client.get(path)
            assert response.status_code == 401, path
            assert response.json()["error"]["code"] == "UNAUTHORIZED"
        for action in (f"{job}/discard", "discard", "discard-dead"):
            response = await client.post(f"/ui/jobs/{action}", data={"ids": str(job)})
            assert response.status_code == 401, action
        wrong = {"authorization": "Bearer nope"}
        assert (await client.get("/ui/api/overview", headers=wrong)).status_code == 401

        # Bearer: pages, JSON and actions (a browser never sends this header by itself, so
        # it needs no CSRF token).
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert (await client.get("/ui/", headers=bearer)).status_code == 200
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
        no_csrf = await client.post("/ui/login", data={"token": TOKEN, "next": "/ui/"})
        assert no_csrf.status_code == 403

        ok = await client.post(
            "/ui/login", data={"csrf": csrf, "token": TOKEN, "next": "/ui/failures"}
        )
        assert ok.status_code == 303 and ok.headers["location"] == "/ui/failures"
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        assert TOKEN not in ok.headers["set-cookie"]
        assert (await client.get("/ui/")).status_code == 200
        assert (await client.get("/ui/api/overview")).status_code == 200

        page = (await client.get("/ui/")).text
        out = await client.post("/ui/logout", data={"csrf": csrf_of(page)})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert (await client.get("/ui/")).status_code == 303


async def test_a_forged_session_cookie_is_refused(database_url: str, db: object) -> None:
    async with serving(ui_settings(database_url, ui_token=TOKEN)) as (_, client):
        client.cookies.set("pgenough_ui_session", f"9999999999.{'0' * 64}", path="/ui")
        assert (await client.get("/ui/")).status_code == 303
