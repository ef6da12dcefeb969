"""The API with its dashboard on a real uvicorn server (``ApiServer``, as ``pgenough-plans
api`` runs it), on a thread with its own event loop: for event streams and the browser."""

from __future__ import annotations

import threading

from pgenough.dashboard.state import DashboardState
from pgenough_plans.api.server import ApiServer
from pgenough_plans.settings import PlanSettings
from tests.plan_service.api.helpers import ServerThread, api_app


class UiServer(ServerThread):
    def __init__(self, settings: PlanSettings) -> None:
        super().__init__(api_app(settings))
        self.server = ApiServer(self.server.config)
        self.thread = threading.Thread(target=self.server.run, name="ui-server", daemon=True)

    @property
    def ui(self) -> DashboardState:
        state: DashboardState | None = self.app.state.dashboard.state
        assert state is not None
        return state
