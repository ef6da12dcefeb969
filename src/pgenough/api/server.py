"""uvicorn's server, taught to end the dashboard's live streams when it stops.

An event stream never finishes on its own, and uvicorn waits for every open response before
it runs the lifespan's shutdown (where the streams would otherwise end): without this a
browser with the dashboard open would hold ``pgenough api`` up until it is killed.
"""

from __future__ import annotations

import socket

import uvicorn
from fastapi import FastAPI

from pgenough.api.ui import end_streams


class ApiServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        if isinstance(app, FastAPI):
            end_streams(app)
        await super().shutdown(sockets)
