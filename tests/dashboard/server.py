"""The dashboard on a real uvicorn server (``DashboardServer``, as ``pgenough dashboard``
runs it), mounted in a host application or at the root, on a thread with its own event loop:
for event streams and the browser."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
from starlette.routing import BaseRoute

from pgenough.dashboard import Dashboard, DashboardServer, Extension, uvicorn_config
from pgenough.dashboard.state import DashboardState
from pgenough.settings import Settings
from tests.dashboard.helpers import PREFIX, dashboard_of, host_app
from tests.helpers.netproxy import free_port


class UiServer:
    """``settings``' dashboard mounted at ``prefix`` of a Starlette app (its own app at
    ``""``), served by uvicorn on 127.0.0.1 until the block ends."""

    def __init__(
        self,
        settings: Settings,
        prefix: str = PREFIX,
        extensions: Sequence[Extension] = (),
        dashboard: Dashboard | None = None,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.dashboard = dashboard or dashboard_of(settings, extensions)
        self.prefix = prefix
        self.port = free_port()
        config = uvicorn_config(
            self.dashboard,
            host="127.0.0.1",
            port=self.port,
            loop="asyncio",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        config.app = host_app(self.dashboard, prefix, routes=routes)
        self.server = DashboardServer(config, self.dashboard)
        self.thread = threading.Thread(target=self.server.run, name="ui-server", daemon=True)

    @property
    def url(self) -> str:
        """The server's root (the dashboard is at ``url + prefix``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def ui(self) -> DashboardState:
        state = self.dashboard.state
        assert state is not None
        return state

    def __enter__(self) -> UiServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the dashboard's server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    """The events of a text/event-stream response, as (name, parsed JSON data)."""
    name, data = "message", ""
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield name, json.loads(data)
            name, data = "message", ""
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
