"""The dashboard's routes under ``/ui``: its read pages and live stream (``pages``), its
actions (``actions``) and its login (``login``), then a 404 page for any other path. Every
route first checks the login (``Authed``, through ``sessions``); actions also check that they
are enabled and the CSRF token. What they share comes through ``deps``.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from pgenough_plans.api.ui import actions, login, pages
from pgenough_plans.api.ui.deps import ui_router
from pgenough_plans.api.ui.errors import not_found

fallback = ui_router()


@fallback.get("/{rest:path}")
async def unknown(rest: str) -> Response:
    raise not_found(f"the dashboard has no page /ui/{rest}")


def build_router() -> APIRouter:
    router = APIRouter()
    # The fallback last: it answers every path the others do not.
    for part in (pages.router, actions.router, login.router, fallback):
        router.include_router(part)
    return router
