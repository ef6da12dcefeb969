"""The HTTP API: ``create_app(api_config, ui_config)`` builds it; its lifespan opens what it holds.

At start-up the lifespan opens the API's pool (each connection with the search timeout as its
``statement_timeout``), starts the cache's invalidation listener and waits until it listens,
so no change committed after start-up is missed. With the dashboard (pgenough's, with the
plan service's extension: ``api/ui``) mounted at ``/ui``, it also runs the dashboard (its own
pool and live feed, on the API's replicas when it reads some), closed first at shutdown.
``prepare_database`` is what the CLI runs first: migrate (unless the role may only read) and
check that the plans (and, unless ``api_cursor_secret`` is set, the cursor secret) are
readable. The key that signs ``/search`` cursors comes from ``api_cursor_secret``, or else
from the secret the ``api`` track's first migration generated in ``plans.api_secrets``, read
once at start-up (by ``prepare_database`` under ``pgenough-plans api``, else by the lifespan), so
that every replica on the database signs and checks cursors alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any, Final

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from pgenough import __version__
from pgenough.core import migrate, open_pool
from pgenough.core.errors import DatabaseError, MigrationError
from pgenough.core.migrations import MigrationSet
from pgenough.core.service import Services, TaskService
from pgenough.dashboard import MIGRATIONS as DASHBOARD_MIGRATIONS
from pgenough.dashboard import Dashboard, DashboardConfig
from pgenough_plans.api import cursor, docs, errors, health, replica, routes
from pgenough_plans.api.answer import Answer
from pgenough_plans.api.bulkhead import Bulkhead
from pgenough_plans.api.cache import ResponseCache, invalidate_on
from pgenough_plans.api.config import ApiConfig
from pgenough_plans.api.deps import ApiState
from pgenough_plans.api.metrics import RequestMetrics
from pgenough_plans.api.pressure import publish_pressure
from pgenough_plans.api.search import Q
from pgenough_plans.api.ui import plan_dashboard
from pgenough_plans.ingest.store import MIGRATIONS as PLANS_MIGRATIONS

log = logging.getLogger(__name__)

POOL_MIN_SIZE: Final = 2
API_MIGRATIONS: Final = MigrationSet("api", "pgenough_plans.api")
"""The API's own track: its secrets (``plans.api_secrets``)."""
MIGRATIONS: Final = (PLANS_MIGRATIONS, API_MIGRATIONS, DASHBOARD_MIGRATIONS)
"""The schema tracks above the core that the API serves from: the plans, the API's own and the
dashboard's."""
LISTEN_START_TIMEOUT: Final = 10.0
UI_PREFIX: Final = "/ui"


def create_app(config: ApiConfig, ui_config: DashboardConfig | None = None) -> FastAPI:
    """The API app, serving from ``config.database_url``, with the dashboard at ``/ui``
    unless ``ui_config`` is None; the configs are ``Settings.api_config()`` and
    ``Settings.ui_config()``; ``ApiConfigError`` at once without a database URL."""
    dashboard: Dashboard | None = None
    if ui_config is not None:
        # The dashboard LISTENs and keeps session settings: direct, behind a pooler.
        dashboard = plan_dashboard(
            ui_config,
            config.direct_url(),
            replicas=(lambda: app.state.api.replicas) if config.read_urls else None,
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app.state.api = await stack.enter_async_context(running(config))
            if dashboard is not None:
                await stack.enter_async_context(dashboard.running())
            yield

    app = FastAPI(
        title="pgenough",
        version=__version__,
        summary="Events from the canonical plans, read from PostgreSQL only.",
        lifespan=lifespan,
        # Starlette's trailing-slash redirect is built from the Host header, which any
        # client sets; a path is answered as written or not at all.
        redirect_slashes=False,
        docs_url=None,  # served by api/docs.py, without a CDN
        redoc_url=None,
    )
    errors.install(app)
    docs.install(app)
    app.add_middleware(RequestMetrics)
    app.include_router(routes.router)
    app.include_router(health.router)
    if dashboard is not None:
        app.state.dashboard = dashboard
        app.mount(UI_PREFIX, dashboard.app)
        app.add_api_route(UI_PREFIX, _to_the_overview, include_in_schema=False)
    return app


async def _to_the_overview(request: Request) -> Response:
    """``/ui`` is the dashboard's overview, ``/ui/`` (a mount answers below its path)."""
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}{UI_PREFIX}/", status_code=307)


@asynccontextmanager
async def running(config: ApiConfig) -> AsyncIterator[ApiState]:
    """The pool, the cache and its listener, the bulkhead and its pressure publisher: opened,
    then closed."""
    url = config.server_url()
    # Behind a transaction pooler the sessions carry no statement timeout (PgBouncer refuses
    # the ``options`` startup parameter that sets it, and a session setting would stay on a
    # server connection others share): each search sets it for its own transaction
    # (``answer.search``). The cache's LISTEN needs a session: it goes direct.
    pool = await open_pool(
        url,
        min_size=min(POOL_MIN_SIZE, config.pool_max_size),
        max_size=config.pool_max_size,
        name="pgenough-api",
        statement_timeout=None if config.behind_pooler else config.search_timeout,
        prepared_statements=config.prepared_statements,
    )
    listen_url = config.direct_url()
    read = await replica.open_replicas(
        config.read_urls,
        config.max_replica_lag,
        max_size=config.pool_max_size,
        statement_timeout=config.search_timeout,
    )
    cache: ResponseCache[Answer] = ResponseCache(config.cache_size, config.cache_ttl)
    bulkhead = Bulkhead(
        config.max_concurrent_searches, config.bulkhead_wait, config.max_concurrent_streams
    )
    services = Services()
    try:
        if read is not None:
            probed = asyncio.Event()
            watched = read  # bound for the closure
            await services.start(
                TaskService(
                    "api-replica",
                    lambda: replica.watch(watched, pool, probed),
                    ready=probed,
                    ready_timeout=LISTEN_START_TIMEOUT,
                )
            )
        if config.cache_enabled:
            listening = asyncio.Event()
            fence = None if read is None else (lambda: replica.primary_lsn(pool))
            listener = TaskService(
                "api-cache",
                lambda: invalidate_on(cache, listen_url, listening, fence=fence),
                ready=listening,
                ready_timeout=LISTEN_START_TIMEOUT,
            )
            if not await services.start(listener):
                log.warning("cache listener not connected yet: the cache is bypassed until it is")
        if config.publish_pressure:
            await services.start(
                TaskService("api-pressure", lambda: publish_pressure(bulkhead, url, config))
            )
        if config.cursor_key is not None:
            cursor_key = config.cursor_key
        else:
            async with pool.connection() as conn:
                cursor_key = await database_cursor_key(conn)
        yield ApiState(config, pool, cache, bulkhead, cursor_key, read)
    finally:
        await services.stop()
        if read is not None:
            await replica.close_replicas(read)
        await pool.close()


@contextmanager
def _readable(table: str, what: str | None = None, or_else: str = "") -> Iterator[None]:
    """psycopg's "no such table" and "permission denied" on ``table`` (holding ``what``) as a
    ``DatabaseError`` saying what to do."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise DatabaseError(
            f"{table} does not exist: run `pgenough-plans migrate` as the schema's owner"
        ) from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        raise DatabaseError(
            f"this role may not read {what or table}: grant it with"
            f" `pgenough-plans migrate --api-role NAME` as the schema's owner{or_else}"
        ) from exc


async def database_cursor_key(conn: psycopg.AsyncConnection[Any]) -> bytes:
    """The cursor key from the database's secret; ``DatabaseError`` with what to do when this
    role cannot read it."""
    with _readable(
        "plans.api_secrets",
        "the cursor secret in plans.api_secrets",
        ", or set PGENOUGH_API_CURSOR_SECRET",
    ):
        cur = await conn.execute(Q["cursor_secret"])
        row = await cur.fetchone()
    if row is None:
        raise DatabaseError(
            "plans.api_secrets has no 'cursor' secret: set PGENOUGH_API_CURSOR_SECRET, or"
            " put one back (docs/plan-service/operations.md, the cursor secret)"
        )
    return cursor.key_of(bytes(row[0]))


async def prepare_database(
    url: str, *, migrate_schema: bool, read_cursor_secret: bool = True
) -> bytes | None:
    """Before serving: migrate (unless the role may only read), then check that this role
    can read ``plans.plans`` and (when asked, for there is no ``api_cursor_secret``) read
    the cursor key, returned so that the app need not read it again (None when not asked);
    ``DatabaseError`` with what to do when it cannot."""
    pool = await open_pool(url, max_size=1, name="pgenough-api-start")
    try:
        async with pool.connection() as conn:
            if migrate_schema:
                try:
                    await migrate(conn, MIGRATIONS)
                except MigrationError as exc:
                    if isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
                        raise DatabaseError(
                            f"{exc}; this role may not migrate: set PGENOUGH_API_MIGRATE=0 and"
                            " run `pgenough-plans migrate` as the schema's owner"
                        ) from exc
                    raise
            with _readable("plans.plans"):
                await conn.execute(Q["plans_readable"])
            if read_cursor_secret:
                return await database_cursor_key(conn)
            return None
    finally:
        await pool.close()
