"""The queues' throughput and backlog over time on the overview, from the history real
workers record (their counts as they finish jobs, the backlog sampled by the sampling duty):
of every queue and of one, over each window, in its charts' data, its numbers and its table;
as JSON; in the live snapshot; a bad window a 400 page (or JSON error)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from tests.dashboard import scenes
from tests.dashboard.helpers import Pair, html, text, ui_settings
from tests.dashboard.server import UiServer, sse

pytestmark = pytest.mark.db


def seed(page: str, name: str) -> Any:
    """The JSON a page hands its script (``<script id=name type=application/json>``)."""
    match = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', page, re.S)
    assert match, f"no {name} on the page"
    return json.loads(match.group(1))


def numbers(page: str, section: str) -> dict[str, str]:
    """The numbers beside a chart (``<dd data-key=...>``), as shown."""
    block = re.search(rf'<dl class="numbers" id="{section}">(.*?)</dl>', page, re.S)
    assert block, section
    return dict(re.findall(r'<dd data-key="([a-z_]+)">([^<]*)</dd>', block.group(1)))


async def test_the_overview_shows_every_queues_history(db: AsyncConnectionPool, ui: Pair) -> None:
    _, client = ui
    made = await scenes.finished(db)
    page = html(await client.get("/ui/"))
    history = seed(page, "history-data")
    assert (history["window"], history["queue"], history["step"]) == ("1h", "", 60.0)
    assert len(history["points"]) == 60  # every minute of the hour, the current one last
    assert (history["completed"], history["failed"], history["dead"]) == (5, 1, 1)
    assert history["ready"] == made.ready and history["sampled_at"] is not None
    assert numbers(page, "throughput-numbers") == {"completed": "5", "failed": "1", "dead": "1"}
    backlog = numbers(page, "backlog-numbers")
    assert (backlog["ready"], backlog["running"], backlog["peak_ready"]) == ("2", "0", "2")
    shown = text(page)
    assert "Throughput and backlog all queues, the last 1 h per minute" in shown
    # Its table, for a reader without the charts: the minute with the counts and the sample
    # (or two minutes, when the sample came a minute after the counts).
    rows = re.findall(r"<tr><td class=\"nowrap\">([^<]+)</td>((?:\s*<td[^>]*>[^<]*</td>)+)", page)
    cells = [re.findall(r">([^<]*)</td>", r[1]) for r in rows]
    assert sum(int(c[0]) for c in cells) == 5 and any(c[3] == "2" for c in cells)
    # Each queue's jobs done in the last hour, ``other`` too though it has no job left.
    assert re.search(r"mail 2 0 0 1 [\d.]+ m?s 3 1 1 other 0 0 0 0 — 2 0 0 all queues", shown)
    assert 'href="/ui/?window=1h&amp;queue=other#history"' in page
    # The overview's JSON carries it too (what the live snapshot sends).
    data = (await client.get("/ui/api/overview")).json()["data"]
    assert data["history"]["completed"] == 5 and len(data["history"]["points"]) == 60
    assert {q["queue"]: q["done"] for q in data["queues"]} == made.completed
    assert data["total"]["done"] == 5


async def test_one_queue_over_a_longer_window(db: AsyncConnectionPool, ui: Pair) -> None:
    _, client = ui
    await scenes.finished(db)
    page = html(await client.get("/ui/", params={"window": "7d", "queue": "mail"}))
    history = seed(page, "history-data")
    assert (history["window"], history["queue"], history["step"]) == ("7d", "mail", 7200.0)
    assert len(history["points"]) == 84  # two-hour buckets: never thousands of points
    assert (history["completed"], history["dead"], history["ready"]) == (3, 1, 2)
    assert "queue mail, the last 7 d per 2 h" in text(page)
    assert "the largest per 2 h" in text(page)  # the backlog's buckets hold many samples
    # The windows keep the queue; the queue's row is marked; the queues may be chosen.
    assert 'href="/ui/?window=6h&amp;queue=mail#history"' in page
    assert re.search(
        r'<a href="/ui/\?window=7d&amp;queue=mail#history" data-window="7d"\s+class="active"', page
    )
    assert '<tr data-queue="mail" class="chosen">' in page
    assert '<option value="other" >other</option>' in page
    assert '<option value="mail" selected>mail</option>' in page
    # The overview's own JSON stays the last hour of every queue.
    assert seed(page, "overview-data")["history"]["window"] == "1h"

    body = (await client.get("/ui/api/history", params={"window": "24h", "queue": "other"})).json()
    assert body["error"] is None
    data = body["data"]
    assert (data["window"], data["queue"], len(data["points"])) == ("24h", "other", 96)
    assert (data["completed"], data["failed"], data["ready"]) == (2, 0, 0)
    every = (await client.get("/ui/api/history", params={"window": "6h"})).json()["data"]
    assert (every["queue"], len(every["points"]), every["completed"]) == ("", 72, 5)


async def test_a_queue_with_no_history_says_so(ui: Pair) -> None:
    _, client = ui
    page = html(await client.get("/ui/", params={"queue": "nowhere"}))
    assert "Nothing recorded in the last 1 h." in text(page)
    assert '<p class="muted" id="history-empty" >' in page  # shown, not hidden
    assert '<option value="nowhere" selected>nowhere</option>' in page


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"window": "2h"}, "window must be one of 1h, 6h, 24h, 7d, not &#39;2h&#39;"),
        ({"window": "x" * 300}, "window must be at most 200 characters"),
        ({"queue": "a\x00b"}, "queue must not contain a NUL character"),
    ],
    ids=["unknown", "long", "nul"],
)
async def test_a_bad_window_or_queue_is_a_400_page_and_a_json_error(
    ui: Pair, params: dict[str, str], message: str
) -> None:
    _, client = ui
    page = html(await client.get("/ui/", params=params), 400)
    assert message in page and "Bad filter" in page
    assert 'href="/ui/static/ui.css"' in page  # the dashboard's page, at its mount
    response = await client.get("/ui/api/history", params=params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "INVALID_REQUEST"
    assert error["message"] == message.replace("&#39;", "'")


async def test_the_live_snapshot_carries_the_history_and_the_fleet(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await scenes.finished(db)
    with UiServer(ui_settings(database_url)) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=20) as client,
            client.stream("GET", "/ui/events") as stream,
        ):
            name, data = await anext(sse(stream))
    assert name == "overview"
    assert data["history"]["completed"] == 5 and data["history"]["ready"] == 2
    assert data["fleet"] == {
        "workers_alive": 0,
        "workers_gone": 0,
        "periodic": 0,
        "periodic_overdue": 0,
    }
