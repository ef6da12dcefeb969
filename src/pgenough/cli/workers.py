"""What worker commands (``pgenough worker run``, and an application's own) share: their typer
group, a pool on a migrated database, and a worker's own metrics port."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated

import prometheus_client
import typer
from psycopg_pool import AsyncConnectionPool

from pgenough.cli.base import fail
from pgenough.core import migrate, open_pool
from pgenough.core.migrations import MigrationSet
from pgenough.httpserver import ListenError
from pgenough.settings import Settings

worker_app = typer.Typer(help="Run your tasks.", no_args_is_help=True)


async def ready_pool(
    settings: Settings,
    name: str,
    max_size: int | None = None,
    layers: Sequence[MigrationSet] = (),
) -> AsyncConnectionPool:
    """A pool on a database migrated for the core and ``layers`` (workers migrate on
    start-up; it is idempotent)."""
    pool = await open_pool(
        settings.resolve_database_url(),
        max_size=max_size or settings.pool_max_size,
        name=name,
        prepared_statements=settings.prepare(),
    )
    async with pool.connection() as conn:
        await migrate(conn, layers)
    return pool


async def session_pool(settings: Settings, name: str, max_size: int) -> AsyncConnectionPool | None:
    """Behind a transaction pooler, a pool of direct sessions for session-scoped advisory
    locks (``settings.session_url()``); None without a pooler (the main pool does)."""
    url = settings.session_url()
    if url is None:
        return None
    return await open_pool(url, max_size=max_size, name=f"{name}-session")


MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve Prometheus metrics at /metrics on this port (default: settings; none).",
    ),
]


def serve_metrics(settings: Settings, port: int | None) -> None:
    """A worker's own /metrics endpoint, on a daemon thread: its counters (fetches, chunks,
    jobs, pools) exist only in its process, so Prometheus must scrape each worker."""
    port = settings.metrics_port if port is None else port
    if port is None:
        return
    host = settings.metrics_host
    try:
        server, _ = prometheus_client.start_http_server(port, addr=host)
    except OSError as exc:
        fail(f"metrics: {ListenError(host, port, exc)}")
    logging.getLogger("pgenough.cli").info(
        "metrics at http://%s:%d/metrics", host, server.server_port
    )
