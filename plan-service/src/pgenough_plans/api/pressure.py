"""The API's side of pacing (plans/pacing.py): sample the bulkhead, publish its pressure.

One task per API process, on its own connection (never one of the search pool's: a pool
drained by searches must not silence the very report that would relieve it). Each
``interval`` it takes the bulkhead's pressure; it writes only when the value changed or a
non-zero one is halfway to expiring, so an idle or comfortable API writes nothing. A report
lives ``PRESSURE_TTL_INTERVALS`` intervals: an API that is killed stops pacing ingestion that
soon. At shutdown it withdraws its row.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Final

import psycopg

from pgenough.core import Backoff
from pgenough.core.db import AsyncConn, with_network_timeout
from pgenough.core.retry import Reconnect
from pgenough_plans.api.bulkhead import Bulkhead
from pgenough_plans.api.config import ApiConfig
from pgenough_plans.ingest import pacing

log = logging.getLogger(__name__)

PRESSURE_TTL_INTERVALS: Final = 10
RECONNECT_DELAY: Final = 1.0
WITHDRAW_TIMEOUT: Final = 2.0


def source_name() -> str:
    """This API process, as its row is keyed: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def publish_pressure(bulkhead: Bulkhead, url: str, config: ApiConfig) -> None:
    """Publish the bulkhead's pressure until cancelled; stops for good (with a warning) when
    this role may not write ``plans.read_pressure``."""
    source = source_name()
    ttl = config.pressure_interval * PRESSURE_TTL_INTERVALS
    conn: AsyncConn | None = None
    # A fixed ceiling, as before the one reconnect policy: the row matters only while the
    # API is busy, and a publisher that comes back late paces ingestion late.
    reconnect = Reconnect(
        "read pressure publisher", Backoff(RECONNECT_DELAY, RECONNECT_DELAY), logger=log
    )
    try:
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    with_network_timeout(url),
                    autocommit=True,
                    application_name="pgenough-api-pressure",
                )
                await pacing.forget_expired(conn)
                reconnect.succeeded()
                await _publish_loop(conn, bulkhead, config, source, ttl)
            except psycopg.errors.InsufficientPrivilege:
                log.warning(
                    "this role may not write plans.read_pressure: ingestion will not yield"
                    " to /search (grant it with `pgenough-plans migrate --api-role NAME`, or set"
                    " PGENOUGH_API_PUBLISH_PRESSURE=0)"
                )
                return
            except psycopg.Error as exc:
                delay = reconnect.failed(exc)
                if conn is not None:
                    await conn.close()
                    conn = None
                await reconnect.wait(delay)
    finally:
        if conn is not None and not conn.closed:
            try:
                async with asyncio.timeout(WITHDRAW_TIMEOUT):
                    await pacing.withdraw(conn, source)
            except (psycopg.Error, TimeoutError):
                pass  # it expires on its own
            await conn.close()


async def _publish_loop(
    conn: AsyncConn,
    bulkhead: Bulkhead,
    config: ApiConfig,
    source: str,
    ttl: float,
) -> None:
    published = 0.0
    written_at = 0.0
    while True:
        await asyncio.sleep(config.pressure_interval)
        pressure = bulkhead.take_pressure(config.pressure_threshold)
        now = time.monotonic()
        stale = pressure > 0 and now - written_at >= ttl / 2
        if pressure != published or stale:
            await pacing.publish(conn, source, pressure, ttl)
            published, written_at = pressure, now
