"""Ingestion that yields to the read path: the API publishes its pressure, bulk work paces.

The seed's first promise is that ingestion never becomes a /search problem, but a fetch
(parse and COPY) or a process (apply) of a large snapshot competes with the API for the same
PostgreSQL and, on a small machine, the same cores. So:

- each API process samples its bulkhead (``api/pressure.py``) and, while its searches fill
  more than a threshold of its slots (or one was refused), writes its pressure, 0..1, to its
  own row of ``plans.read_pressure`` with a short expiry: at most one write per sample,
  none while there is no pressure to report;
- the fetch and process workers read the highest live pressure between chunks and pause
  ``pressure * max_pause`` seconds before the next one.

Bounded on purpose: a pause never exceeds ``max_pause`` per chunk, so ingestion always
progresses (at least one chunk per ``max_pause`` plus the chunk's own time, whatever the API
says), and a row counts only until it expires, so a killed API stops pacing within its TTL.
Only PostgreSQL carries the signal: the workers and the API share nothing else.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

from pgenough.core.db import AsyncConn, named_queries
from pgenough_plans.ingest.defaults import DEFAULT_PACING_MAX_PAUSE

_Q = named_queries("pgenough_plans.ingest", "pacing")

MAX_PAUSE_LIMIT: Final = 5.0
"""The longest pause per chunk a setting may ask for: well under a fetch's heartbeat."""


@dataclass(frozen=True)
class PacingConfig:
    max_pause: float = DEFAULT_PACING_MAX_PAUSE
    """Seconds paused between chunks at full pressure; 0 turns pacing off."""

    def __post_init__(self) -> None:
        if not 0 <= self.max_pause <= MAX_PAUSE_LIMIT:
            raise ValueError(f"max_pause must be within 0..{MAX_PAUSE_LIMIT:g} seconds")

    @property
    def enabled(self) -> bool:
        return self.max_pause > 0


DEFAULT_PACING: Final = PacingConfig()
NO_PACING: Final = PacingConfig(max_pause=0.0)


async def current_pressure(conn: AsyncConn) -> float:
    """The highest pressure a live API publishes, 0..1 (0 when none does)."""
    cur = await conn.execute(_Q["current_pressure"])
    row = await cur.fetchone()
    return float(row[0]) if row else 0.0


async def publish(conn: AsyncConn, source: str, pressure: float, ttl: float) -> None:
    """Set ``source``'s pressure, counted for ``ttl`` seconds unless refreshed."""
    await conn.execute(
        _Q["publish_pressure"],
        {"source": source, "pressure": min(1.0, max(0.0, pressure)), "ttl": ttl},
    )


async def withdraw(conn: AsyncConn, source: str) -> None:
    await conn.execute(_Q["withdraw_pressure"], {"source": source})


async def forget_expired(conn: AsyncConn) -> None:
    await conn.execute(_Q["forget_expired_pressure"])


class Pacer:
    """One worker's pacing: ``between_chunks`` is its only hook into the chunk loop."""

    def __init__(self, config: PacingConfig) -> None:
        self.config = config
        self.chunks = 0
        self.pauses = 0
        self.paused_seconds = 0.0

    async def between_chunks(self, conn: AsyncConn) -> float:
        """Pause before the next chunk while the read path is under pressure; the seconds
        paused. Call it with no transaction open on ``conn``: a pause must hold no snapshot
        or lock the API could wait on."""
        self.chunks += 1
        if not self.config.enabled:
            return 0.0
        pressure = await current_pressure(conn)
        if pressure <= 0:
            return 0.0
        pause = min(1.0, pressure) * self.config.max_pause
        self.pauses += 1
        self.paused_seconds += pause
        await asyncio.sleep(pause)
        return pause
