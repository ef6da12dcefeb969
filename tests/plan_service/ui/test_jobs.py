"""The plan service's link from each chunk job to its run, on the dashboard's own jobs
pages (the extension's ``job_link``), from a real run's dead chunks."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue
from pgenough_plans.sim.server import SimServer
from tests.dashboard.helpers import html
from tests.dashboard.test_jobs import listed, row
from tests.plan_service.ui import scenes

pytestmark = pytest.mark.db

Pair = tuple[FastAPI, httpx.AsyncClient]


async def test_chunk_jobs_link_to_their_run(
    db: AsyncConnectionPool, sim: SimServer, ui: Pair
) -> None:
    _, client = ui
    staged = await scenes.dead_chunks(db, sim, "gamma")
    async with db.connection() as conn:
        # Not a chunk job, though its payload names a run.
        other = await enqueue(conn, "report", {"run_id": staged.run_id}, queue="ops")
    page = html(await client.get("/ui/jobs", params={"queue": "plans", "state": "dead"}))
    chunks = listed(page)
    assert chunks and all(f"#{staged.run_id}" in row(page, j) for j in chunks)
    assert f'href="/ui/runs/{staged.run_id}"' in page
    detail = html(await client.get(f"/ui/jobs/{chunks[0]}"))
    assert f'href="/ui/runs/{staged.run_id}"' in detail and "disk full (test)" in detail
    assert f"/ui/runs/{staged.run_id}" not in html(await client.get(f"/ui/jobs/{other}"))
