"""What every dashboard route takes: its router (``ui_router``), its state (``UiDep``;
``Authed`` once the login is checked), the page renderer (``PagesDep``) and where a ``next``
parameter may lead. The state is the lifespan's (``app.state.ui``); the renderer is
``install``'s (``app.state.ui_pages``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Final, cast

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from fastapi.templating import Jinja2Templates

from pgenough_plans.api.replica import Read
from pgenough_plans.api.ui import params, sessions
from pgenough_plans.api.ui.auth import FLASH_COOKIE, safe_next
from pgenough_plans.api.ui.errors import LoginRequired, UiRoute
from pgenough_plans.api.ui.state import UiState

READ_HEADER: Final = "x-pgenough-read"


def ui_router() -> APIRouter:
    """A router of dashboard routes: under ``/ui``, outside the OpenAPI document, its errors
    rendered as pages (``UiRoute``)."""
    return APIRouter(prefix="/ui", include_in_schema=False, route_class=UiRoute)


async def get_ui(request: Request) -> UiState:
    return cast(UiState, request.app.state.ui)


async def require_login(request: Request) -> UiState:
    ui = cast(UiState, request.app.state.ui)
    if not await sessions.signed_in(ui, request):
        raise LoginRequired
    return ui


def target(raw: str | None, default: str = "/ui", title: str = params.FORM) -> str:
    """Where a ``next`` parameter may send the browser (a dashboard path), checked."""
    return safe_next(params.text("next", raw or "", title, params.MAX_NEXT), default)


@dataclass(frozen=True)
class Pages:
    """The dashboard's templates, and what every page they render is given."""

    templates: Jinja2Templates

    def render(
        self,
        request: Request,
        ui: UiState,
        name: str,
        context: dict[str, Any],
        status: int = 200,
        *,
        read: Read | None = None,
    ) -> Response:
        """``name`` rendered; ``read``: where the page read, shown in its header (with
        replicas) and told in ``READ_HEADER``."""
        flash = ui.auth.read_flash(request)
        response = self.templates.TemplateResponse(
            request,
            name,
            {
                "csrf": ui.auth.csrf_token(request),
                "actions": ui.config.actions,
                "login": ui.auth.required,
                "flash": flash,
                "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                "read_from": None if read is None or ui.replicas is None else read_from(read),
                **context,
            },
            status_code=status,
            headers=read_headers(ui, read),
        )
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path="/ui")
        return response


def read_from(read: Read) -> str:
    """Where a page read, for its header: the primary, or which replica and its lag."""
    if read.replica is None:
        return "read from the primary"
    return f"read from replica {read.replica.label}, at most {read.replica.lag:.2f} s behind"


def read_headers(ui: UiState, read: Read | None) -> dict[str, str] | None:
    """``READ_HEADER``: where the response read (``primary`` or ``replica host:port``), with
    replicas."""
    if read is None or ui.replicas is None:
        return None
    return {READ_HEADER: read.source}


async def get_pages(request: Request) -> Pages:
    return cast(Pages, request.app.state.ui_pages)


UiDep = Annotated[UiState, Depends(get_ui)]
Authed = Annotated[UiState, Depends(require_login)]
PagesDep = Annotated[Pages, Depends(get_pages)]
