"""The pictures of the plan service's dashboard (docs/plan-service/dashboard.md), from real
ingestions: ``make screenshots`` (or ``python -m tests.plan_service.ui.screenshots [--out
DIR]``) writes
``dashboard-overview.png`` and ``dashboard-run.png`` at 1280x800 (the queue's own dashboard:
``tests/dashboard/screenshots.py``).

It runs the real pipeline on a fresh database (on ``DATABASE_URL``'s server, else the
embedded one under ``.pgenough-test/``): a provider ingested twice, one whose fetch fails,
one whose chunks are dead-lettered by a real database error, then the dashboard (actions
enabled) under uvicorn and Chromium. The database is dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from pathlib import Path

from pgenough.core import migrate, open_pool, start_embedded
from pgenough.core.db import create_database, drop_database, with_database
from pgenough_plans.api import MIGRATIONS
from pgenough_plans.sim.server import SimServer
from tests.dashboard.browser import CHROMIUM, chromium_page
from tests.plan_service.ingest.pipeline import fetch, ingest
from tests.plan_service.ui import scenes
from tests.plan_service.ui.conftest import ui_settings
from tests.plan_service.ui.server import UiServer

ROOT = Path(__file__).resolve().parents[3]
OUT = ROOT / "docs" / "img"


def server_url() -> str:
    if url := os.environ.get("DATABASE_URL"):
        return with_database(url, "postgres")
    return start_embedded(ROOT / ".pgenough-test", database="postgres").admin_url


async def stage(url: str) -> int:
    """Real runs in every interesting state; the id of the run with dead chunks."""
    pool = await open_pool(url, max_size=8, name="pgenough-shots")
    try:
        async with pool.connection() as conn:
            await migrate(conn, MIGRATIONS)
        with SimServer(plans=20_000, seed=3) as sim:
            await ingest(pool, f"{sim.url}?version=1&fault=malformed:0.01", name="fever")
            await ingest(pool, f"{sim.url}?version=2&fault=malformed:0.01", name="fever")
            await ingest(pool, f"{sim.url}?version=1", name="partner-b")
            await fetch(pool, f"{sim.url}?fault=truncate:0.5", name="partner-c", max_attempts=1)
            stuck = await scenes.dead_chunks(pool, sim, "partner-d")
        return stuck.run_id
    finally:
        await pool.close()


async def shoot(url: str, out: Path, run_id: int) -> None:
    from playwright.async_api import expect

    with UiServer(ui_settings(url, ui_actions=True, ui_tick=1.0)) as server:
        async with chromium_page() as page:
            await page.goto(f"{server.url}/ui/")
            await expect(page.locator("#live")).to_have_text("live")
            await expect(page.locator("#throughput-chart text.max-left")).to_have_count(1)
            await expect(page.locator("#plans-chart rect.tp").first).to_be_visible()
            await page.screenshot(path=str(out / "dashboard-overview.png"))
            await page.goto(f"{server.url}/ui/runs/{run_id}")
            await expect(page.locator("tr[id^=job-]").first).to_be_visible()
            await page.screenshot(path=str(out / "dashboard-run.png"))


async def main(out: Path) -> None:
    admin = server_url()
    name = f"pgenough_shots_{uuid.uuid4().hex[:8]}"
    create_database(admin, name)
    url = with_database(admin, name)
    try:
        run_id = await stage(url)
        await shoot(url, out, run_id)
    finally:
        drop_database(admin, name)
    print(f"wrote {out / 'dashboard-overview.png'} and {out / 'dashboard-run.png'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    out = parser.parse_args().out
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install -y chromium")
    out.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(out))
