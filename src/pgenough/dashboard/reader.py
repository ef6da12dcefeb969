"""Where the dashboard's read-only pages read: the ``Reader`` hook.

The dashboard reads its own pool (``PoolReader``): the library reads nothing else. An
application that has more to offer (the plan service reads hot-standby replicas within a lag
bound) passes ``Dashboard(reader=...)``: a function that, given the dashboard's pool and
config, opens a ``Reader`` for as long as the dashboard runs. The hook is also how the
dashboard keeps **read-your-writes** and its live overview honest on such a reader:

- ``read(at_least)``: a connection for one page, held for the page's reads; ``at_least`` is
  what the browser's last action wrote (``Written.position``), which the connection must
  show. Its ``Read`` says where it read, for the page's header and the ``X-Pgenough-Read``
  response header (both omitted when ``source`` is None, as with one database).
- ``written(conn)``: after an action's write on ``conn`` (a connection of the dashboard's
  pool), the position later reads must reach, and for how long the browser should insist
  (kept in a signed cookie); None: every read sees every write (one database).
- ``fence()``: the position the live overview's next snapshot must reach after a change was
  announced; None: no need.

Actions, logins and sessions never go through the reader: they use the dashboard's pool.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from psycopg_pool import AsyncConnectionPool

from pgenough.core.db import AsyncConn

if TYPE_CHECKING:
    from pgenough.dashboard.config import DashboardConfig


@dataclass(frozen=True)
class Read:
    """Where a page read: its connection, and what to say of it."""

    conn: AsyncConn
    source: str | None = None
    """For the ``X-Pgenough-Read`` header (``primary``, ``replica host:port``); None: say
    nothing (one database)."""
    note: str | None = None
    """For the page's header (``read from replica db2:5432, at most 0.20 s behind``)."""


@dataclass(frozen=True)
class Written:
    """What an action wrote, as a reader tracks it."""

    position: int
    """The position later reads must reach (the plan service: the primary's WAL position)."""
    hold: float
    """Seconds the browser carries it: past them every read sees it anyway."""


class Reader(Protocol):
    """Where the read-only pages read (the module's docstring says each method's part)."""

    def read(self, at_least: int | None = None) -> AbstractAsyncContextManager[Read]: ...

    async def written(self, conn: AsyncConn) -> Written | None: ...

    async def fence(self) -> int | None: ...


ReaderFactory = Callable[
    [AsyncConnectionPool, "DashboardConfig"], AbstractAsyncContextManager[Reader]
]
"""What ``Dashboard(reader=...)`` takes: given the dashboard's pool and config when it
starts, a ``Reader`` for as long as it runs."""


class PoolReader:
    """The library's reader: every page reads the dashboard's own pool."""

    def __init__(self, pool: AsyncConnectionPool, timeout: float) -> None:
        self.pool = pool
        self.timeout = timeout

    @asynccontextmanager
    async def read(self, at_least: int | None = None) -> AsyncIterator[Read]:
        async with self.pool.connection(timeout=self.timeout) as conn:
            yield Read(conn)

    async def written(self, conn: AsyncConn) -> Written | None:
        return None

    async def fence(self) -> int | None:
        return None


@asynccontextmanager
async def pool_reader(pool: AsyncConnectionPool, config: DashboardConfig) -> AsyncIterator[Reader]:
    """The default ``ReaderFactory``: ``PoolReader`` on the dashboard's pool."""
    yield PoolReader(pool, config.statement_timeout)
