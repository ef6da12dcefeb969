"""uvicorn's server, taught to end the dashboard's live streams when it stops, and not to log
an error for a search stream it cut on purpose (``pgenough.api.answer``); and, as every
pgenough server, to exit 0 after a graceful stop and to serve a socket bound beforehand
(``pgenough.graceful``). ``uvicorn_config`` is the one place that configures uvicorn for the
API (``pgenough api``, ``pgenough demo``): proxy headers only from ``TrustedProxies``.

An event stream never finishes on its own, and uvicorn waits for every open response before
it runs the lifespan's shutdown (where the streams would otherwise end): without this a
browser with the dashboard open would hold ``pgenough api`` up until it is killed.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import uvicorn
from fastapi import FastAPI

from pgenough.api.answer import IncompleteFilter
from pgenough.api.proxies import TrustedProxies
from pgenough.api.ui import end_streams
from pgenough.graceful import GracefulServer
from pgenough.httpserver import base_url

log = logging.getLogger(__name__)


def uvicorn_config(app: FastAPI, proxies: TrustedProxies, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for serving ``app``: ``options``, with ``X-Forwarded-For`` and
    ``X-Forwarded-Proto`` read from ``proxies`` only (uvicorn would trust 127.0.0.1, or its
    ``FORWARDED_ALLOW_IPS``, by default)."""
    return uvicorn.Config(app, **options, **proxies.uvicorn_options())


class ApiServer(GracefulServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        logging.getLogger("uvicorn.error").addFilter(IncompleteFilter())

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # uvicorn says where it listens only when it bound the address itself.
        if self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            log.info("serving on %s (docs at /docs)", base_url(host, port))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        if isinstance(app, FastAPI):
            end_streams(app)
        await super().shutdown(sockets)
