"""The dashboard in a real browser (Chromium via Playwright) on a real uvicorn server and a
core-only database, mounted at /queue in an application: the overview per queue and overall,
live; jobs filtered by task and payload text; a job's traceback; dead letters retried in bulk.
Waits are Playwright's auto-waiting ``expect``, never sleeps."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue
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
        await expect(page.locator("#chart polyline")).to_have_count(1)  # the backlog
        loads: list[str] = []
        page.on("load", lambda _: loads.append("load"))

        async with db.connection() as conn:
            await enqueue(conn, "send_mail", {"to": "ann"}, queue="mail")
        mail = page.locator('#queues-body tr[data-queue="mail"]')
        await expect(mail).to_contain_text("1")
        await expect(page.locator("#queues-total td").nth(1)).to_have_text("1")  # ready, all
        assert loads == []  # updated in place, not reloaded

        await mail.locator("a").click()
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
