"""The API's pressure publisher comes back after its backend is terminated (the one reconnect
policy, ``core.retry.Reconnect``), and publishes on its new session."""

from __future__ import annotations

import asyncio
import logging

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api.bulkhead import Bulkhead
from pgenough_plans.api.config import ApiConfig
from pgenough_plans.api.pressure import publish_pressure
from pgenough_plans.ingest import pacing
from tests.helpers.procs import wait_until

pytestmark = pytest.mark.db
WAIT = 30.0


async def publisher_pids(db: AsyncConnectionPool) -> list[int]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgenough-api-pressure'"
            " AND datname = current_database()"
        )
        return [row[0] for row in await cur.fetchall()]


async def pressure_is(db: AsyncConnectionPool, value: float) -> bool:
    async with db.connection() as conn:
        return await pacing.current_pressure(conn) == value


async def test_the_publisher_comes_back_after_its_backend_is_terminated(
    db: AsyncConnectionPool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgenough_plans.api.pressure")
    bulkhead = Bulkhead(1)
    publisher = asyncio.create_task(
        publish_pressure(bulkhead, database_url, ApiConfig(pressure_interval=0.05))
    )
    try:
        async with bulkhead.slot():  # every slot taken: full pressure
            await wait_until(lambda: pressure_is(db, 1.0), WAIT, "the pressure published")
            [old] = await publisher_pids(db)
            async with db.connection() as conn:
                await conn.execute("SELECT pg_terminate_backend(%s)", (old,))
        # The slot is free: the next change fails on the dead session, and the publisher
        # reconnects.

        async def reconnected() -> bool:
            pids = await publisher_pids(db)
            return bool(pids) and old not in pids

        await wait_until(reconnected, WAIT, "a new publisher session")
        # The old session's report expires (nothing withdrew it); the next is the new one's.
        await wait_until(lambda: pressure_is(db, 0.0), WAIT, "the old report expired")
        async with bulkhead.slot():
            await wait_until(lambda: pressure_is(db, 1.0), WAIT, "the pressure published again")
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(line.startswith("read pressure publisher failed (") for line in lines), lines
    finally:
        publisher.cancel()
        await asyncio.gather(publisher, return_exceptions=True)
