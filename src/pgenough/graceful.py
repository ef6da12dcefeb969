"""uvicorn's server as every pgenough HTTP process runs it, on a socket bound beforehand
(``pgenough.httpserver.listen``).

uvicorn re-raises a SIGTERM or SIGINT it handled once it has shut down, so the process dies
of the signal (exit -15) even after a clean stop. A supervisor (systemd, Kubernetes, a test)
should see success, as it does from the workers: ``GracefulServer`` exits 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn

__all__ = ["GracefulServer"]


class GracefulServer(uvicorn.Server):
    """uvicorn's server, exiting 0 after a graceful stop on SIGTERM or SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                self._captured_signals.clear()
