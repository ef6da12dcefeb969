"""Who may see the dashboard, and which POSTs are genuine.

With ``ui_token`` set, every page, stream and action needs it: as ``Authorization: Bearer``,
or through the login form, which sets an HttpOnly, SameSite=Strict session cookie. The cookie
holds when it was issued, a random session id and an HMAC of both, never the token. Every HMAC
is keyed by a secret derived from the token, so replicas sharing a token accept each other's
sessions and changing the token logs everyone out; without a token the secret is random per
process. A logout revokes the session's id in PostgreSQL (``sessions``), for every replica.
The dashboard's cookies are scoped to where it is mounted (``cookie_path``). Tokens are
compared as SHA-256 digests with ``hmac.compare_digest``: in constant time, and
without telling a guess's length; how often a client may guess is ``throttle``'s business.

POSTs from a browser also carry a CSRF token (a hidden form field: an HMAC of the session
cookie), and are refused when the browser says they come from another site (``Origin`` that
is not this host, ``Sec-Fetch-Site`` other than same-origin). Requests that authenticate with
the Bearer header are exempt from the CSRF token: a browser never adds that header on its own,
so another site cannot forge one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from fastapi import Request

from pgenough.dashboard.defaults import DEFAULT_UI_SESSION_MAX_AGE

SESSION_COOKIE: Final = "pgenough_ui_session"
FLASH_COOKIE: Final = "pgenough_ui_flash"
FLASH_MAX_AGE: Final = 60
WROTE_COOKIE: Final = "pgenough_ui_wrote"
"""The primary's WAL position after the browser's last action (read-your-writes, ``state``)."""
MAX_FORM_BYTES: Final = 8192
FORM_TYPE: Final = "application/x-www-form-urlencoded"


class BadForm(Exception):
    """The body is not a small urlencoded form."""


@dataclass(frozen=True)
class Flash:
    kind: str
    """``ok`` or ``error``."""
    text: str


@dataclass(frozen=True)
class Session:
    """A genuine, unexpired session cookie (whether a logout revoked it is in PostgreSQL)."""

    id: str
    expires_at: float
    """Unix time."""


class Auth:
    def __init__(
        self,
        token: str | None,
        *,
        session_max_age: float = DEFAULT_UI_SESSION_MAX_AGE,
        now: float | None = None,
    ) -> None:
        self.token = token
        if token is None:
            self._secret = secrets.token_bytes(32)
        else:
            self._secret = hashlib.sha256(b"pgenough-ui\x00" + token.encode()).digest()
        self.session_max_age = session_max_age
        self._now = now

    @property
    def required(self) -> bool:
        return self.token is not None

    def _clock(self) -> float:
        return time.time() if self._now is None else self._now

    def _sign(self, purpose: str, value: str) -> str:
        msg = f"{purpose}\x00{value}".encode()
        return hmac.new(self._secret, msg, hashlib.sha256).hexdigest()

    def token_matches(self, candidate: str) -> bool:
        if self.token is None:
            return True
        given = hashlib.sha256(candidate.encode()).digest()
        return hmac.compare_digest(given, hashlib.sha256(self.token.encode()).digest())

    def new_session(self) -> str:
        """A session cookie's value: ``issued.id.hmac``."""
        body = f"{int(self._clock())}.{secrets.token_hex(16)}"
        return f"{body}.{self._sign('session', body)}"

    def session(self, value: str | None) -> Session | None:
        """The session a cookie holds, if we issued it and it has not expired."""
        if not value:
            return None
        body, _, mac = value.rpartition(".")
        if not hmac.compare_digest(mac.encode(), self._sign("session", body).encode()):
            return None
        issued, _, session_id = body.partition(".")
        if not (issued.isascii() and issued.isdigit() and session_id):
            return None
        if not 0 <= self._clock() - int(issued) < self.session_max_age:
            return None
        return Session(session_id, int(issued) + self.session_max_age)

    def bearer_given(self, request: Request) -> bool:
        """The request offers a token in an ``Authorization: Bearer`` header, right or wrong."""
        scheme, _, _ = request.headers.get("authorization", "").partition(" ")
        return self.token is not None and scheme.lower() == "bearer"

    def bearer(self, request: Request) -> bool:
        """The request authenticates with a valid ``Authorization: Bearer`` header."""
        if not self.bearer_given(request):
            return False
        _, _, credential = request.headers.get("authorization", "").partition(" ")
        return self.token_matches(credential.strip())

    def csrf_token(self, request: Request) -> str:
        return self._sign("csrf", request.cookies.get(SESSION_COOKIE) or "")

    def csrf_valid(self, request: Request, form: dict[str, str]) -> bool:
        """The POST comes from one of our own pages (or carries the Bearer token)."""
        if not same_origin(request):
            return False
        if self.bearer(request):
            return True
        given = form.get("csrf", "")
        return hmac.compare_digest(given.encode(), self.csrf_token(request).encode())

    def flash_cookie(self, flash: Flash) -> str:
        body = base64.urlsafe_b64encode(json.dumps([flash.kind, flash.text]).encode()).decode()
        return f"{body}.{self._sign('flash', body)}"

    def wrote_cookie(self, position: int) -> str:
        return f"{position}.{self._sign('wrote', str(position))}"

    def read_wrote(self, request: Request) -> int | None:
        """The position the browser's last action left, if it is ours."""
        value = request.cookies.get(WROTE_COOKIE) or ""
        body, _, mac = value.partition(".")
        if not (body.isascii() and body.isdigit()):
            return None
        if not hmac.compare_digest(mac.encode(), self._sign("wrote", body).encode()):
            return None
        return int(body)

    def read_flash(self, request: Request) -> Flash | None:
        """The message an action left for the next page, if it is ours."""
        return self.read_flash_value(request.cookies.get(FLASH_COOKIE))

    def read_flash_value(self, value: str | None) -> Flash | None:
        if not value:
            return None
        body, _, mac = value.partition(".")
        if not hmac.compare_digest(mac.encode(), self._sign("flash", body).encode()):
            return None
        try:
            kind, text = json.loads(base64.urlsafe_b64decode(body.encode()))
        except ValueError:
            return None
        return Flash(str(kind), str(text))


def same_origin(request: Request) -> bool:
    """False when the browser tells us the request was made by another site."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not a browser, or an old one: the CSRF token decides
    return urlsplit(origin).netloc == request.headers.get("host", "")


def cookie_path(base: str) -> str:
    """The path of the dashboard's cookies: its root (``/queue`` covers ``/queue/...``, not
    the host application's other paths), ``/`` at the root of its server."""
    return base or "/"


def safe_next(value: str | None, base: str, default: str | None = None) -> str:
    """Where to send the browser after a login or an action: a page of the dashboard mounted
    at ``base``, nothing else (no open redirect to another host or application); else
    ``default`` (the overview)."""
    if (
        value
        and (value == base or value.startswith(base + "/"))
        and not value.startswith("//")
        and "\\" not in value
    ):
        return value
    return default if default is not None else base + "/"


class Form(dict[str, str]):
    """A form's fields: the last value of each (as a ``dict``), and all of a repeated one
    (``every``: the checked boxes of a list)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self.pairs = pairs

    def every(self, name: str) -> list[str]:
        return [value for key, value in self.pairs if key == name]


async def read_form(request: Request) -> Form:
    """A small urlencoded form (the dashboard's only kind), without a multipart parser."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise BadForm("form too large")
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != FORM_TYPE and (body or kind):
        raise BadForm(f"expected {FORM_TYPE}")
    try:
        return Form(parse_qsl(body.decode(), keep_blank_values=True))
    except UnicodeDecodeError as exc:
        raise BadForm("form is not UTF-8") from exc
