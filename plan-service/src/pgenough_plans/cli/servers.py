"""The commands that serve HTTP: ``api``, ``demo`` and ``provider-sim``."""

from __future__ import annotations

import logging
import socket
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from pgenough.cli import database_url, fail, finite, run, setup_logging
from pgenough.httpserver import ListenError, listen
from pgenough_plans.cli.base import plan_settings
from pgenough_plans.settings import PlanSettings

if TYPE_CHECKING:
    from pgenough.dashboard import DashboardConfig
    from pgenough_plans.api.config import ApiConfig
    from pgenough_plans.api.proxies import TrustedProxies


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound now: a busy port is one line and exit 1, before anything
    (the database, uvicorn) has started."""
    try:
        return listen(host, port)
    except ListenError as exc:
        fail(str(exc))


def _snapshot_plans(value: int) -> int:
    """``--plans`` within what the simulator generates (its module is imported only here:
    the other commands never need it)."""
    from pgenough_plans.sim.server import MAX_PLANS

    if not 1 <= value <= MAX_PLANS:
        raise typer.BadParameter(f"{value} is not in the range 1 to {MAX_PLANS:,}")
    return value


def demo(
    port: Annotated[int, typer.Option(min=0, max=65535, help="API port (0: any free one).")] = 8000,
    plans: Annotated[
        int, typer.Option(callback=_snapshot_plans, help="Plans per simulated snapshot.")
    ] = 20_000,
    interval: Annotated[
        float, typer.Option(min=1, callback=finite, help="Seconds between fetches.")
    ] = 15.0,
) -> None:
    """The whole plan service in one process: a misbehaving simulated provider, fetch and
    process workers, and the API (embedded PostgreSQL unless DATABASE_URL)."""
    from pgenough_plans.demo import HOST, DemoConfig
    from pgenough_plans.demo import run as run_demo

    settings = plan_settings()
    setup_logging(settings)
    # The demo prints each run itself; keep the log to what needs attention.
    logging.getLogger("pgenough").setLevel(logging.WARNING)
    logging.getLogger("pgenough_plans").setLevel(logging.WARNING)
    logging.getLogger("pgenough.core.db").setLevel(logging.INFO)
    api, ui, proxies = _check_api_settings(settings)
    with _listen(HOST, port) as sock:
        api = replace(api, database_url=database_url(settings))
        config = DemoConfig(plans=plans, interval=interval)
        raise typer.Exit(run(lambda: run_demo(api, ui, proxies, config, sock), settings))


def _check_api_settings(
    settings: PlanSettings,
) -> tuple[ApiConfig, DashboardConfig | None, TrustedProxies]:
    """The API's and the dashboard's configs (None: not served), and the proxies whose
    headers uvicorn may believe; impossible settings are one line and exit 2 now, before the
    database starts. The API's ``database_url`` is still the setting: the caller resolves it
    next."""
    from pgenough.dashboard import DashboardConfigError  # FastAPI: slow to import
    from pgenough_plans.api import ApiConfigError

    try:
        ui = settings.ui_config() if settings.ui_enabled else None
        return settings.api_config(), ui, settings.trusted_proxies()
    except (ApiConfigError, DashboardConfigError) as exc:
        fail(f"invalid configuration: {exc}", code=2)


def api_cmd(
    host: Annotated[
        str | None, typer.Option(help="Address to bind (default: settings, 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Port (default: settings, 8000).")
    ] = None,
    access_log: Annotated[
        bool, typer.Option("--access-log", help="Log every request (off: see /metrics).")
    ] = False,
) -> None:
    """Serve the HTTP API (/search, /health/*, /metrics, /docs) in one process."""
    from pgenough_plans.api import create_app, prepare_database  # slow to import
    from pgenough_plans.api.server import ApiServer, uvicorn_config

    settings = plan_settings()
    setup_logging(settings)
    # --host is where the API binds, which the dashboard answers to as its own name.
    settings = settings.model_copy(update={"api_host": host or settings.api_host})
    api_config, ui_config, proxies = _check_api_settings(settings)
    with _listen(settings.api_host, settings.api_port if port is None else port) as sock:
        url = database_url(settings)

        async def main() -> int:
            read_key = await prepare_database(
                url,
                migrate_schema=settings.api_migrate,
                read_cursor_secret=api_config.cursor_key is None,
            )
            # The key prepare_database read, so that the app does not read it a second time.
            key = api_config.cursor_key if read_key is None else read_key
            api = create_app(replace(api_config, database_url=url, cursor_key=key), ui_config)
            config = uvicorn_config(
                api, proxies, workers=1, loop="asyncio", log_config=None, access_log=access_log
            )
            server = ApiServer(config)  # uvicorn's, ending the dashboard's live streams on stop
            await server.serve(sockets=[sock])
            return 0 if server.started else 1

        raise typer.Exit(run(main, settings))


def provider_sim(
    plans: Annotated[
        int, typer.Option(callback=_snapshot_plans, help="Plans per snapshot.")
    ] = 1000,
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8080,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    seed: Annotated[int, typer.Option(help="Snapshots are a function of seed and version.")] = 1,
) -> None:
    """Serve generated planList snapshots, with injectable faults (see docs)."""
    from pgenough_plans.sim import server as sim  # imported here: the other commands never need it

    settings = plan_settings()
    setup_logging(settings)
    try:
        sim.serve(plans=plans, port=port, seed=seed, host=host)
    except ListenError as exc:
        fail(str(exc))
