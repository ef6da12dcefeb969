"""The dashboard's pages on the API's read replicas (``PGENOUGH_API_READ_URL``): a
``pgenough.dashboard.Reader``.

The dashboard holds a pool as small as its own on each replica, as the role of
``ui_database_url`` when set, sharing the API's lag measures: its read-only pages read there
(through ``pgenough_plans.api.replica.read_connection``, as /search does), everything else
(actions, login, sessions) on the dashboard's own pool, the primary. **Read-your-writes**: an
action's write leaves the primary's WAL position (``written``), which the browser carries for
as long as a replica within the bound could still lack it; while it does, a page reads only a
replica that has replayed that position, else the primary. The live overview is held to the
position the primary had after the last change it heard of (``fence``), so a change it
announces is never shown missing.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Final

from psycopg_pool import AsyncConnectionPool

from pgenough.core.db import AsyncConn
from pgenough.dashboard import DashboardConfig, Read, Reader, ReaderFactory, Written
from pgenough_plans.api import replica
from pgenough_plans.api.replica import Replicas, current_lsn, read_connection

POOL_MAX_SIZE: Final = 3
"""Connections the dashboard holds on each replica, as many as on its own pool."""
PAGE_STATEMENT_TIMEOUTS: Final = 2
"""A page read on a replica is cut (``replica.deadline``) after this many statement timeouts
and ``replica.READ_MARGIN``: its few statements together take far less on a replica that
answers; one that stops answering gets the error page, and the next page reads elsewhere."""


def read_from(read: replica.Read) -> str:
    """Where a page read, for its header: the primary, or which replica and its lag."""
    if read.replica is None:
        return "read from the primary"
    return f"read from replica {read.replica.label}, at most {read.replica.lag:.2f} s behind"


class ReplicaReader:
    """Pages on the replicas within the bound (that have replayed what they must show), else
    on the primary (the dashboard's own pool)."""

    def __init__(self, replicas: Replicas, primary: AsyncConnectionPool, timeout: float) -> None:
        self.replicas = replicas
        self.primary = primary
        self.timeout = timeout

    @asynccontextmanager
    async def read(self, at_least: int | None = None) -> AsyncIterator[Read]:
        async with AsyncExitStack() as stack:
            found = await read_connection(
                self.replicas, self.primary, stack, self.timeout, at_least=at_least
            )
            seconds = PAGE_STATEMENT_TIMEOUTS * self.timeout + replica.READ_MARGIN
            with replica.deadline(found.conn, seconds, found.replica):
                yield Read(found.conn, source=found.source, note=read_from(found))

    async def written(self, conn: AsyncConn) -> Written | None:
        # Past this age every replica within the bound has the write (the measure errs safe).
        max_lag = max(r.lag.max_lag for r in self.replicas.members)
        return Written(await current_lsn(conn), hold=math.ceil(max_lag) + 1)

    async def fence(self) -> int | None:
        return await replica.primary_lsn(self.primary, self.timeout)


def replica_reader(api_replicas: Callable[[], Replicas | None]) -> ReaderFactory:
    """The dashboard's reader on the API's replicas (``api_replicas()``, read when the
    dashboard starts, after the API: their lag measures are the API's)."""

    @asynccontextmanager
    async def opened(pool: AsyncConnectionPool, config: DashboardConfig) -> AsyncIterator[Reader]:
        shared = api_replicas()
        assert shared is not None  # given only when the API reads replicas
        replicas = await replica.open_replicas(
            [lag.url for lag in shared.measures],
            shared.members[0].lag.max_lag,
            max_size=POOL_MAX_SIZE,
            statement_timeout=config.statement_timeout,
            timeout=config.statement_timeout,
            reader=replica.DASHBOARD,
            user_of=config.database_url,
            sharing=shared,
        )
        assert replicas is not None  # shared has members
        try:
            yield ReplicaReader(replicas, pool, config.statement_timeout)
        finally:
            await replica.close_replicas(replicas)

    return opened
