"""docs/dashboard.md's pictures of the queue's dashboard, from real jobs on a core-only
database: ``make screenshots`` (or ``python -m tests.dashboard.screenshots [--out DIR]``)
writes ``dashboard-queues.png``, ``dashboard-failures.png`` and ``dashboard-job.png`` at
1280x800.

It migrates a fresh database for pgenough alone (on ``DATABASE_URL``'s server, else the
embedded one under ``.pgenough-test/``), fails jobs with real workers (dead letters with
their tracebacks), queues more, then shows the dashboard (actions enabled) under uvicorn, at
the root as ``pgenough dashboard`` serves it, in Chromium. The database is dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from datetime import timedelta
from pathlib import Path

from pgenough.core import NewJob, enqueue_many, migrate, open_pool, start_embedded
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.dashboard import MIGRATIONS
from tests.dashboard import scenes
from tests.dashboard.browser import CHROMIUM, chromium_page
from tests.dashboard.helpers import ui_settings
from tests.dashboard.server import UiServer

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "img"
NAMES = ("dashboard-queues.png", "dashboard-failures.png", "dashboard-job.png")


def server_url() -> str:
    if url := os.environ.get("DATABASE_URL"):
        return with_database(url, "postgres")
    return start_embedded(ROOT / ".pgenough-test", database="postgres").admin_url


async def stage(url: str) -> int:
    """Dead letters and waiting jobs in a few queues; the id of a dead charge."""
    pool = await open_pool(url, max_size=4, name="pgenough-shots")
    try:
        async with pool.connection() as conn:
            await migrate(conn, [MIGRATIONS])
        dead = await scenes.dead_letters(pool)
        await scenes.dead_letters(pool, queue="billing-eu")
        waiting = [
            NewJob("send_mail", {"to": f"user{n}@example.com"}, queue="emails") for n in range(240)
        ]
        waiting += [
            NewJob("rebuild_report", {"day": n}, queue="reports", run_at=timedelta(hours=1))
            for n in range(30)
        ]
        async with pool.connection() as conn, conn.transaction():
            await enqueue_many(conn, waiting)
            await conn.execute(
                "UPDATE pgenough.jobs SET run_at = now() - interval '95 seconds'"
                " WHERE queue = 'emails'"
            )
        return dead[0]
    finally:
        await pool.close()


async def shoot(url: str, out: Path, job_id: int) -> None:
    from playwright.async_api import expect

    with UiServer(ui_settings(url, ui_actions=True, ui_tick=1.0), prefix="") as server:
        async with chromium_page() as page:
            await page.goto(f"{server.url}/")
            await expect(page.locator("#live")).to_have_text("live")
            await expect(page.locator("#chart polyline")).to_have_count(1)
            await page.screenshot(path=str(out / NAMES[0]))
            await page.goto(f"{server.url}/failures?state=dead&task=charge")
            await page.locator("#failing input[name=ids]").first.check()
            await page.screenshot(path=str(out / NAMES[1]))
            await page.goto(f"{server.url}/jobs/{job_id}")
            await expect(page.locator("pre.traceback")).to_be_visible()
            await page.screenshot(path=str(out / NAMES[2]), full_page=True)


async def main(out: Path) -> None:
    admin = server_url()
    name = f"pgenough_shots_{uuid.uuid4().hex[:8]}"
    create_database(admin, name)
    url = with_database(admin, name)
    try:
        job_id = await stage(url)
        await shoot(url, out, job_id)
    finally:
        drop_database(admin, name)
    print("wrote " + ", ".join(str(out / n) for n in NAMES))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    out = parser.parse_args().out
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install -y chromium")
    out.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(out))
