"""uvicorn's server, taught to end the dashboard's live streams when it stops, and to exit 0
after a graceful stop.

An event stream never finishes on its own, and uvicorn waits for every open response before
it runs the lifespan's shutdown (where the streams would otherwise end): without this a
browser with the dashboard open would hold ``pgenough api`` up until it is killed.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from pgenough.api.ui import end_streams


class ApiServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        if isinstance(app, FastAPI):
            end_streams(app)
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises a SIGTERM it handled once it has shut down, so the process dies of
        # it (exit -15) even after a clean stop; a supervisor should see success, as it does
        # from the workers.
        with super().capture_signals():
            try:
                yield
            finally:
                self._captured_signals.clear()
