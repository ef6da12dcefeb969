"""``pgenough dashboard``: the queue's dashboard on its own server (``pgenough[dashboard]``).

It migrates the core's schema and the dashboard's own track first (as ``worker run`` does:
idempotent, under the migration lock), with ``DATABASE_URL``'s role; its pages then read with
``PGENOUGH_UI_DATABASE_URL``'s when set. Nothing of any application's schema is needed.
"""

from __future__ import annotations

from typing import Annotated

import typer

from pgenough.cli.base import database_url, fail, load_settings, needs_extra, run, setup_logging
from pgenough.core import migrate, open_pool
from pgenough.dashboard.schema import MIGRATIONS
from pgenough.httpserver import ListenError, listen
from pgenough.settings import Settings

EXTRA = "pgenough[dashboard]"


def dashboard_cmd(
    host: Annotated[
        str | None, typer.Option(help="Address to bind (default: settings, 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Port (default: settings, 8001).")
    ] = None,
    access_log: Annotated[bool, typer.Option("--access-log", help="Log every request.")] = False,
) -> None:
    """Serve the dashboard: every queue, its jobs, their failures and tracebacks, live; retry
    and discard with PGENOUGH_UI_ACTIONS=1 (needs pgenough[dashboard])."""
    with needs_extra(EXTRA):
        from pgenough.dashboard import (
            Dashboard,
            DashboardConfigError,
            DashboardServer,
            uvicorn_config,
        )

    settings = load_settings(Settings)
    setup_logging(settings)
    host = host or settings.dashboard_host
    port = settings.dashboard_port if port is None else port
    try:
        config = settings.ui_config(bind=host)
    except DashboardConfigError as exc:
        fail(f"invalid configuration: {exc}", code=2)
    try:
        sock = listen(host, port)
    except ListenError as exc:
        fail(str(exc))
    with sock:
        url = database_url(settings)
        # The dashboard LISTENs: behind a transaction pooler, a direct session.
        session = settings.session_url() or url

        async def main() -> int:
            pool = await open_pool(url, max_size=1, name="pgenough-dashboard-migrate")
            try:
                async with pool.connection() as conn:
                    await migrate(conn, [MIGRATIONS])
            finally:
                await pool.close()
            dashboard = Dashboard(config, database_url=session)
            options = {"log_config": None, "access_log": access_log, "loop": "asyncio"}
            server = DashboardServer(uvicorn_config(dashboard, **options), dashboard)
            await server.serve(sockets=[sock])
            return 0 if server.started else 1

        raise typer.Exit(run(main, settings))
