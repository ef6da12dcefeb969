"""The operators' dashboard at ``/ui``: server-rendered pages (Jinja2) on ``plans.inspect``,
a live overview over server-sent events fed by one shared subscription, and, when enabled,
retry and discard of failing jobs.

``install`` adds it to the app (static files, templates, routes, its error handler, the host
check of ``hosts``);
``running`` is what the app's lifespan opens for it; ``end_streams`` ends the live streams
when the server stops (uvicorn waits for open responses before the lifespan's shutdown).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from pgenough_plans.api.ui import format
from pgenough_plans.api.ui.config import UiConfig
from pgenough_plans.api.ui.deps import Pages
from pgenough_plans.api.ui.errors import UiError, handler
from pgenough_plans.api.ui.hosts import DashboardGuard
from pgenough_plans.api.ui.routes import build_router
from pgenough_plans.api.ui.sessions import MIGRATIONS
from pgenough_plans.api.ui.state import UiState, running
from pgenough_plans.ingest import inspect
from pgenough_plans.ingest.runs import RunStatus

HERE: Final = Path(__file__).resolve().parent

__all__ = [
    "MIGRATIONS",
    "UiConfig",
    "UiState",
    "end_streams",
    "install",
    "running",
]


def templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=HERE / "templates")
    t.env.filters.update(format.FILTERS)
    # Which run a chunk job belongs to is the plan service's knowledge, not the template's.
    t.env.globals["chunk_run"] = inspect.chunk_run
    t.env.globals["RunStatus"] = RunStatus
    return t


def install(app: FastAPI, config: UiConfig) -> None:
    """The dashboard's routes on ``app``, behind its host check; the lifespan must put a
    ``UiState`` on ``app.state.ui``."""
    pages = templates()
    app.state.ui_pages = Pages(pages)  # what the routes render with (``deps.PagesDep``)
    # Mounted before the router: its catch-all 404 page would shadow /ui/static otherwise.
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    app.include_router(build_router())
    app.add_exception_handler(UiError, handler(pages))
    app.add_middleware(DashboardGuard, hosts=config.allowed_hosts, render=handler(pages))


def end_streams(app: FastAPI) -> None:
    """End every live stream of ``app`` now, and refuse new ones."""
    state: UiState | None = getattr(app.state, "ui", None)
    if state is not None:
        state.feed.close()
