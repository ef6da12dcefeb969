"""docs/dashboard.md's pictures of the queue's dashboard, from real jobs on a core-only
database: ``make screenshots`` (or ``python -m tests.dashboard.screenshots [--out DIR]``)
writes ``dashboard-queues.png``, ``dashboard-history.png``, ``dashboard-failures.png``,
``dashboard-job.png``, ``dashboard-workers.png`` and ``dashboard-periodic.png`` at 1280x800.

It migrates a fresh database for pgenough alone (on ``DATABASE_URL``'s server, else the
embedded one under ``.pgenough-test/``), fails jobs with real workers (dead letters with
their tracebacks), finishes others, queues more, claims periodic tasks as real replicas do
and keeps a worker running a job, then shows the dashboard (actions enabled) under uvicorn,
at the root as ``pgenough dashboard`` serves it, in Chromium. The hour of history before
this minute cannot be made by workers in the time a picture takes: it is written into the
history's tables as workers would have (``backfill``), and said so here. The database is
dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import uuid
from datetime import timedelta
from pathlib import Path

from psycopg_pool import AsyncConnectionPool

from pgenough.core import NewJob, enqueue_many, migrate, open_pool, start_embedded
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.dashboard import MIGRATIONS
from tests.dashboard import scenes
from tests.dashboard.browser import CHROMIUM, chromium_page
from tests.dashboard.helpers import ui_settings
from tests.dashboard.server import UiServer

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "img"
NAMES = (
    "dashboard-queues.png",
    "dashboard-failures.png",
    "dashboard-job.png",
    "dashboard-history.png",
    "dashboard-workers.png",
    "dashboard-periodic.png",
)


def server_url() -> str:
    if url := os.environ.get("DATABASE_URL"):
        return with_database(url, "postgres")
    return start_embedded(ROOT / ".pgenough-test", database="postgres").admin_url


async def backfill(pool: AsyncConnectionPool) -> None:
    """The hour before this minute, as workers would have recorded it: each minute's jobs
    done, failed and dead per queue (``pgenough.job_counts``) and the backlog sampled
    (``pgenough.queue_samples``), a morning burst of e-mail drained by its workers."""
    rng = random.Random(7)
    counts, samples = [], []
    for minute in range(60, 0, -1):
        burst = max(0.0, math.sin((60 - minute) / 60 * math.pi * 1.4))
        ready = int(240 * burst) + rng.randrange(4)
        done = 80 + int(120 * burst) + rng.randrange(20)
        failed = rng.choice((0,) * 9 + (1, 2))
        counts.append((minute, "emails", done, failed, int(failed > 1)))
        counts.append((minute, "reports", rng.randrange(3), 0, 0))
        lag = max(0.0, math.sin((56 - minute) / 60 * math.pi * 1.4))  # the age trails
        samples.append((minute, "emails", ready, 0, 6, 95.0 * lag * lag + rng.random()))
        samples.append((minute, "reports", 0, 30, 1, 0.0))
    async with pool.connection() as conn, conn.transaction():
        for minute, queue, done, failed, dead in counts:
            await conn.execute(
                "INSERT INTO pgenough.job_counts (bucket, queue, completed, failed, dead)"
                " VALUES (date_trunc('minute', now()) - %s * interval '1 minute', %s, %s, %s, %s)",
                (minute, queue, done, failed, dead),
            )
        for minute, queue, ready, scheduled, running, age in samples:
            await conn.execute(
                "INSERT INTO pgenough.queue_samples"
                " (at, queue, ready, scheduled, running, dead, oldest_ready_age)"
                " VALUES (date_trunc('minute', now()) - %s * interval '1 minute',"
                " %s, %s, %s, %s, 0, %s)",
                (minute, queue, ready, scheduled, running, age),
            )


async def stage(pool: AsyncConnectionPool) -> int:
    """Dead letters, finished and waiting jobs in a few queues, their history, periodic
    tasks; the id of a dead charge."""
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
            "UPDATE pgenough.jobs SET run_at = now() - interval '95 seconds' WHERE queue = 'emails'"
        )
    await scenes.finished(pool)  # and this minute's backlog sampled, the waiting jobs in it
    await backfill(pool)
    await scenes.periodic_tasks(pool)
    return dead[0]


async def shoot(url: str, out: Path, job_id: int) -> None:
    from playwright.async_api import expect

    with UiServer(ui_settings(url, ui_actions=True, ui_tick=1.0), prefix="") as server:
        async with chromium_page() as page:
            await page.goto(f"{server.url}/")
            await expect(page.locator("#live")).to_have_text("live")
            await expect(page.locator("#backlog-chart polyline").first).to_be_visible()
            await page.screenshot(path=str(out / NAMES[0]), full_page=True)
            await page.goto(f"{server.url}/failures?state=dead&task=charge")
            await page.locator("#failing input[name=ids]").first.check()
            await page.screenshot(path=str(out / NAMES[1]))
            await page.goto(f"{server.url}/jobs/{job_id}")
            await expect(page.locator("pre.traceback")).to_be_visible()
            await page.screenshot(path=str(out / NAMES[2]), full_page=True)
            await page.goto(f"{server.url}/?window=1h&queue=emails#history")
            await expect(page.locator("#backlog-chart polyline").first).to_be_visible()
            await page.locator("#history").scroll_into_view_if_needed()
            await page.screenshot(path=str(out / NAMES[3]))
            await page.goto(f"{server.url}/workers")
            await expect(page.locator("#workers li[data-job]").first).to_be_visible()
            await page.screenshot(path=str(out / NAMES[4]))
            await page.goto(f"{server.url}/periodic")
            await expect(page.locator("#periodic tr.overdue")).to_be_visible()
            await page.screenshot(path=str(out / NAMES[5]))


async def main(out: Path) -> None:
    admin = server_url()
    name = f"pgenough_shots_{uuid.uuid4().hex[:8]}"
    create_database(admin, name)
    url = with_database(admin, name)
    try:
        pool = await open_pool(url, max_size=4, name="pgenough-shots")
        try:
            job_id = await stage(pool)
            async with scenes.jobs(pool):  # a worker running a job, for the workers page
                await shoot(url, out, job_id)
        finally:
            await pool.close()
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
