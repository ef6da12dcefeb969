"""The plan service's dashboard (pgenough's with the plan service's extension, at /ui of the
API) in a real browser (Chromium via Playwright) on a real uvicorn server and a real
database: real ingestions render in the Providers section and its chart, a dead chunk is found
from the overview's queue through the jobs pages and Retry on its run's page repairs it, the
live view follows new runs.
Waits are Playwright's auto-waiting ``expect``, never sleeps."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.sim.server import SimServer
from tests.dashboard.browser import chromium_page, require_browser
from tests.plan_service.ingest.pipeline import ingest, process
from tests.plan_service.ui import scenes
from tests.plan_service.ui.conftest import ui_settings
from tests.plan_service.ui.server import UiServer

pytestmark = [pytest.mark.browser, pytest.mark.db]

WAIT_MS = 20_000


@pytest.fixture
async def page() -> AsyncIterator[object]:
    require_browser()
    async with chromium_page() as p:
        p.set_default_timeout(WAIT_MS)
        errors: list[str] = []
        p.on("pageerror", lambda exc: errors.append(str(exc)))
        yield p
        assert errors == [], f"JavaScript errors on the page: {errors}"


async def test_the_overview_shows_a_real_ingestion(
    db: AsyncConnectionPool, database_url: str, sim: SimServer, page: object
) -> None:
    from playwright.async_api import Page, expect

    assert isinstance(page, Page)
    run = await ingest(db, f"{sim.url}?version=1&fault=malformed:0.02", name="alpha")
    with UiServer(ui_settings(database_url)) as server:
        await page.goto(f"{server.url}/ui")  # redirected to /ui/
        row = page.locator('#providers-body tr[data-provider="alpha"]')
        await expect(row).to_contain_text("alpha")
        await expect(row).to_contain_text(f"#{run.run_id}")
        await expect(row).to_contain_text(f"{run.plans_staged:,}")
        await expect(row).to_contain_text("PROCESSED")
        await expect(page.locator("#live")).to_have_text("live")
        await expect(page.locator("#plans-chart rect.tp")).to_have_count(1)  # this minute's
        await expect(
            page.locator('#plan-failures .card[data-key="runs_failed"] .value')
        ).to_have_text("0")
        await expect(page.locator("nav a.active")).to_have_text("Overview")

        await page.get_by_role("link", name=f"#{run.run_id}").click()
        await expect(page).to_have_url(re.compile(rf"/ui/runs/{run.run_id}$"))
        await expect(page.locator("h1")).to_have_text(f"Run #{run.run_id}")
        await expect(page.locator("#attempts")).to_contain_text("200")


async def test_a_dead_chunk_is_retried_by_clicking_retry(
    db: AsyncConnectionPool, database_url: str, sim: SimServer, page: object
) -> None:
    from playwright.async_api import Page, expect

    assert isinstance(page, Page)
    staged = await scenes.dead_chunks(db, sim, "gamma")  # dead 'disk full (test)', healed
    with UiServer(ui_settings(database_url, ui_actions=True)) as server:
        # From the overview's queue (as the live view draws it) to the jobs page, to one job.
        await page.goto(f"{server.url}/ui/")
        await expect(page.locator("#live")).to_have_text("live")
        await page.locator('#queues-body tr[data-queue="plans"] td:first-child a').click()
        await expect(page).to_have_url(re.compile(r"/ui/jobs\?queue=plans$"))
        await expect(page.locator("#jobs")).to_contain_text(f"#{staged.run_id}")  # its run
        first = page.locator("#jobs tbody tr[data-job]").first
        await expect(first.locator(".pill")).to_have_text("dead")
        await first.locator("td a").first.click()
        await expect(page).to_have_url(re.compile(r"/ui/jobs/\d+$"))
        await expect(page.locator("#errors")).to_contain_text("disk full (test)")
        await expect(page.locator("#payload")).to_contain_text(f'"run_id": {staged.run_id}')

        await page.goto(f"{server.url}/ui/runs/{staged.run_id}")
        await expect(page.locator(".pill.st-staged").first).to_be_visible()
        dead = page.locator("tr[id^=job-]")
        await expect(dead.first).to_contain_text("disk full (test)")
        count = await dead.count()
        dead_pills = page.locator("tr[id^=job-] .pill.st-dead")
        for left in reversed(range(count)):
            # A dead row's button: a ready job has a Retry (run now) button too.
            await page.locator(
                'tr[id^=job-]:has(.pill.st-dead) button[data-action="retry"]'
            ).first.click()
            # Wait for the page the click leads to (one dead fewer), not for a flash the
            # previous page may still be showing: the next click must not land on it.
            await expect(dead_pills).to_have_count(left)
            await expect(page.locator(".flash-ok")).to_contain_text("will run again now")

        await process(db)
        await page.reload()
        await expect(page.locator(".heading .pill")).to_have_text("PROCESSED")
        await expect(page.locator("tr[id^=job-]")).to_have_count(0)


async def test_the_live_view_shows_a_new_run_without_reloading(
    db: AsyncConnectionPool, database_url: str, sim: SimServer, page: object
) -> None:
    from playwright.async_api import Page, expect

    assert isinstance(page, Page)
    first = await ingest(db, f"{sim.url}?version=1", name="alpha")
    # A long tick: the new run must arrive through run_changed, not the periodic refresh.
    with UiServer(ui_settings(database_url, ui_tick=60.0)) as server:
        await page.goto(f"{server.url}/ui/")
        await expect(page.locator("#providers-body")).to_contain_text(f"#{first.run_id}")
        await expect(page.locator("#live")).to_have_text("live")
        page_loads: list[str] = []
        page.on("load", lambda _: page_loads.append("load"))

        second = await ingest(db, f"{sim.url}?version=2", name="beta")
        row = page.locator('#providers-body tr[data-provider="beta"]')
        await expect(row).to_contain_text(f"#{second.run_id}")
        await expect(row).to_contain_text("PROCESSED")
        assert page_loads == []  # updated in place, not reloaded
