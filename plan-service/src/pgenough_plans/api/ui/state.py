"""What the dashboard holds while the app runs: its own small pool, the live feed and its two
tasks, the login's secrets and throttle; opened in the app's lifespan, closed at its end.

The pool is the dashboard's, apart from the API's (so a slow page never takes a /search
connection): at most three connections, each with a short ``statement_timeout``, on
``ui_database_url`` when set. It is opened without waiting: a dashboard that cannot reach its
database says so on its pages, and /search starts regardless.

With read replicas (``api_read_url``) the dashboard also holds a pool as small on each, as
the role of ``ui_database_url`` when set, sharing the API's lag measures: its read-only pages
read there (``reading``, through ``pgenough_plans.api.replica.read_connection``, as /search does),
everything else (actions, login, sessions) on its primary pool (``connection``).
**Read-your-writes**: an action leaves the primary's WAL position after its write in a signed
cookie (``auth.WROTE_COOKIE``) for as long as a replica within the bound could still lack it;
while the browser carries it, a page reads only a replica that has replayed that position,
else the primary. The live overview is held to the position the primary had after the last
change it heard of (``LiveFeed.fence``), so a change it announces is never shown missing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgenough.cli import as_json
from pgenough.core import Services, TaskService, open_pool
from pgenough_plans.api import replica
from pgenough_plans.api.replica import Read, Replicas, read_connection
from pgenough_plans.api.ui.auth import Auth
from pgenough_plans.api.ui.config import POOL_MAX_SIZE, UiConfig
from pgenough_plans.api.ui.errors import UiError
from pgenough_plans.api.ui.live import Event, LiveFeed
from pgenough_plans.api.ui.throttle import LoginThrottle
from pgenough_plans.ingest import inspect

log = logging.getLogger(__name__)

LISTEN_START_TIMEOUT: Final = 10.0
PRIVILEGES: Final = (
    "SELECT on plans.runs, pgenough.jobs and plans.plan_failures"
    " (and UPDATE on pgenough.jobs for actions; with a token, SELECT, INSERT and DELETE on"
    " pgenough.ui_revoked_sessions)"
)


@dataclass(frozen=True)
class UiState:
    config: UiConfig
    pool: AsyncConnectionPool
    feed: LiveFeed
    auth: Auth
    throttle: LoginThrottle
    replicas: Replicas | None = None
    """The API's read replicas, through the dashboard's own pools; None: pages read ``pool``."""


@asynccontextmanager
async def connection(state: UiState) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection of the dashboard's pool on the primary (writes, sessions, anything that
    must see its own writes); what goes wrong with the database becomes a ``UiError`` that
    tells the operator what to do."""
    timeout = state.config.statement_timeout
    with database_errors(timeout):
        async with state.pool.connection(timeout=timeout) as conn:
            yield conn


@asynccontextmanager
async def reading(state: UiState, at_least: int | None = None) -> AsyncIterator[Read]:
    """A connection for a read-only page: a read replica within the bound (that has replayed
    ``at_least``, the session's last write, when given), else the primary; errors as
    ``connection``'s."""
    timeout = state.config.statement_timeout
    with database_errors(timeout):
        async with AsyncExitStack() as stack:
            yield await read_connection(
                state.replicas, state.pool, stack, timeout, at_least=at_least
            )


@contextmanager
def database_errors(timeout: float) -> Iterator[None]:
    """The database's failures as ``UiError``s that say what to do."""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        raise UiError(
            503,
            "UNAVAILABLE",
            f"the dashboard's database role may not read what it shows ({exc.diag.message_primary})"
            f": set PGENOUGH_UI_DATABASE_URL to a role with {PRIVILEGES}; without it the"
            " dashboard uses the API's DATABASE_URL",
            "The dashboard's role lacks privileges",
        ) from exc
    except psycopg.errors.UndefinedTable as exc:
        raise UiError(
            503,
            "UNAVAILABLE",
            f"the dashboard's database lacks a table ({exc.diag.message_primary}): run"
            " `pgenough-plans migrate` as the schema's owner",
            "The schema is not up to date",
        ) from exc
    except psycopg.errors.QueryCanceled as exc:
        raise UiError(
            503,
            "UNAVAILABLE",
            f"the query ran past PGENOUGH_UI_STATEMENT_TIMEOUT ({timeout:g} s)",
            "Too slow",
        ) from exc
    except (PoolTimeout, psycopg.OperationalError) as exc:
        raise UiError(
            503,
            "UNAVAILABLE",
            f"the dashboard cannot reach its database within {timeout:g} s: check"
            " PGENOUGH_UI_DATABASE_URL (unset: the API's DATABASE_URL), or the read replica"
            " it was reading (PGENOUGH_API_READ_URL)",
            "Database unavailable",
        ) from exc


async def overview_event(state: UiState) -> Event:
    """The live feed's snapshot: the overview as JSON, or the problem that prevents it; on a
    replica only once it has replayed the last change the feed heard of."""
    try:
        async with reading(state, state.feed.fence) as read:
            view = await inspect.overview(read.conn)
    except UiError as exc:
        return Event("problem", json.dumps({"message": exc.message}))
    return Event("overview", json.dumps(as_json(view)))


@asynccontextmanager
async def running(
    config: UiConfig, url: str, api_replicas: Replicas | None = None
) -> AsyncIterator[UiState]:
    """The dashboard's pools, feed and tasks; ``api_replicas``: the API's read replicas,
    whose lag measures the dashboard's pools on them share."""
    pool = await open_pool(
        url,
        min_size=1,
        max_size=POOL_MAX_SIZE,
        name="pgenough-ui",
        timeout=config.statement_timeout,
        statement_timeout=config.statement_timeout,
        wait=False,
    )
    replicas: Replicas | None = None
    if api_replicas is not None:
        try:
            replicas = await replica.open_replicas(
                [lag.url for lag in api_replicas.measures],
                api_replicas.members[0].lag.max_lag,
                max_size=POOL_MAX_SIZE,
                statement_timeout=config.statement_timeout,
                timeout=config.statement_timeout,
                reader=replica.DASHBOARD,
                user_of=config.database_url,
                sharing=api_replicas,
            )
        except BaseException:
            await pool.close()
            raise
    holder: list[UiState] = []

    async def snapshot() -> Event:
        return await overview_event(holder[0])

    async def fence() -> int:
        return await replica.primary_lsn(pool, config.statement_timeout)

    feed = LiveFeed(
        snapshot,
        tick=config.tick,
        max_clients=config.max_clients,
        fence=None if replicas is None else fence,
    )
    auth = Auth(config.token, session_max_age=config.session_max_age)
    state = UiState(config, pool, feed, auth, LoginThrottle(config.login_max_backoff), replicas)
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
        if replicas is not None:
            await replica.close_replicas(replicas)
        await pool.close()
