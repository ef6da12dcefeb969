"""The commands that serve HTTP: ``api``, ``demo`` and ``provider-sim``."""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING, Annotated

import typer

from pgenough.cli.base import (
    _database_url,
    _fail,
    _finite,
    _needs_service,
    _run,
    _settings,
    _setup_logging,
)
from pgenough.httpserver import ListenError, listen
from pgenough.settings import Settings

if TYPE_CHECKING:
    from pgenough.api.proxies import TrustedProxies


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound now: a busy port is one line and exit 1, before anything
    (the database, uvicorn) has started."""
    try:
        return listen(host, port)
    except ListenError as exc:
        _fail(str(exc))


def _snapshot_plans(value: int) -> int:
    """``--plans`` within what the simulator generates (its module is imported only here:
    the other commands never need it)."""
    with _needs_service():
        from pgenough.plans.sim import MAX_PLANS

    if not 1 <= value <= MAX_PLANS:
        raise typer.BadParameter(f"{value} is not in the range 1 to {MAX_PLANS:,}")
    return value


def demo(
    port: Annotated[int, typer.Option(min=0, max=65535, help="API port (0: any free one).")] = 8000,
    plans: Annotated[
        int, typer.Option(callback=_snapshot_plans, help="Plans per simulated snapshot.")
    ] = 20_000,
    interval: Annotated[
        float, typer.Option(min=1, callback=_finite, help="Seconds between fetches.")
    ] = 15.0,
) -> None:
    """The whole plan service in one process: a misbehaving simulated provider, fetch and
    process workers, and the API (embedded PostgreSQL unless DATABASE_URL)."""
    with _needs_service():
        from pgenough.demo import HOST, DemoConfig
        from pgenough.demo import run as run_demo

    settings = _settings()
    _setup_logging(settings)
    # The demo prints each run itself; keep the log to what needs attention.
    logging.getLogger("pgenough").setLevel(logging.WARNING)
    logging.getLogger("pgenough.core.db").setLevel(logging.INFO)
    _check_api_settings(settings)
    with _listen(HOST, port) as sock:
        url = _database_url(settings)
        config = DemoConfig(plans=plans, interval=interval)
        raise typer.Exit(_run(lambda: run_demo(settings, url, config, sock), settings))


def _check_api_settings(settings: Settings) -> TrustedProxies:
    """Impossible API or dashboard settings: one line and exit 2 now, before the database
    starts (``create_app`` would find them only after it has). Returns the proxies whose
    headers uvicorn may believe."""
    with _needs_service():
        from pgenough.api import ApiConfigError, ui  # FastAPI: slow to import
        from pgenough.api.app import api_config
        from pgenough.api.proxies import TrustedProxies

    try:
        api_config(settings)
        ui.ui_config(settings)
        return TrustedProxies.parse(settings.api_trusted_proxies)
    except ApiConfigError as exc:
        _fail(f"invalid configuration: {exc}", code=2)


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
    with _needs_service():
        from pgenough.api import create_app, prepare_database  # slow to import
        from pgenough.api.server import ApiServer, uvicorn_config

    settings = _settings()
    _setup_logging(settings)
    # --host is where the API binds, which the dashboard answers to as its own name.
    settings = settings.model_copy(update={"api_host": host or settings.api_host})
    proxies = _check_api_settings(settings)
    with _listen(settings.api_host, settings.api_port if port is None else port) as sock:
        url = _database_url(settings)
        api = create_app(settings.model_copy(update={"database_url": url}))
        config = uvicorn_config(
            api, proxies, workers=1, loop="asyncio", log_config=None, access_log=access_log
        )
        server = ApiServer(config)  # uvicorn's, ending the dashboard's live streams on stop

        async def main() -> int:
            await prepare_database(
                url,
                migrate_schema=settings.api_migrate,
                read_cursor_secret=settings.api_cursor_secret is None,
            )
            await server.serve(sockets=[sock])
            return 0 if server.started else 1

        raise typer.Exit(_run(main, settings))


def provider_sim(
    plans: Annotated[
        int, typer.Option(callback=_snapshot_plans, help="Plans per snapshot.")
    ] = 1000,
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8080,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    seed: Annotated[int, typer.Option(help="Snapshots are a function of seed and version.")] = 1,
) -> None:
    """Serve generated planList snapshots, with injectable faults (see docs)."""
    with _needs_service():
        from pgenough.plans import sim  # imported here: the other commands never need it

    settings = _settings()
    _setup_logging(settings)
    try:
        sim.serve(plans=plans, port=port, seed=seed, host=host)
    except ListenError as exc:
        _fail(str(exc))
