"""The jobs browser (/ui/jobs, /ui/jobs/{id}) on real jobs: one in each state, the running one
held by a real worker, the dead ones failed by real attempts with their tracebacks; filtered
by queue, task, state and payload text."""

from __future__ import annotations

import dataclasses
import html as markup
import re

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue
from pgenough.core.failures import ERRORS_KEPT, TRACEBACKS_KEPT
from tests.dashboard import scenes
from tests.dashboard.helpers import TOKEN, Pair, csrf_of, html, serving, text, ui_settings
from tests.dashboard.test_actions import job_state

pytestmark = pytest.mark.db


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

    overview = html(await client.get("/ui/"))
    assert '<a href="/ui/jobs?queue=ops">ops</a>' in overview


async def test_jobs_page_is_keyset_paged(db: AsyncConnectionPool, ui: Pair) -> None:
    dashboard, client = ui
    state = dashboard.state
    assert state is not None
    config = dataclasses.replace(state.config, jobs_page=2)
    dashboard.state = dataclasses.replace(state, config=config)
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
        assert re.search(
            r"1 \S+ \S+ UTC flaky-worker upstream timed out \(retry in 0s\) no traceback kept",
            history,
        )
        assert re.search(r"2 \S+ \S+ UTC flaky-worker gave up: upstream said no traceback", history)
        assert "Failed attempts (2, oldest first)" in text(page) and "2 of 5" in text(page)

        held = text(html(await client.get(f"/ui/jobs/{s.running}")))
        assert s.worker in held and "lease until" in held and "claimed" in held
        assert "No failed attempt recorded." in held and '"n": 4' in markup.unescape(held)


def tracebacks(page: str) -> list[str]:
    """The tracebacks a job's page shows, as text, in its order."""
    found = re.findall(r'<pre class="traceback">(.*?)</pre>', page, flags=re.DOTALL)
    return [markup.unescape(t) for t in found]


async def test_a_jobs_page_shows_each_attempts_full_traceback_escaped(
    db: AsyncConnectionPool, ui: Pair
) -> None:
    _, client = ui
    dead = await scenes.dead_letters(db)
    page = html(await client.get(f"/ui/jobs/{dead[0]}"))
    [shown] = tracebacks(page)
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT errors -> -1 ->> 'traceback' FROM pgenough.jobs WHERE id = %s", (dead[0],)
        )
        row = await cur.fetchone()
    assert row is not None and shown == row[0]  # whole, as the worker recorded it
    assert "CardDeclined: card of ann@example.com declined" in shown
    assert "The above exception was the direct cause" in shown
    assert "RuntimeError: charge for order 100 failed" in shown
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    retention = text(page)
    assert f"keeps its last {ERRORS_KEPT} failed attempts" in retention
    assert f"the traceback of the last {TRACEBACKS_KEPT} that had one" in retention


def _entry(n: int, traceback: bool) -> str:
    """SQL for one entry of ``jobs.errors``: attempt ``n``, with a traceback or not."""
    kept = f", 'traceback', 'Traceback {n}'" if traceback else ""
    return (
        f"jsonb_build_object('attempt', {n}, 'at', now(), 'worker', 'w', 'error', 'boom {n}'{kept})"
    )


async def test_every_kept_attempt_is_shown_newest_last_with_its_traceback(
    db: AsyncConnectionPool, ui: Pair
) -> None:
    """A job retried by hand again and again keeps the newest ``ERRORS_KEPT`` attempts, the
    newest ``TRACEBACKS_KEPT`` of them with their traceback: all shown, in order."""
    _, client = ui
    first_kept = ERRORS_KEPT - TRACEBACKS_KEPT + 1
    entries = ", ".join(_entry(n, n >= first_kept) for n in range(1, ERRORS_KEPT + 1))
    async with db.connection() as conn:
        job_id = await enqueue(conn, "flaky", {"n": 1}, queue="ops")
        await conn.execute(
            f"UPDATE pgenough.jobs SET state = 'dead', finished_at = now(),"
            f" last_error = 'boom {ERRORS_KEPT}', errors = jsonb_build_array({entries})"
            " WHERE id = %s",
            (job_id,),
        )
    page = html(await client.get(f"/ui/jobs/{job_id}"))
    attempts = [int(n) for n in re.findall(r'<tr class="attempt" data-attempt="(\d+)"', page)]
    assert attempts == list(range(1, ERRORS_KEPT + 1))
    assert tracebacks(page) == [f"Traceback {n}" for n in range(first_kept, ERRORS_KEPT + 1)]
    assert page.count("no traceback kept") == ERRORS_KEPT - TRACEBACKS_KEPT
    # The newest traceback is open; the older ones a click away.
    assert page.count('<details class="traceback" open>') == 1


async def test_jobs_are_filtered_by_task_and_payload_text(
    db: AsyncConnectionPool, ui: Pair
) -> None:
    _, client = ui
    charge_ann, charge_bob, charge_other_ann, refund_ann = await scenes.dead_letters(db)
    async with db.connection() as conn:
        mail = await enqueue(conn, "send_mail", {"to": "ann@example.com"}, queue="mail")

    async def shown(**params: str) -> list[int]:
        return listed(html(await client.get("/ui/jobs", params=params)))

    assert await shown(task="charge") == [charge_other_ann, charge_bob, charge_ann]
    # A piece of the payload's JSON text, any case.
    assert await shown(text="ANN") == [mail, refund_ann, charge_other_ann, charge_ann]
    assert await shown(text='"order": 101') == [charge_bob]
    assert await shown(task="charge", text="ann", queue="billing", state="dead") == [
        charge_other_ann,
        charge_ann,
    ]
    assert await shown(task="charge", text="nobody") == []
    page = html(await client.get("/ui/jobs", params={"task": "charge", "text": "ann"}))
    assert 'name="task" value="charge"' in page and 'name="text" value="ann"' in page


async def test_paging_keeps_the_filters(db: AsyncConnectionPool, ui: Pair) -> None:
    dashboard, client = ui
    state = dashboard.state
    assert state is not None
    dashboard.state = dataclasses.replace(
        state, config=dataclasses.replace(state.config, jobs_page=1)
    )
    charge_ann, _, charge_other_ann, _ = await scenes.dead_letters(db)
    page = html(await client.get("/ui/jobs", params={"task": "charge", "text": "ann"}))
    assert listed(page) == [charge_other_ann]
    older = re.search(r'id="older" href="([^"]+)"', page)
    assert older is not None
    url = markup.unescape(older.group(1))
    assert "task=charge" in url and "text=ann" in url
    assert listed(html(await client.get(url))) == [charge_ann]


async def test_payloads_that_name_a_run_link_nowhere_without_an_extension(
    db: AsyncConnectionPool, ui: Pair
) -> None:
    """The library knows no runs: a job whose payload names one is just a job."""
    _, client = ui
    async with db.connection() as conn:
        job_id = await enqueue(conn, "apply_chunk", {"run_id": 7}, queue="plans")
    page = html(await client.get(f"/ui/jobs/{job_id}"))
    assert "/runs/" not in page and "belongs to" not in page


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
        back = "/ui/jobs?state=dead&queue=&task=&text="
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
