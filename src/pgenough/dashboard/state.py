"""What the dashboard holds while it runs: its own small pool, its reader, the live feed and
its two tasks, the login's secrets and throttle; opened by ``running`` (the dashboard's
lifespan), closed at its end.

The pool is the dashboard's, apart from its host application's (so a slow page never takes
a connection the application needs): at most three connections, each with a short
``statement_timeout``, on ``ui_database_url`` when set. It is opened without waiting: a
dashboard that cannot reach its database says so on its pages, and its host starts
regardless. Read-only pages read through the ``Reader`` (``reader.py``: the pool itself,
unless an application passes its own); everything else (actions, login, sessions) on the pool
(``connection``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgenough.core import open_pool
from pgenough.core.db import AsyncConn
from pgenough.core.errors import SchemaMissing
from pgenough.core.service import Services, TaskService
from pgenough.dashboard.auth import Auth
from pgenough.dashboard.config import POOL_MAX_SIZE, DashboardConfig
from pgenough.dashboard.errors import DashboardError
from pgenough.dashboard.extension import Section
from pgenough.dashboard.live import CHANNELS, Event, LiveFeed
from pgenough.dashboard.overview import read_overview
from pgenough.dashboard.reader import Read, Reader, ReaderFactory, pool_reader
from pgenough.dashboard.throttle import LoginThrottle
from pgenough.jsonable import as_json

log = logging.getLogger(__name__)

LISTEN_START_TIMEOUT: Final = 10.0
PRIVILEGES: Final = (
    "SELECT on pgenough.jobs, job_counts, queue_samples, workers and periodic and the"
    " application's tables the pages show (and UPDATE on pgenough.jobs for actions; with a"
    " token, SELECT, INSERT and DELETE on pgenough.ui_revoked_sessions)"
)


@dataclass(frozen=True)
class DashboardState:
    config: DashboardConfig
    pool: AsyncConnectionPool
    feed: LiveFeed
    auth: Auth
    throttle: LoginThrottle
    reader: Reader
    sections: tuple[Section, ...] = ()
    """The extensions' overview sections."""


@asynccontextmanager
async def connection(state: DashboardState) -> AsyncIterator[AsyncConn]:
    """A connection of the dashboard's pool (writes, sessions, anything that must see its
    own writes); what goes wrong with the database becomes a ``DashboardError`` that tells
    the operator what to do."""
    timeout = state.config.statement_timeout
    with database_errors(state.config):
        async with state.pool.connection(timeout=timeout) as conn:
            yield conn


@asynccontextmanager
async def reading(state: DashboardState, at_least: int | None = None) -> AsyncIterator[Read]:
    """A connection for a read-only page, from the reader (``at_least``: the browser's last
    write, which it must show); errors as ``connection``'s."""
    with database_errors(state.config):
        async with state.reader.read(at_least) as read:
            yield read


@contextmanager
def database_errors(config: DashboardConfig) -> Iterator[None]:
    """The database's failures as ``DashboardError``s that say what to do."""
    timeout = config.statement_timeout
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        raise DashboardError(
            503,
            "UNAVAILABLE",
            f"the dashboard's database role may not read what it shows ({exc.diag.message_primary})"
            f": set PGENOUGH_UI_DATABASE_URL to a role with {PRIVILEGES}; without it the"
            " dashboard uses DATABASE_URL",
            "The dashboard's role lacks privileges",
        ) from exc
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
        raise schema_missing(config, exc.diag.message_primary) from exc
    except SchemaMissing as exc:  # the core's calls say so themselves
        cause = exc.__cause__
        what = cause.diag.message_primary if isinstance(cause, psycopg.Error) else str(exc)
        raise schema_missing(config, what) from exc
    except psycopg.errors.QueryCanceled as exc:
        raise DashboardError(
            503,
            "UNAVAILABLE",
            f"the query ran past PGENOUGH_UI_STATEMENT_TIMEOUT ({timeout:g} s)",
            "Too slow",
        ) from exc
    except (PoolTimeout, psycopg.OperationalError) as exc:
        raise DashboardError(
            503,
            "UNAVAILABLE",
            f"the dashboard cannot reach its database within {timeout:g} s: check"
            " PGENOUGH_UI_DATABASE_URL (unset: DATABASE_URL), or the database its pages read",
            "Database unavailable",
        ) from exc


def schema_missing(config: DashboardConfig, what: str | None) -> DashboardError:
    return DashboardError(
        503,
        "UNAVAILABLE",
        f"the dashboard's database lacks a table ({what}): run `{config.migrate_hint}` as"
        " the schema's owner",
        "The schema is not up to date",
    )


async def overview_event(state: DashboardState) -> Event:
    """The live feed's snapshot: the overview as JSON, or the problem that prevents it; held
    to the last change the feed heard of (``LiveFeed.fence``) where the reader reads
    elsewhere than the primary."""
    try:
        async with reading(state, state.feed.fence) as read:
            view = await read_overview(read.conn, state.config.failure_window, state.sections)
    except DashboardError as exc:
        return Event("problem", json.dumps({"message": exc.message}))
    return Event("overview", json.dumps(as_json(view)))


@asynccontextmanager
async def running(
    config: DashboardConfig,
    url: str,
    *,
    reader: ReaderFactory | None = None,
    sections: Sequence[Section] = (),
    channels: Sequence[str] = (),
) -> AsyncIterator[DashboardState]:
    """The dashboard's pool, reader, feed and tasks on ``url`` (its own database URL
    already chosen), with the extensions' ``sections`` and ``channels``."""
    pool = await open_pool(
        url,
        min_size=1,
        max_size=POOL_MAX_SIZE,
        name="pgenough-ui",
        timeout=config.statement_timeout,
        statement_timeout=config.statement_timeout,
        wait=False,
    )
    async with AsyncExitStack() as stack:
        stack.push_async_callback(pool.close)
        opened = await stack.enter_async_context((reader or pool_reader)(pool, config))
        holder: list[DashboardState] = []

        async def snapshot() -> Event:
            return await overview_event(holder[0])

        feed = LiveFeed(
            snapshot,
            tick=config.tick,
            max_clients=config.max_clients,
            fence=opened.fence,
            channels=(*CHANNELS, *channels),
        )
        auth = Auth(config.token, session_max_age=config.session_max_age)
        state = DashboardState(
            config,
            pool,
            feed,
            auth,
            LoginThrottle(config.login_max_backoff),
            opened,
            tuple(sections),
        )
        holder.append(state)
        listening = asyncio.Event()
        listener = TaskService(
            "ui-listen",
            lambda: feed.listen(url, listening),
            ready=listening,
            ready_timeout=LISTEN_START_TIMEOUT,
        )
        services = Services()
        try:
            if not await services.start(listener):
                log.warning("dashboard listener not connected yet: the live view waits for it")
            await services.start(TaskService("ui-publish", feed.publish))
            yield state
        finally:
            feed.close()
            await services.stop()
