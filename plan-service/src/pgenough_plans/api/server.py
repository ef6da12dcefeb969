"""uvicorn's server, taught to end the dashboard's live streams when it stops, not to log
an error for a search stream it cut on purpose, and to let such a stream reset its client's
connection (``pgenough_plans.api.answer``); and, as every pgenough server, to exit 0 after a
graceful stop and to serve a socket bound beforehand (``pgenough.graceful``).
``uvicorn_config`` is the one place that configures uvicorn for the API (``pgenough-plans api``,
``pgenough-plans demo``): proxy headers only from ``TrustedProxies``.

The reset: uvicorn closes the connection of a response that ended early, and asyncio's close
first waits until the client has read every byte buffered for it, which a client that stopped
reading never does, so its socket and buffers would stay until the client goes. The server's
HTTP protocol offers each request ``transport.abort`` as the ``answer.ABORT`` scope extension:
httptools' (which uvicorn picks when it is installed, as it is with the plan service)
and h11's (``--http h11`` to uvicorn, or an installation without httptools) alike.

An event stream never finishes on its own, and uvicorn waits for every open response before
it runs the lifespan's shutdown (where the streams would otherwise end): without this a
browser with the dashboard open would hold ``pgenough-plans api`` up until it is killed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from pgenough.graceful import GracefulServer
from pgenough.httpserver import base_url
from pgenough_plans.api.answer import ABORT, IncompleteFilter
from pgenough_plans.api.proxies import TrustedProxies

log = logging.getLogger(__name__)


class ResettableHttpTools(HttpToolsProtocol):
    """httptools' protocol, with ``answer.ABORT`` in each request's scope extensions."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions[ABORT] = self.transport.abort


class ResettableH11(H11Protocol):
    """h11's protocol, with ``answer.ABORT`` in each request's scope extensions."""

    def handle_events(self) -> None:
        super().handle_events()
        # A request's cycle is made here and its task only starts on the next turn of the
        # loop: its scope can still be given the extension.
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            extensions: dict[str, Any] = cycle.scope.setdefault("extensions", {})
            extensions[ABORT] = self.transport.abort


PROTOCOLS: dict[str, type[asyncio.Protocol]] = {
    "auto": ResettableHttpTools,  # uvicorn's own choice, since httptools is installed
    "httptools": ResettableHttpTools,
    "h11": ResettableH11,
}
"""The HTTP protocol for each of uvicorn's ``http`` choices."""


def uvicorn_config(app: FastAPI, proxies: TrustedProxies, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for serving ``app``: ``options``, with ``X-Forwarded-For`` and
    ``X-Forwarded-Proto`` read from ``proxies`` only (uvicorn would trust 127.0.0.1, or its
    ``FORWARDED_ALLOW_IPS``, by default)."""
    return uvicorn.Config(app, **options, **proxies.uvicorn_options())


class ApiServer(GracefulServer):
    def __init__(self, config: uvicorn.Config) -> None:
        if isinstance(config.http, str) and config.http in PROTOCOLS:
            config.http = PROTOCOLS[config.http]
        super().__init__(config)
        logging.getLogger("uvicorn.error").addFilter(IncompleteFilter())

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # uvicorn says where it listens only when it bound the address itself.
        if self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            log.info("serving on %s (docs at /docs)", base_url(host, port))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        dashboard = getattr(app.state, "dashboard", None) if isinstance(app, FastAPI) else None
        if dashboard is not None:
            dashboard.end_streams()
        await super().shutdown(sockets)
