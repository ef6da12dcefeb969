"""The live overview with the plan service's Providers section: a new run reaches every
browser through the dashboard's one subscription (``run_changed``, the extension's channel)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.sim.server import SimServer
from tests.dashboard.server import sse
from tests.dashboard.test_live import DEADLINE, listeners, until
from tests.plan_service.ingest.pipeline import ingest
from tests.plan_service.ui.conftest import ui_settings
from tests.plan_service.ui.server import UiServer


def landed(overview: dict[str, Any], run_id: int) -> bool:
    providers = overview["sections"]["providers"]["providers"]
    return [(p["last_run_id"], p["last_status"]) for p in providers] == [(run_id, "PROCESSED")]


@pytest.mark.db
async def test_a_new_run_reaches_every_browser_through_one_subscription(
    db: AsyncConnectionPool, database_url: str, sim: SimServer
) -> None:
    # A long tick: whatever arrives after the new run was caused by it, not by the clock.
    with UiServer(ui_settings(database_url, ui_tick=60.0)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=DEADLINE) as client:
            async with (
                client.stream("GET", "/ui/events") as one,
                client.stream("GET", "/ui/events") as two,
            ):
                streams = [sse(one), sse(two)]
                for events in streams:
                    name, first = await anext(events)  # the snapshot each newcomer gets
                    assert name == "overview"
                    assert first["sections"]["providers"]["providers"] == []
                assert server.ui.feed.clients == 2
                assert await listeners(database_url) == 1  # not one per browser

                run = await ingest(db, f"{sim.url}?version=1", name="live")
                for events in streams:
                    async with asyncio.timeout(DEADLINE):
                        async for name, data in events:
                            if name == "overview" and landed(data, run.run_id):
                                break
            await until(lambda: server.ui.feed.clients == 0)
