"""Which names the dashboard answers to, and the headers that keep it out of other sites'
frames.

DNS rebinding: a page on ``attacker.example`` re-points its own name at 127.0.0.1 and then
reads the dashboard as same-origin (its CSRF token included), unless the dashboard refuses a
``Host`` that is not its own. Every request to the dashboard (pages, streams, static files,
actions, the login; wherever it is mounted) is therefore checked against ``AllowedHosts``
first, and refused with 421 Misdirected Request when its ``Host`` is not one: loopback names
and addresses, the address its server binds (unless a wildcard such as ``0.0.0.0``, which
names no host), and the names of ``ui_allowed_hosts``; ``*`` turns the check off. Ports never
matter. The application the dashboard is mounted in keeps its own rules for its own paths.

Every dashboard response also says ``X-Frame-Options: DENY`` and ``Content-Security-Policy:
frame-ancestors 'none'``, so no other page can frame the dashboard and trick a click.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgenough.dashboard.errors import DashboardConfigError, DashboardError

ANY: Final = "*"
LOOPBACK_NAMES: Final = frozenset({"localhost"})
WILDCARD_BINDS: Final = frozenset({"", "0.0.0.0", "::"})
SETTING: Final = "PGENOUGH_UI_ALLOWED_HOSTS"
FRAME_HEADERS: Final = {
    "x-frame-options": "DENY",
    "content-security-policy": "frame-ancestors 'none'",
}


def host_name(value: str) -> str:
    """The name in a ``Host`` header or a setting's entry, without port, brackets or the
    trailing dot, in lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        value = value[1:end] if end > 0 else value[1:]
    elif value.count(":") == 1:
        value = value.partition(":")[0]  # one colon: name:port; more: a bare IPv6 address
    return value.rstrip(".")


def is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AllowedHosts:
    names: frozenset[str] = field(default_factory=frozenset)
    """Allowed besides the loopback names and addresses."""
    any: bool = False

    @classmethod
    def parse(cls, spec: str, bind: str = "") -> AllowedHosts:
        """From ``ui_allowed_hosts`` (comma-separated names, ``*`` for any) and the address
        the dashboard's server binds."""
        names = set()
        for entry in spec.split(","):
            entry = entry.strip()
            if not entry:
                continue
            if entry == ANY:
                return cls(any=True)
            name = host_name(entry)
            if not name or any(c in entry for c in " /@\\?#*"):
                raise DashboardConfigError(
                    f"ui_allowed_hosts: {entry!r} is not a host name (comma-separated names,"
                    f" or {ANY} for any)"
                )
            names.add(name)
        bind_name = host_name(bind)
        if bind_name not in WILDCARD_BINDS:
            names.add(bind_name)
        return cls(frozenset(names))

    def allows(self, host: str | None) -> bool:
        if self.any:
            return True
        if not host:
            return False  # every browser sends one: whatever omits it is not a browser
        name = host_name(host)
        return is_loopback(name) or name in self.names


LOOPBACK_ONLY: Final = AllowedHosts()


def refusal(host: str | None) -> DashboardError:
    shown = f"{host!r}" if host else "no Host header"
    return DashboardError(
        421,
        "MISDIRECTED_REQUEST",
        f"this dashboard does not answer to {shown}: add the name to {SETTING}"
        " (comma-separated; loopback names and the address its server binds are always"
        " allowed)",
        "Unknown host",
    )


class DashboardGuard:
    """ASGI middleware of the dashboard's app: a request with a foreign ``Host`` gets
    ``render``'s page for ``refusal``; every response gets the frame headers."""

    def __init__(
        self,
        app: ASGIApp,
        hosts: AllowedHosts,
        render: Callable[[Request, Exception], Awaitable[Response]],
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.render = render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.update(FRAME_HEADERS)
            await send(message)

        host = Headers(scope=scope).get("host")
        if not self.hosts.allows(host):
            response = await self.render(Request(scope, receive), refusal(host))
            await response(scope, receive, framed)
            return
        await self.app(scope, receive, framed)
