"""The server ``pgenough dashboard`` runs: uvicorn's (``pgenough.graceful``: exit 0 after a
graceful stop), taught to end the dashboard's live streams when it stops.

An event stream never finishes on its own, and uvicorn waits for every open response before
it runs the lifespan's shutdown (where the streams would otherwise end): without this a
browser with the overview open would hold the server up until it is killed. An application
serving the dashboard with its own uvicorn does the same (``Dashboard.end_streams``), or
gives uvicorn a ``timeout_graceful_shutdown``.
"""

from __future__ import annotations

import logging
import socket

import uvicorn

from pgenough.dashboard.app import Dashboard
from pgenough.graceful import GracefulServer
from pgenough.httpserver import base_url

log = logging.getLogger(__name__)


class DashboardServer(GracefulServer):
    """uvicorn's server for ``config`` (whose app serves ``dashboard``), ending the
    dashboard's live streams when it stops."""

    def __init__(self, config: uvicorn.Config, dashboard: Dashboard) -> None:
        super().__init__(config)
        self.dashboard = dashboard

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # uvicorn says where it listens only when it bound the address itself.
        if self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            log.info("dashboard at %s/", base_url(host, port))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.dashboard.end_streams()
        await super().shutdown(sockets)


def uvicorn_config(dashboard: Dashboard, **options: object) -> uvicorn.Config:
    """uvicorn's configuration for the dashboard on its own: ``options``, and no
    ``X-Forwarded-*`` header believed (the login throttle counts the socket's peer)."""
    return uvicorn.Config(dashboard.app, proxy_headers=False, **options)  # type: ignore[arg-type]
