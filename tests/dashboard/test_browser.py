"""The dashboard in a real browser (Chromium via Playwright) on a real uvicorn server and a
core-only database, mounted at /queue in an application: the overview per queue and overall,
live; its history charts, drawn from the server's history again after a reload and a restart;
jobs filtered by task and payload text; a job's traceback; dead letters retried in bulk; the
workers page with a running worker and its job; the periodic page with an overdue task.
Waits are Playwright's auto-waiting ``expect``, never sleeps."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Worker, WorkerConfig, enqueue
from tests.dashboard import scenes
from tests.dashboard.browser import chromium_page, require_browser
from tests.dashboard.helpers import ui_settings
from tests.dashboard.server import UiServer
from tests.dashboard.test_actions import states

pytestmark = [pytest.mark.browser, pytest.mark.db]

WAIT_MS = 20_000
PREFIX = "/queue"


@pytest.fixture
async def page() -> AsyncIterator[Any]:
    require_browser()
    async with chromium_page() as p:
        p.set_default_timeout(WAIT_MS)
        errors: list[str] = []
        dialogs: list[str] = []
        p.on("pageerror", lambda exc: errors.append(str(exc)))

        async def accept(dialog: Any) -> None:
            dialogs.append(dialog.message)
            await dialog.accept()

        p.on("dialog", accept)
        p.dialogs = dialogs
        yield p
        assert errors == [], f"JavaScript errors on the page: {errors}"


async def test_the_overview_shows_each_queue_and_follows_new_work_live(
    db: AsyncConnectionPool, database_url: str, page: Any
) -> None:
    from playwright.async_api import expect

    await scenes.dead_letters(db)
    # A long tick: the new queue must arrive through the queue's NOTIFY, not the clock.
    with UiServer(ui_settings(database_url, ui_tick=60.0), PREFIX) as server:
        await page.goto(f"{server.url}{PREFIX}/")
        await expect(page.locator("#live")).to_have_text("live")
        billing = page.locator('#queues-body tr[data-queue="billing"]')
        await expect(billing).to_contain_text("billing")
        await expect(page.locator("#queues-total")).to_contain_text("all queues")
        await expect(page.locator('#failures .card[data-key="dead_recently"] .value')).to_have_text(
            "4"
        )
        await expect(page.locator("#throughput-chart text.max-left")).to_have_count(1)
        loads: list[str] = []
        page.on("load", lambda _: loads.append("load"))

        async with db.connection() as conn:
            await enqueue(conn, "send_mail", {"to": "ann"}, queue="mail")
        mail = page.locator('#queues-body tr[data-queue="mail"]')
        await expect(mail).to_contain_text("1")
        await expect(page.locator("#queues-total td").nth(1)).to_have_text("1")  # ready, all
        assert loads == []  # updated in place, not reloaded

        await mail.locator("td:first-child a").click()
        await expect(page).to_have_url(re.compile(rf"{PREFIX}/jobs\?queue=mail$"))
        await expect(page.locator("#jobs tbody tr[data-job]")).to_have_count(1)


async def test_jobs_are_filtered_by_task_and_payload_text_and_a_traceback_is_shown(
    db: AsyncConnectionPool, database_url: str, page: Any
) -> None:
    from playwright.async_api import expect

    charge_ann, _, charge_other_ann, _ = await scenes.dead_letters(db)
    with UiServer(ui_settings(database_url), PREFIX) as server:
        await page.goto(f"{server.url}{PREFIX}/jobs")
        rows = page.locator("#jobs tbody tr[data-job]")
        await expect(rows).to_have_count(4)
        await page.locator('#filters input[name="task"]').fill("charge")
        await page.locator('#filters input[name="text"]').fill("ANN")
        await page.locator("#filters button").click()
        await expect(page).to_have_url(re.compile(r"task=charge&text=ANN"))
        await expect(rows).to_have_count(2)
        ids = [int(n) for n in await rows.evaluate_all("rs => rs.map(r => r.dataset.job)")]
        assert ids == [charge_other_ann, charge_ann]

        await page.locator(f'#job-{charge_ann} td a[href$="/jobs/{charge_ann}"]').click()
        await expect(page).to_have_url(re.compile(rf"{PREFIX}/jobs/{charge_ann}$"))
        traceback = page.locator("pre.traceback")
        await expect(traceback).to_be_visible()  # the newest, open
        await expect(traceback).to_contain_text("CardDeclined: card of ann@example.com declined")
        await expect(traceback).to_contain_text("<script>alert(1)</script>")  # shown, not run
        await expect(traceback).to_contain_text("RuntimeError: charge for order 100 failed")
        await expect(page.locator("#retention")).to_contain_text("last 20 failed attempts")
        assert page.dialogs == []


async def test_dead_letters_are_retried_in_bulk(
    db: AsyncConnectionPool, database_url: str, page: Any
) -> None:
    from playwright.async_api import expect

    dead = await scenes.dead_letters(db)
    charge_ann, charge_bob, charge_other_ann, refund_ann = dead
    with UiServer(ui_settings(database_url, ui_actions=True), PREFIX) as server:
        await page.goto(f"{server.url}{PREFIX}/failures?state=dead")
        await expect(page.locator("#failing tbody tr[data-job]")).to_have_count(4)
        await page.get_by_label(f"job {charge_ann}").check()
        await page.get_by_label(f"job {refund_ann}").check()
        await page.locator("#retry-checked").click()
        await expect(page.locator(".flash-ok")).to_have_text("2 jobs will run again now")
        await expect(page).to_have_url(re.compile(rf"{PREFIX}/failures\?state=dead$"))
        await expect(page.locator("#failing tbody tr[data-job]")).to_have_count(2)
        assert await states(db, dead) == ["ready", "dead", "dead", "ready"]

        # Every dead job the filter matches, not only those shown: confirmed first.
        await page.locator('#filters input[name="task"]').fill("charge")
        await page.locator("#filters button").click()
        await page.locator("#retry-dead").click()
        await expect(page.locator(".flash-ok")).to_have_text("2 dead jobs will run again now")
        assert page.dialogs and "every dead job matching this filter" in page.dialogs[-1]
        await expect(page.locator("#no-jobs")).to_be_visible()
        assert await states(db, [charge_bob, charge_other_ann]) == ["ready", "ready"]


async def test_the_overviews_charts_are_drawn_from_history_after_a_reload_and_a_restart(
    db: AsyncConnectionPool, database_url: str, page: Any
) -> None:
    from playwright.async_api import expect

    await scenes.finished(db)
    settings = ui_settings(database_url)

    async def drawn() -> None:
        # Completed jobs as bars, the backlog's sample as a point (a lone sample: a dot).
        await expect(page.locator("#throughput-chart rect.tp").first).to_be_visible()
        await expect(page.locator("#backlog-chart .ready")).to_have_count(1)
        await expect(page.locator("#throughput-chart rect.hover")).to_have_count(60)
        done = page.locator('#throughput-numbers dd[data-key="completed"]')
        await expect(done).to_have_text(re.compile(r"^[56]$"))
        await expect(page.locator('#backlog-numbers dd[data-key="ready"]')).to_have_text("2")
        await expect(page.locator("#history-empty")).to_be_hidden()

    with UiServer(settings, PREFIX) as server:
        await page.goto(f"{server.url}{PREFIX}/")
        await expect(page.locator("#live")).to_have_text("live")
        await drawn()
        bar = page.locator("#throughput-chart rect.tp").first
        assert await bar.evaluate("b => Number(b.getAttribute('height'))") > 0
        await page.reload()
        await expect(page.locator("#live")).to_have_text("live")
        await drawn()
        await finish(db, "late")  # live, from the snapshots
        await expect(page.locator('#throughput-numbers dd[data-key="completed"]')).to_have_text("6")
    with UiServer(settings, PREFIX) as again:  # a new dashboard: nothing kept in it
        await page.goto(f"{again.url}{PREFIX}/")
        await drawn()
        await expect(page.locator('#throughput-numbers dd[data-key="completed"]')).to_have_text("6")

        # A week of one queue: its own series, refreshed from /api/history after snapshots.
        await page.locator('#windows a[data-window="7d"]').click()
        await expect(page).to_have_url(re.compile(rf"{PREFIX}/\?window=7d&queue=#history$"))
        await page.locator('#history-filter select[name="queue"]').select_option("other")
        await expect(page).to_have_url(re.compile(r"window=7d&queue=other"))
        await expect(page.locator("#history-what")).to_have_text(
            "queue other, the last 7 d per 2 h"
        )
        await expect(page.locator("#throughput-chart rect.hover")).to_have_count(84)
        await expect(page.locator('#throughput-numbers dd[data-key="completed"]')).to_have_text("2")
        await expect(page.locator('#queues-body tr.chosen[data-queue="other"]')).to_have_count(1)

        # The last hour of it, live: what a worker finishes shows without a reload.
        await page.locator('#windows a[data-window="1h"]').click()
        await expect(page).to_have_url(re.compile(r"window=1h&queue=other#history$"))
        await expect(page.locator("#live")).to_have_text("live")
        loads: list[str] = []
        page.on("load", lambda _: loads.append("load"))
        await finish(db, "other")
        # Read again after a snapshot, once 5 s have passed since the last read.
        done = page.locator('#throughput-numbers dd[data-key="completed"]')
        await expect(done).to_have_text("3", timeout=WAIT_MS)
        await expect(page.locator('#queues-body tr[data-queue="other"] a.trend')).to_have_text("3")
        assert loads == []


async def finish(db: AsyncConnectionPool, queue: str) -> None:
    """One more job of ``queue`` completed by a real worker (counted as it stops)."""

    async def ok(job: Any) -> None:
        pass

    async with db.connection() as conn:
        await enqueue(conn, "ok", {"n": 9}, queue=queue)
    config = WorkerConfig(queue=queue, maintenance=None)
    await Worker(db, {"ok": ok}, config, name=f"{queue}-more").run(until_idle=True)


async def test_the_workers_page_shows_a_running_worker_and_its_job(
    db: AsyncConnectionPool, database_url: str, page: Any
) -> None:
    from playwright.async_api import expect

    async with scenes.jobs(db) as made:
        with UiServer(ui_settings(database_url), PREFIX) as server:
            await page.goto(f"{server.url}{PREFIX}/")
            await expect(page.locator("#workers-card .value")).to_have_text("1")
            await page.locator("#workers-card").click()
            await expect(page).to_have_url(re.compile(rf"{PREFIX}/workers$"))
            holder = page.locator(f'#workers tr[data-worker="{made.worker}"]')
            await expect(holder).to_contain_text("alive")
            await expect(holder).to_contain_text("slow")
            job = holder.locator(f'li[data-job="{made.running}"]')
            await expect(job).to_contain_text("hold")
            await job.locator("a").click()
            await expect(page).to_have_url(re.compile(rf"{PREFIX}/jobs/{made.running}$"))
            await expect(page.locator("#facts")).to_contain_text(made.worker)


async def test_the_periodic_page_shows_an_overdue_task(
    db: AsyncConnectionPool, database_url: str, page: Any
) -> None:
    from playwright.async_api import expect

    await scenes.periodic_tasks(db)
    with UiServer(ui_settings(database_url), PREFIX) as server:
        await page.goto(f"{server.url}{PREFIX}/")
        card = page.locator("#periodic-card")
        await expect(card).to_have_class(re.compile(r"card-bad"))
        await expect(card).to_contain_text("periodic task overdue of 2")
        await page.get_by_role("link", name="Periodic", exact=True).click()
        await expect(page).to_have_url(re.compile(rf"{PREFIX}/periodic$"))
        overdue = page.locator("#periodic tr.overdue")
        await expect(overdue).to_have_count(1)
        await expect(overdue).to_have_attribute("data-task", "nightly-export")
        await expect(overdue).to_contain_text("no replica runs it")
        await expect(overdue).to_contain_text("daily at 02:30 (Europe/Berlin)")
        # Highlighted: the row's own background, not the table's.
        colour = await overdue.locator("td").first.evaluate(
            "c => getComputedStyle(c).backgroundColor"
        )
        assert colour == "rgb(251, 229, 226)"  # --bad-bg
        await expect(page.locator('#periodic tr[data-task="heartbeat-report"]')).not_to_have_class(
            re.compile("overdue")
        )
