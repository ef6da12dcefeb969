"""The periodic tasks page: each task real replicas claimed (``Periodic.claim_at`` at chosen
database times), its schedule in words, its last run and by which replica, its next run,
its missed ticks, and, highlighted, the ticks overdue now (no replica runs it); an empty
state; the overview's count of the overdue."""

from __future__ import annotations

import re
from datetime import UTC, timedelta
from zoneinfo import ZoneInfo

import pytest
from psycopg_pool import AsyncConnectionPool

from tests.dashboard import scenes
from tests.dashboard.helpers import Pair, html, text

pytestmark = pytest.mark.db

BERLIN = ZoneInfo("Europe/Berlin")


def row(page: str, task: str) -> str:
    match = re.search(rf'<tr data-task="{task}".*?</tr>', page, re.S)
    assert match, f"no row of {task}"
    return match.group(0)


async def test_each_task_its_schedule_runs_and_missed_ticks_and_the_overdue_highlighted(
    db: AsyncConnectionPool, ui: Pair
) -> None:
    _, client = ui
    now = await scenes.periodic_tasks(db)
    page = html(await client.get("/ui/periodic"))
    assert re.findall(r'<tr data-task="([^"]+)"', page) == ["heartbeat-report", "nightly-export"]

    on_time = row(page, "heartbeat-report")
    assert "overdue" not in on_time.split(">", 1)[0]  # not highlighted
    shown = text(on_time)
    ran = r"(now|[\d.]+ m?s ago)"
    assert re.search(
        rf"heartbeat-report every 1 min [\d -]+ [\d:]+ UTC {ran} .* a in [\d.]+ s ", shown
    )
    assert shown.strip().endswith("0 no")  # nothing missed, nothing overdue

    nightly = row(page, "nightly-export")
    assert nightly.startswith('<tr data-task="nightly-export" class="overdue">')
    shown = text(nightly)
    assert "daily at 02:30 (Europe/Berlin)" in shown
    assert 'title="cron 30 2 * * * Europe/Berlin"' in nightly
    # Its last tick, two days before the claims' database time, 02:30 in Berlin.
    tick = (now - timedelta(days=2)).astimezone(BERLIN).replace(hour=2, minute=30, second=0)
    tick = tick if tick <= now - timedelta(days=2) else tick - timedelta(days=1)
    assert f"Europe/Berlin) {tick.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" in shown
    # Run by b (when its claim ran: the claims present past ticks at today's database time).
    assert re.search(r"(now|[\d.]+ m?s ago) \d{4}-\d\d-\d\d [\d:]+ UTC b in ", shown)
    assert re.search(r" 2 \d+ ticks? overdue: no replica runs it", shown)  # 2 missed
    assert "2 tasks · 1 overdue" in text(page)
    assert re.search(r'<a href="/ui/periodic" class="active">Periodic</a>', page)

    overview = html(await client.get("/ui/"))
    assert "1 periodic task overdue of 2" in text(overview)
    assert re.search(r'class="card card-bad" id="periodic-card"[^>]*href="/ui/periodic"', overview)


async def test_no_periodic_task_says_when_one_shows(ui: Pair) -> None:
    _, client = ui
    page = text(html(await client.get("/ui/periodic")))
    assert "No periodic task claimed yet" in page and "@app.periodic(every=…)" in page
    assert "0 periodic tasks overdue of 0" in text(html(await client.get("/ui/")))
