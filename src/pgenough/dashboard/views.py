"""What every dashboard page works with, its own and an extension's: ``View`` (the login
checked; ``ViewDep`` as a route's parameter), which reads through the dashboard's reader and
renders with its templates; ``UiDep`` for the routes that come before the login (the login
itself); and where a ``next`` parameter may lead.

The state is the dashboard's, once its lifespan runs (``Dashboard.state``); without it, every
page is the 503 page that says how to run it, never a traceback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final

from fastapi import Depends, Request
from fastapi.responses import Response
from fastapi.templating import Jinja2Templates

from pgenough.core.db import AsyncConn
from pgenough.dashboard import params, sessions
from pgenough.dashboard.auth import FLASH_COOKIE, cookie_path, safe_next
from pgenough.dashboard.config import DashboardConfig
from pgenough.dashboard.errors import DashboardError, LoginRequired, base_of
from pgenough.dashboard.extension import Link
from pgenough.dashboard.reader import Read
from pgenough.dashboard.state import DashboardState, reading

if TYPE_CHECKING:
    from pgenough.dashboard.app import Dashboard

READ_HEADER: Final = "x-pgenough-read"
"""Where a page read, when its reader says (``Read.source``)."""
NOT_RUNNING: Final = (
    "the dashboard is not running: the application it is mounted in must run its lifespan"
    " (FastAPI(lifespan=dashboard.lifespan), or `async with dashboard.running():` in its own;"
    " Starlette runs no lifespan of a mounted app)"
)


def dashboard_of(request: Request) -> Dashboard:
    found: Dashboard = request.app.state.dashboard
    return found


async def get_ui(request: Request) -> DashboardState:
    state = dashboard_of(request).state
    if state is None:
        raise DashboardError(503, "UNAVAILABLE", NOT_RUNNING, "Dashboard not started")
    return state


def target(request: Request, raw: str | None, title: str = params.FORM) -> str:
    """Where a ``next`` parameter may send the browser (a page of this dashboard), checked;
    else the overview."""
    value = params.text("next", raw or "", title, params.MAX_NEXT)
    return safe_next(value, base_of(request.scope))


@dataclass(frozen=True)
class Pages:
    """The dashboard's templates, the navigation, and what every page they render is given."""

    templates: Jinja2Templates
    navigation: Sequence[Link]

    def render(
        self,
        request: Request,
        ui: DashboardState,
        name: str,
        context: dict[str, Any],
        status: int = 200,
        *,
        read: Read | None = None,
    ) -> Response:
        """``name`` rendered; ``read``: where the page read, shown in its header and told in
        ``READ_HEADER`` when the reader says."""
        flash = ui.auth.read_flash(request)
        base = base_of(request.scope)
        response = self.templates.TemplateResponse(
            request,
            name,
            {
                "base": base,
                "navigation": self.navigation,
                "csrf": ui.auth.csrf_token(request),
                "actions": ui.config.actions,
                "login": ui.auth.required,
                "flash": flash,
                "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                "read_from": None if read is None else read.note,
                **context,
            },
            status_code=status,
            headers=read_headers(read),
        )
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path=cookie_path(base))
        return response


def read_headers(read: Read | None) -> dict[str, str] | None:
    """``READ_HEADER``: where the response read, when the reader says."""
    if read is None or read.source is None:
        return None
    return {READ_HEADER: read.source}


class View:
    """A page being answered, the login checked: ``read()`` a connection through the
    dashboard's reader (held to what this browser's last action wrote), then ``render`` a
    template with the dashboard's base and macros, saying where it read."""

    def __init__(self, request: Request, ui: DashboardState, pages: Pages) -> None:
        self.request = request
        self.ui = ui
        self.pages = pages
        self.last_read: Read | None = None

    @property
    def base(self) -> str:
        """The dashboard's root path (``""`` at the root of its server): links start with it."""
        return base_of(self.request.scope)

    @property
    def config(self) -> DashboardConfig:
        return self.ui.config

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConn]:
        """A connection for this page's reads; the database's failures become error pages
        that say what to do."""
        async with reading(self.ui, self.ui.auth.read_wrote(self.request)) as read:
            self.last_read = read
            yield read.conn

    def render(
        self, template: str, context: dict[str, Any], *, nav: str = "", status: int = 200
    ) -> Response:
        """``template`` with ``context``; ``nav``: the navigation entry to mark (a
        ``Link.key``)."""
        return self.pages.render(
            self.request,
            self.ui,
            template,
            {"nav": nav, **context},
            status,
            read=self.last_read,
        )


async def get_pages(request: Request) -> Pages:
    return dashboard_of(request).pages


async def require_view(request: Request) -> View:
    ui = await get_ui(request)
    if not await sessions.signed_in(ui, request):
        raise LoginRequired
    return View(request, ui, dashboard_of(request).pages)


UiDep = Annotated[DashboardState, Depends(get_ui)]
PagesDep = Annotated[Pages, Depends(get_pages)]
ViewDep = Annotated[View, Depends(require_view)]
