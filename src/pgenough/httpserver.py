"""The socket every pgenough HTTP server listens on, bound before the server starts.

``listen`` binds the socket before the server (and, for ``pgenough api``, before the
database) starts, so a busy port or an unknown host is one ``ListenError`` naming the
address, instead of uvicorn's log lines about it and its exit 3. Shared by ``pgenough api``,
``pgenough provider-sim`` and ``pgenough demo``; the server itself is ``pgenough.graceful``.
Only the standard library: the core-only CLI reports a busy metrics port with it.
"""

from __future__ import annotations

import socket
from typing import Final

from pgenough.core import PgenoughError

__all__ = [
    "BACKLOG",
    "ListenError",
    "address",
    "base_url",
    "listen",
]

BACKLOG: Final = 2048
"""uvicorn's own default backlog."""


def address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def base_url(host: str, port: int) -> str:
    return f"http://{address(host, port)}"


class ListenError(PgenoughError):
    """An address could not be listened on: the port is taken or not ours, the host unknown."""

    def __init__(self, host: str, port: int, exc: OSError) -> None:
        reason = exc.strerror or str(exc) or type(exc).__name__
        # "address already in use", as it reads mid-sentence.
        super().__init__(
            f"cannot listen on {address(host, port)}: {reason[:1].lower()}{reason[1:]}"
        )
        self.host, self.port = host, port


def listen(host: str, port: int) -> socket.socket:
    """A listening socket: a busy port fails here as ``ListenError``; port 0 gets a real port;
    and connections queue from now on, before the server runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said, not left 0: asyncio sets TCP_NODELAY only on connections whose socket
    # says TCP, and without it a response written in two parts (headers, then body) waits
    # out the client's delayed ACK: 40 ms a request, measured.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ListenError(host, port, exc) from exc
    return sock
