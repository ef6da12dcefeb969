"""Reads from a streaming replica (``PGENOUGH_API_READ_URL``): where a search reads, and how
far behind the replica may be.

Only ``/search`` reads here; everything else (writes, the cache's LISTEN, readiness, the
pressure publisher, the dashboard) stays on the primary.

**Lag** is measured in time, but not as ``now() - pg_last_xact_replay_timestamp()``: on an
idle primary that grows without bound though the replica has everything. Instead ``watch``
samples the primary's ``pg_current_wal_lsn()`` every ``PROBE_INTERVAL`` and keeps the samples
of the last ``max_lag`` (and a little more); a replica that has replayed ``lsn`` holds
everything the primary had written at the latest sample at or below ``lsn``, so its lag is at
most the time since that sample. Idle, that is the newest sample: at most
``PROBE_INTERVAL``. The measure errs on the safe side by up to ``PROBE_INTERVAL``; a replica
behind every kept sample, or not answering, is infinitely behind.

**Past ``max_lag``**, or while the replica does not answer, a search reads the primary (and
counts it in ``pgenough_api_replica_fallbacks_total``): slower, never staler than the bound.
A search already running on the replica when it goes away gets 503 UNAVAILABLE, as on a lost
primary; the next ones read the primary until the replica answers again.

**The cache** (``pgenough.api.cache``) gets its invalidations from the primary's listener;
after each it reads the primary's LSN (``fence``), and a page read on the replica is cached
only when the replica had replayed that LSN before the page's query began.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgenough.api import metrics
from pgenough.core import named_queries

log = logging.getLogger(__name__)

Q: Final = named_queries("pgenough.api", "replica")
PROBE_INTERVAL: Final = 0.25
"""Seconds between two samples of the primary's LSN and the replica's replay: the lag's
resolution, and at most how long a replica that went away is still tried."""
PRIMARY: Final = "primary"
REPLICA: Final = "replica"


def lsn(text: str) -> int:
    """A ``pg_lsn`` (``16/B374D848``) as an int that orders as ``pg_lsn`` does."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass
class Replica:
    """The read replica's pool and what is known of its lag."""

    pool: AsyncConnectionPool
    max_lag: float
    clock: Callable[[], float] = time.monotonic
    up: bool = False
    """The last probe (or search) reached the replica."""
    lag: float = math.inf
    """Seconds behind the primary as of the last probe; infinite when unknown."""
    _samples: deque[tuple[float, int]] = field(default_factory=deque)
    """(when, the primary's LSN then), oldest first."""

    def sample_primary(self, position: int) -> None:
        now = self.clock()
        self._samples.append((now, position))
        # Keep one sample older than the bound, so that a replica behind it is known to be.
        keep_after = now - self.max_lag - 2 * PROBE_INTERVAL
        while len(self._samples) > 1 and self._samples[1][0] < keep_after:
            self._samples.popleft()

    def lag_at(self, replayed: int) -> float:
        """How far behind a replica that has replayed ``replayed`` may be, in seconds."""
        for when, position in reversed(self._samples):
            if position <= replayed:
                return max(0.0, self.clock() - when)
        return math.inf

    def observe(self, replayed: int | None) -> float:
        """The replica answered, at ``replayed`` (None: it is no standby, it has all)."""
        self.up = True
        self.lag = 0.0 if replayed is None else self.lag_at(replayed)
        metrics.REPLICA_LAG.set(self.lag)
        return self.lag

    def lost(self, reason: str) -> None:
        if self.up:
            log.warning("read replica unreachable (%s): searches read the primary", reason)
        self.up = False
        self.lag = math.inf
        metrics.REPLICA_LAG.set(math.inf)

    @property
    def reading(self) -> str:
        """Where the next search reads."""
        return REPLICA if self.up and self.lag <= self.max_lag else PRIMARY


async def _position(conn: psycopg.AsyncConnection[Any], name: str) -> int | None:
    cur = await conn.execute(Q[name])
    row = await cur.fetchone()
    return None if row is None or row[0] is None else lsn(row[0])


async def primary_lsn(primary: AsyncConnectionPool, timeout: float = PROBE_INTERVAL * 4) -> int:
    """The primary's current WAL position (the cache's fence after an invalidation)."""
    async with asyncio.timeout(timeout), primary.connection(timeout=timeout) as conn:
        position = await _position(conn, "primary_lsn")
    assert position is not None  # pg_current_wal_lsn() is never NULL on a primary
    return position


async def watch(replica: Replica, primary: AsyncConnectionPool, started: asyncio.Event) -> None:
    """Sample the primary's LSN and the replica's replay every ``PROBE_INTERVAL``, until
    cancelled; ``started`` is set after the first round."""
    while True:
        try:
            replica.sample_primary(await primary_lsn(primary))
        except (TimeoutError, PoolTimeout, psycopg.Error) as exc:
            # No new sample: the kept ones age, and the measured lag grows, as it should.
            log.debug("primary LSN not sampled: %s", exc)
        try:
            async with (
                asyncio.timeout(PROBE_INTERVAL * 4),
                replica.pool.connection(timeout=PROBE_INTERVAL * 4) as conn,
            ):
                replica.observe(await _position(conn, "replayed_lsn"))
        except (TimeoutError, PoolTimeout, psycopg.Error) as exc:
            replica.lost(str(exc).strip().splitlines()[0] if str(exc).strip() else "timeout")
        started.set()
        await asyncio.sleep(PROBE_INTERVAL)  # the probe's period, not a wait for an event


async def read_connection(
    replica: Replica | None,
    primary: AsyncConnectionPool,
    stack: AsyncExitStack,
    timeout: float,
) -> tuple[psycopg.AsyncConnection[Any], int | None]:
    """A connection for a search, held by ``stack``, and the LSN the replica had replayed
    before it (None: the primary's, which has everything committed)."""
    if replica is not None:
        if replica.reading == REPLICA:
            inner = AsyncExitStack()
            try:
                conn = await inner.enter_async_context(replica.pool.connection(timeout=timeout))
                replayed = await _position(conn, "replayed_lsn")
            except (PoolTimeout, psycopg.OperationalError) as exc:
                await inner.aclose()
                replica.lost(str(exc).strip().splitlines()[0] if str(exc).strip() else "timeout")
                metrics.REPLICA_FALLBACKS.labels("unreachable").inc()
            else:
                if replica.observe(replayed) <= replica.max_lag:
                    stack.push_async_exit(inner)
                    metrics.REPLICA_READS.labels(REPLICA).inc()
                    return conn, replayed
                await inner.aclose()
                metrics.REPLICA_FALLBACKS.labels("lag").inc()
        else:
            metrics.REPLICA_FALLBACKS.labels("lag" if replica.up else "unreachable").inc()
        metrics.REPLICA_READS.labels(PRIMARY).inc()
    conn = await stack.enter_async_context(primary.connection(timeout=timeout))
    return conn, None
