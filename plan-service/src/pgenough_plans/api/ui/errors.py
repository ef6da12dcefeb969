"""The dashboard's failures, shown as a page to a browser and as the API's envelope to the
dashboard's JSON endpoints (``/ui/api/*``, ``/ui/events``).

``UiError`` is an ``ApiError`` whose status and code are chosen per instance; its handler,
more specific than the API's, picks the form. ``LoginRequired`` sends a browser asking for a
page to the login form instead. ``UiRoute`` turns a bug in a dashboard route into a
``UiError`` 500 (logged with the request's id), so a browser gets the error page too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException

from pgenough_plans.api.errors import ApiError, ErrorCode, error_response, request_id

log = logging.getLogger(__name__)

JSON_PATHS = ("/ui/api/", "/ui/events")


class UiError(ApiError):
    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        title: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.title = title or message
        self.headers = headers or {}


class LoginRequired(UiError):
    def __init__(self) -> None:
        super().__init__(401, "UNAUTHORIZED", "this dashboard needs its token", "Login required")


def not_found(message: str) -> UiError:
    return UiError(404, "NOT_FOUND", message, "Not found")


def forbidden(message: str) -> UiError:
    return UiError(403, "FORBIDDEN", message, "Not allowed")


def wants_json(request: Request) -> bool:
    path = request.url.path
    if path.startswith(JSON_PATHS):
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def handler(
    templates: Jinja2Templates,
) -> Callable[[Request, Exception], Coroutine[Any, Any, Response]]:
    """The exception handler for ``UiError``, rendering with ``templates`` (a coroutine, as
    the API's handlers: Starlette would run a plain function in a worker thread)."""

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, UiError)
        headers = dict(exc.headers)
        if isinstance(exc, LoginRequired):
            headers["www-authenticate"] = "Bearer"
        if wants_json(request):
            return error_response(exc.status, exc.code, exc.message, headers=headers)
        if isinstance(exc, LoginRequired) and request.method == "GET":
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/ui/login?next={quote(target, safe='/')}", status_code=303)
        return templates.TemplateResponse(
            request,
            "error.html",
            {"title": exc.title, "message": exc.message, "status": exc.status},
            status_code=exc.status,
            headers=headers,
        )

    return handle


class UiRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handle(request)
            except (ApiError, HTTPException, RequestValidationError):
                raise
            except Exception as exc:  # the top of a request: logged with its id, then a 500
                rid = request_id(request.scope)
                log.exception("%s %s failed (request id %s)", request.method, request.url.path, rid)
                raise UiError(
                    500,
                    "INTERNAL_ERROR",
                    f"internal error (request id {rid}): see the server's log",
                    "Something went wrong",
                ) from exc

        return guarded
