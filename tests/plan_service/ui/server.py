"""The app on a real uvicorn server (``ApiServer``, as ``pgenough-plans api`` runs it), on a thread
with its own event loop: for event streams and the browser."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI

from pgenough_plans.api.server import ApiServer
from pgenough_plans.api.ui import UiState
from pgenough_plans.settings import PlanSettings
from tests.plan_service.api.helpers import ServerThread, api_app


class UiServer(ServerThread):
    def __init__(self, settings: PlanSettings) -> None:
        super().__init__(api_app(settings))
        self.server = ApiServer(self.server.config)
        self.thread = threading.Thread(target=self.server.run, name="ui-server", daemon=True)

    @property
    def ui(self) -> UiState:
        state: UiState = self.app.state.ui
        return state


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


def app_of(server: UiServer) -> FastAPI:
    return server.app
