"""The HTTP API: ``create_app(settings)`` builds it; its lifespan opens what it holds.

At start-up the lifespan opens the API's pool (each connection with the search timeout as its
``statement_timeout``), starts the cache's invalidation listener and waits until it listens,
so no change committed after start-up is missed. With the dashboard enabled (``api/ui``) it
also opens the dashboard's own pool and live feed, closed first at shutdown.
``prepare_database`` is what the CLI runs first: migrate (unless the role may only read) and
check that the plans (and, unless ``api_cursor_secret`` is set, the cursor secret) are
readable. The key that signs ``/search`` cursors comes from ``api_cursor_secret``, or else
from the secret the ``api`` track's first migration generated in ``pgenough.api_secrets``, read
at start-up, so that every replica on the database signs and checks cursors alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final

import psycopg
from fastapi import FastAPI

from pgenough import __version__
from pgenough.api import cursor, docs, errors, health, routes, ui
from pgenough.api.answer import Answer
from pgenough.api.bulkhead import Bulkhead
from pgenough.api.cache import ResponseCache, invalidate_on
from pgenough.api.config import ApiConfig
from pgenough.api.deps import ApiState
from pgenough.api.metrics import RequestMetrics
from pgenough.api.pressure import publish_pressure
from pgenough.api.search import Q
from pgenough.core import (
    DatabaseError,
    MigrationError,
    MigrationSet,
    database_url,
    migrate,
    open_pool,
)
from pgenough.core.service import Services, TaskService
from pgenough.plans.store import MIGRATIONS as PLANS_MIGRATIONS
from pgenough.settings import Settings

log = logging.getLogger(__name__)

POOL_MIN_SIZE: Final = 2
API_MIGRATIONS: Final = MigrationSet("api", "pgenough.api")
"""The API's own track: its secrets (``pgenough.api_secrets``)."""
MIGRATIONS: Final = (PLANS_MIGRATIONS, API_MIGRATIONS, ui.MIGRATIONS)
"""The schema tracks above the core that the API serves from: the plans, the API's own and the
dashboard's."""
LISTEN_START_TIMEOUT: Final = 10.0


def api_config(settings: Settings) -> ApiConfig:
    return ApiConfig(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        cursor_key=(
            None
            if settings.api_cursor_secret is None
            else cursor.key_of_setting(settings.api_cursor_secret.get_secret_value())
        ),
        pool_max_size=settings.pool_max_size,
        max_concurrent_searches=settings.api_max_concurrent_searches,
        bulkhead_wait=settings.api_bulkhead_wait,
        max_concurrent_streams=settings.api_max_concurrent_streams,
        search_timeout=settings.api_search_timeout,
        stream_timeout=settings.api_stream_timeout,
        stream_stall_timeout=settings.api_stream_stall_timeout,
        pool_timeout=settings.api_pool_timeout,
        ready_timeout=settings.api_ready_timeout,
        ready_full_after=settings.api_ready_full_after,
        cache_size=settings.api_cache_size,
        cache_ttl=settings.api_cache_ttl,
        search_delay=settings.api_search_delay,
        publish_pressure=settings.api_publish_pressure,
        pressure_threshold=settings.api_pressure_threshold,
        pressure_interval=settings.api_pressure_interval,
    )


def create_app(settings: Settings) -> FastAPI:
    """The API app; ``ApiConfigError`` at once when the settings are impossible."""
    config = api_config(settings)
    ui_config = ui.ui_config(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app.state.api = await stack.enter_async_context(running(config))
            if ui_config.enabled:
                url = ui_config.database_url
                if not url:
                    url = await asyncio.to_thread(
                        database_url, config.database_url, config.data_dir
                    )
                app.state.ui = await stack.enter_async_context(ui.running(ui_config, url))
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
    if ui_config.enabled:
        ui.install(app, ui_config)
    return app


@asynccontextmanager
async def running(config: ApiConfig) -> AsyncIterator[ApiState]:
    """The pool, the cache and its listener, the bulkhead and its pressure publisher: opened,
    then closed."""
    url = await asyncio.to_thread(database_url, config.database_url, config.data_dir)
    pool = await open_pool(
        url,
        min_size=min(POOL_MIN_SIZE, config.pool_max_size),
        max_size=config.pool_max_size,
        name="pgenough-api",
        statement_timeout=config.search_timeout,
    )
    cache: ResponseCache[Answer] = ResponseCache(config.cache_size, config.cache_ttl)
    bulkhead = Bulkhead(
        config.max_concurrent_searches, config.bulkhead_wait, config.max_concurrent_streams
    )
    services = Services()
    try:
        if config.cache_enabled:
            listening = asyncio.Event()
            listener = TaskService(
                "api-cache",
                lambda: invalidate_on(cache, url, listening),
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
        yield ApiState(config, pool, cache, bulkhead, cursor_key)
    finally:
        await services.stop()
        await pool.close()


async def database_cursor_key(conn: psycopg.AsyncConnection[Any]) -> bytes:
    """The cursor key from the database's secret; ``DatabaseError`` with what to do when this
    role cannot read it."""
    try:
        cur = await conn.execute(Q["cursor_secret"])
        row = await cur.fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise DatabaseError(
            "pgenough.api_secrets does not exist: run `pgenough migrate` as the schema's owner"
        ) from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        raise DatabaseError(
            "this role may not read the cursor secret in pgenough.api_secrets: grant it with"
            " `pgenough migrate --api-role NAME` as the schema's owner, or set"
            " PGENOUGH_API_CURSOR_SECRET"
        ) from exc
    if row is None:
        raise DatabaseError(
            "pgenough.api_secrets has no 'cursor' secret: set PGENOUGH_API_CURSOR_SECRET, or"
            " put one back (docs/operations.md, rotating the cursor secret)"
        )
    return cursor.key_of(bytes(row[0]))


async def prepare_database(
    url: str, *, migrate_schema: bool, read_cursor_secret: bool = True
) -> None:
    """Before serving: migrate (unless the role may only read), then check that this role
    can read ``pgenough.plans`` and (when asked, for there is no ``api_cursor_secret``) the
    cursor secret; ``DatabaseError`` with what to do when it cannot."""
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
                            " run `pgenough migrate` as the schema's owner"
                        ) from exc
                    raise
            try:
                await conn.execute(Q["plans_readable"])
            except psycopg.errors.UndefinedTable as exc:
                raise DatabaseError(
                    "pgenough.plans does not exist: run `pgenough migrate` as the schema's owner"
                ) from exc
            except psycopg.errors.InsufficientPrivilege as exc:
                raise DatabaseError(
                    "this role may not read pgenough.plans: grant it with"
                    " `pgenough migrate --api-role NAME` as the schema's owner"
                ) from exc
            if read_cursor_secret:
                await database_cursor_key(conn)
    finally:
        await pool.close()
