"""What every dashboard route takes: its router (``ui_router``), its state (``UiDep``;
``Authed`` once the login is checked), the page renderer (``PagesDep``) and where a ``next``
parameter may lead. The state is the lifespan's (``app.state.ui``); the renderer is
``install``'s (``app.state.ui_pages``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from fastapi.templating import Jinja2Templates

from pgenough.api.ui import params, sessions
from pgenough.api.ui.auth import FLASH_COOKIE, safe_next
from pgenough.api.ui.errors import LoginRequired, UiRoute
from pgenough.api.ui.state import UiState


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
        self, request: Request, ui: UiState, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
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
                **context,
            },
            status_code=status,
        )
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path="/ui")
        return response


async def get_pages(request: Request) -> Pages:
    return cast(Pages, request.app.state.ui_pages)


UiDep = Annotated[UiState, Depends(get_ui)]
Authed = Annotated[UiState, Depends(require_login)]
PagesDep = Annotated[Pages, Depends(get_pages)]
