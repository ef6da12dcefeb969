"""The API's errors and the one place they become the ``{"data", "error"}`` envelope.

::

    PgenoughError                    (pgenough.core)
    ├── ApiConfigError               impossible API settings, refused when the app is built
    └── ApiError(status, code)       a request's failure, sent to the client as it is
        ├── InvalidRequest           400 INVALID_REQUEST: bad dates, bounds, limit, offset
        ├── TooBusy                  503 TOO_BUSY: the bulkhead is full or a search timed out
        └── Unavailable              503 UNAVAILABLE: the database cannot be reached

Anything else a route raises is a bug: it is logged with the request's id and the client gets
500 INTERNAL_ERROR with that id and nothing more (``CatchAll``). 404 and 405 keep Starlette's
status codes with the envelope (``NOT_FOUND``, ``METHOD_NOT_ALLOWED``).
"""

from __future__ import annotations

import json
import logging
import random
import re
from typing import Final, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgenough.core import PgenoughError
from pgenough.core.logcontext import log_context

log = logging.getLogger(__name__)

ErrorCode = Literal[
    "INVALID_REQUEST",
    "TOO_BUSY",
    "UNAVAILABLE",
    "INTERNAL_ERROR",
    "NOT_FOUND",
    "METHOD_NOT_ALLOWED",
    "UNAUTHORIZED",
    "FORBIDDEN",
    "MISDIRECTED_REQUEST",
    "TOO_MANY_ATTEMPTS",
]
RETRY_AFTER_SECONDS: Final = "1"
REQUEST_ID_HEADER: Final = "x-request-id"
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class ApiConfigError(PgenoughError):
    """The API's settings are impossible (for instance a bulkhead wider than the pool)."""


class ApiError(PgenoughError):
    """A failure the client is told about: an HTTP status, a code and a message."""

    status: int = 500
    code: ErrorCode = "INTERNAL_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ApiError):
    status = 400
    code = "INVALID_REQUEST"


class TooBusy(ApiError):
    status = 503
    code = "TOO_BUSY"


class Unavailable(ApiError):
    status = 503
    code = "UNAVAILABLE"


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


# The handlers are coroutines: Starlette runs a plain function handler in a worker thread,
# and the hand-off and the GIL switching back made a 503 cost the API markedly more CPU than
# as a coroutine (the figures: docs/plan-service/benchmarks-history.md, "API: the cost of one
# search").


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    codes: dict[int, ErrorCode] = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
    fallback: ErrorCode = "INVALID_REQUEST" if exc.status_code < 500 else "INTERNAL_ERROR"
    code = codes.get(exc.status_code, fallback)
    message = {404: "no such endpoint", 405: "method not allowed"}.get(
        exc.status_code, str(exc.detail)
    )
    return error_response(exc.status_code, code, message, headers=dict(exc.headers or {}))


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "query")
    return error_response(400, "INVALID_REQUEST", f"{where}: {first.get('msg', 'invalid')}")


def install(app: FastAPI) -> None:
    """Every error the app can produce, as the envelope."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_middleware(CatchAll)


def request_id(scope: Scope) -> str:
    """The id of the request: the client's ``X-Request-ID`` when it is sane, else a new one."""
    state = scope.setdefault("state", {})
    rid: str | None = state.get("request_id")
    if rid is None:
        for name, value in scope.get("headers", ()):
            if name == REQUEST_ID_HEADER.encode():
                text = value.decode("latin-1")
                rid = text if _CLIENT_REQUEST_ID.fullmatch(text) else None
                break
        # Unique, not unpredictable: random's own generator (seeded from os.urandom, and
        # again in each forked child) instead of a uuid4, a syscall and a UUID per request.
        rid = rid or f"{random.getrandbits(64):016x}"
        state["request_id"] = rid
    return rid


class CatchAll:
    """Outermost but for Starlette's own: every response carries ``X-Request-ID`` (and every
    log line written while handling it, ``request_id``); an
    exception that escapes a route is logged with that id and answered with 500
    INTERNAL_ERROR, never with its text (and never re-raised to the server)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"],
                    (REQUEST_ID_HEADER.encode(), rid.encode()),
                ]
            await send(message)

        # Every line logged while the request is handled carries its id.
        with log_context(request_id=rid):
            try:
                await self.app(scope, receive, send_with_id)
            except Exception:
                log.exception("%s %s failed (request id %s)", scope["method"], scope["path"], rid)
                if started:
                    raise
                response = error_response(
                    500, "INTERNAL_ERROR", f"internal error (request id {rid})"
                )
                await response(scope, receive, send_with_id)
