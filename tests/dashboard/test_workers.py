"""The workers page: every registered worker process (real ``Worker``s, in-process), the live
first, with its host, pid, queues, start, last heartbeat and the jobs it runs now, linked to
their pages; a worker gone without stopping marked as such; an empty state that says how to
start one; the overview's count of them."""

from __future__ import annotations

import os
import re
import socket

import pytest
from psycopg_pool import AsyncConnectionPool

from tests.dashboard import scenes
from tests.dashboard.helpers import Pair, html, text

pytestmark = pytest.mark.db


def row(page: str, worker: str) -> str:
    match = re.search(rf'<tr data-worker="{worker}".*?</tr>', page, re.S)
    assert match, f"no row of {worker}"
    return match.group(0)


async def test_a_running_worker_and_the_job_it_runs(db: AsyncConnectionPool, ui: Pair) -> None:
    _, client = ui
    async with scenes.jobs(db) as made:
        page = html(await client.get("/ui/workers"))
        overview = text(html(await client.get("/ui/")))
    holder = row(page, made.worker)
    assert 'class="alive"' in holder and ">alive</span>" in holder
    shown = text(holder)
    assert f"{made.worker} alive {socket.gethostname()} {os.getpid()} slow" in shown
    assert "up " in shown and " ago" in shown  # its start and its last heartbeat
    # What it runs: the held job, linked to its page, its task, queue and claim.
    assert f'<a href="/ui/jobs/{made.running}">{made.running}</a> hold' in holder
    assert re.search(r"on slow, attempt 1, since (now|[\d.]+ m?s ago)", shown)
    assert 'href="/ui/jobs?queue=slow"' in holder
    # The workers that drained and stopped are gone from the list, not shown as gone.
    assert "flaky-worker" not in page and "No worker running" not in page
    assert text(page).count(" alive ") >= 1 and "1 job running" in text(page)
    assert "1 worker alive" in overview
    assert 'href="/ui/workers"' in page  # in the navigation, marked
    assert re.search(r'<a href="/ui/workers" class="active">Workers</a>', page)


async def test_a_worker_that_died_without_stopping_is_marked_gone(
    db: AsyncConnectionPool, ui: Pair
) -> None:
    _, client = ui
    async with db.connection() as conn:
        # What a worker killed two minutes ago leaves: its row, its heartbeat old.
        await conn.execute(
            "INSERT INTO pgenough.workers (name, host, pid, queues, started_at, last_seen_at)"
            " VALUES ('crashed', 'box-7', 4242, '{mail,other}', now() - interval '1 hour',"
            " now() - interval '2 minutes')"
        )
    async with scenes.jobs(db) as made:
        page = html(await client.get("/ui/workers"))
        overview = text(html(await client.get("/ui/")))
    names = re.findall(r'<tr data-worker="([^"]+)"', page)
    assert names == [made.worker, "crashed"]  # the live first
    gone = row(page, "crashed")
    assert 'class="gone"' in gone and ">gone</span>" in gone
    assert re.search(r"2 min \d+ s ago last seen \d{4}-\d\d-\d\d", text(gone))
    assert "box-7 4242 mail , other" in text(gone) and "idle" in text(gone)
    assert "1 alive · 1 gone" in text(page)
    assert "1 worker alive · 1 gone" in overview


async def test_no_worker_says_how_to_start_one(ui: Pair) -> None:
    _, client = ui
    page = text(html(await client.get("/ui/workers")))
    assert "No worker running: pgenough worker run module:app starts one." in page
    assert "0 workers alive" in text(html(await client.get("/ui/")))
