"""The dashboard's failures, shown as a page to a browser and as a JSON envelope
(``{"data": null, "error": {"code", "message"}}``) to its JSON endpoints (``/api/*``,
``/events``).

``DashboardError`` carries its status, code, message and page title; its handler picks the
form. ``LoginRequired`` sends a browser asking for a page to the login form instead.
``DashboardRoute`` turns a bug in a dashboard route (an extension's too) into a
``DashboardError`` 500, logged with the request's id, so a browser gets the error page too.
The request's id is the host application's when it set one (``scope["state"]["request_id"]``,
as the plan service's API does), else the client's sane ``X-Request-ID``, else a new one;
``RequestIds`` puts it on every response the host does not already mark.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal
from urllib.parse import quote

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgenough.core import PgenoughError

log = logging.getLogger(__name__)

ErrorCode = Literal[
    "INVALID_REQUEST",
    "TOO_BUSY",
    "UNAVAILABLE",
    "INTERNAL_ERROR",
    "NOT_FOUND",
    "UNAUTHORIZED",
    "FORBIDDEN",
    "MISDIRECTED_REQUEST",
    "TOO_MANY_ATTEMPTS",
]
JSON_PATHS: Final = ("/api/", "/events")
"""Where, under the dashboard's root, a client expects JSON (or an event stream), not pages."""
REQUEST_ID_HEADER: Final = "x-request-id"
RETRY_AFTER_SECONDS: Final = "1"
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class DashboardConfigError(PgenoughError):
    """The dashboard's settings are impossible."""


class DashboardError(PgenoughError):
    """A request's failure, shown to the client: an HTTP status, a code, a message and the
    title of its page."""

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
        self.message = message
        self.title = title or message
        self.headers = headers or {}


class LoginRequired(DashboardError):
    def __init__(self) -> None:
        super().__init__(401, "UNAUTHORIZED", "this dashboard needs its token", "Login required")


def not_found(message: str) -> DashboardError:
    """A 404 page saying ``message``."""
    return DashboardError(404, "NOT_FOUND", message, "Not found")


def forbidden(message: str) -> DashboardError:
    return DashboardError(403, "FORBIDDEN", message, "Not allowed")


def base_of(scope: Scope) -> str:
    """Where the dashboard is mounted (the scope's ``root_path``: ``""`` at the root of its
    server, ``/queue`` mounted there), without a trailing slash: every link, redirect, form
    action and cookie path starts with it."""
    root: str = scope.get("root_path", "")
    return root.rstrip("/")


def route_path(scope: Scope) -> str:
    """The request's path under the dashboard's root (``/jobs``, wherever it is mounted)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :] or "/"
    return path


def wants_json(request: Request) -> bool:
    path = route_path(request.scope)
    if path.startswith(JSON_PATHS):
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def envelope(code: ErrorCode, message: str) -> bytes:
    return json.dumps(
        {"data": None, "error": {"code": code, "message": message}}, ensure_ascii=False
    ).encode()


def error_response(
    status: int, code: ErrorCode, message: str, headers: dict[str, str] | None = None
) -> Response:
    if status == 503:
        headers = {"retry-after": RETRY_AFTER_SECONDS, **(headers or {})}
    return Response(envelope(code, message), status, headers=headers, media_type="application/json")


def handler(
    templates: Jinja2Templates,
) -> Callable[[Request, Exception], Coroutine[Any, Any, Response]]:
    """The exception handler for ``DashboardError``, rendering with ``templates`` (a
    coroutine: Starlette would run a plain function in a worker thread)."""

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, DashboardError)
        headers = dict(exc.headers)
        if isinstance(exc, LoginRequired):
            headers["www-authenticate"] = "Bearer"
        if wants_json(request):
            return error_response(exc.status, exc.code, exc.message, headers=headers)
        base = base_of(request.scope)
        if isinstance(exc, LoginRequired) and request.method == "GET":
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"{base}/login?next={quote(target, safe='/')}", status_code=303)
        return templates.TemplateResponse(
            request,
            "error.html",
            {"title": exc.title, "message": exc.message, "status": exc.status, "base": base},
            status_code=exc.status,
            headers=headers,
        )

    return handle


def request_id(scope: Scope) -> str:
    """The id of the request: the host's, else the client's ``X-Request-ID`` when it is sane,
    else a new one (kept in ``scope["state"]``, where the host would have put its own)."""
    state = scope.setdefault("state", {})
    rid: str | None = state.get("request_id")
    if rid is None:
        for name, value in scope.get("headers", ()):
            if name == REQUEST_ID_HEADER.encode():
                text = value.decode("latin-1")
                rid = text if _CLIENT_REQUEST_ID.fullmatch(text) else None
                break
        rid = rid or f"{random.getrandbits(64):016x}"
        state["request_id"] = rid
    return rid


class RequestIds:
    """ASGI middleware: a request the host gave no id gets one, said in ``X-Request-ID`` on
    its response (a host that gave one, says it itself)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "request_id" in scope.get("state", {}):
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", []),
                    (REQUEST_ID_HEADER.encode(), rid.encode()),
                ]
            await send(message)

        await self.app(scope, receive, send_with_id)


class DashboardRoute(APIRoute):
    """A dashboard route: anything it raises that is not a ``DashboardError`` (or one of
    Starlette's and FastAPI's own) is a bug, logged with the request's id and shown as the
    500 page, never with its text."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handle(request)
            except (DashboardError, HTTPException, RequestValidationError):
                raise
            except Exception as exc:  # the top of a request: logged with its id, then a 500
                rid = request_id(request.scope)
                log.exception("%s %s failed (request id %s)", request.method, request.url.path, rid)
                raise DashboardError(
                    500,
                    "INTERNAL_ERROR",
                    f"internal error (request id {rid}): see the server's log",
                    "Something went wrong",
                ) from exc

        return guarded
