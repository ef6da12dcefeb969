"""A provider that misbehaves the way real servers do and our simulator does not: written on
raw sockets, so it can lie where an HTTP library would be too polite (a Content-Length it
does not honour, a gzip stream cut short, a trickle of one byte a second, a redirect to
``file://``).

    with BadProvider() as bad:
        bad["/loop"] = redirect("/loop")
        bad["/slow"] = trickle(DOCUMENT, per_second=1)
        url = bad.url("/loop")

Each route is a behaviour: a function that is handed the client socket and the request and
writes whatever it likes. Connections are closed after one response.
"""

from __future__ import annotations

import gzip as gzip_module
import socket
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


Behaviour = Callable[[socket.socket, Request, "BadProvider"], None]


class BadProvider:
    """A threaded raw-socket HTTP/1.1 server on 127.0.0.1 with one behaviour per path."""

    def __init__(self) -> None:
        self.routes: dict[str, Behaviour] = {}
        self.requests: list[Request] = []
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="bad-provider", daemon=True)

    def __setitem__(self, path: str, behaviour: Behaviour) -> None:
        self.routes[path] = behaviour

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def hits(self, path: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if r.path == path)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stopped.set()
        self._thread.join(5)
        self._sock.close()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            client.settimeout(10)
            try:
                request = _read_request(client)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)
                behaviour = self.routes.get(request.path.split("?")[0], _not_found)
                behaviour(client, request, self)
            except OSError:
                pass  # the client went away: that is its right


def _read_request(client: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            return None
        data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    method, path, _ = head[0].split(" ", 2)
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(method, path, headers)


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers.items()]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _not_found(client: socket.socket, request: Request, server: BadProvider) -> None:
    client.sendall(_head(404, {"Content-Length": "0"}))


def respond(
    body: bytes = b"", status: int = 200, headers: dict[str, str] | None = None
) -> Behaviour:
    """An honest response."""

    def behave(client: socket.socket, request: Request, server: BadProvider) -> None:
        client.sendall(_head(status, {"Content-Length": str(len(body)), **(headers or {})}) + body)

    return behave


def redirect(location: str, status: int = 302) -> Behaviour:
    return respond(status=status, headers={"Location": location})


def gzipped(body: bytes, *, corrupt: bool = False, cut: int = 0) -> Behaviour:
    """``body`` gzip-encoded; ``corrupt`` garbles the deflate data in the middle, ``cut``
    drops the last ``cut`` bytes (and says so in Content-Length: a correct, short body)."""
    data = gzip_module.compress(body)
    if corrupt:
        middle = len(data) // 2
        data = (
            data[:middle]
            + bytes(b ^ 0x5A for b in data[middle : middle + 64])
            + data[middle + 64 :]
        )
    if cut:
        data = data[:-cut]
    return respond(data, headers={"Content-Encoding": "gzip"})


def deflated(body: bytes, *, raw: bool = False) -> Behaviour:
    """``body`` deflate-encoded: the zlib format RFC 9110 names, or ``raw`` deflate."""
    z = zlib.compressobj(wbits=-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)
    return respond(z.compress(body) + z.flush(), headers={"Content-Encoding": "deflate"})


def lying_length(body: bytes, claimed: int) -> Behaviour:
    """Says Content-Length ``claimed``, sends ``body`` (shorter), hangs up."""

    def behave(client: socket.socket, request: Request, server: BadProvider) -> None:
        client.sendall(_head(200, {"Content-Length": str(claimed)}) + body)

    return behave


def trickle(body: bytes, per_second: float = 1.0, *, first: int = 0) -> Behaviour:
    """Sends ``first`` bytes at once, then the rest of ``body`` at ``per_second`` bytes a
    second (one byte at a time), until done, the client leaves or the server stops."""

    def behave(client: socket.socket, request: Request, server: BadProvider) -> None:
        client.sendall(_head(200, {"Content-Length": str(len(body))}) + body[:first])
        for i in range(first, len(body)):
            if server.stopped.wait(1.0 / per_second):
                return
            client.sendall(body[i : i + 1])

    return behave


def paced(body: bytes, per_second: int) -> Behaviour:
    """Sends ``body`` at about ``per_second`` bytes a second, a tenth of that at a time."""

    def behave(client: socket.socket, request: Request, server: BadProvider) -> None:
        client.sendall(_head(200, {"Content-Length": str(len(body))}))
        step = max(1, per_second // 10)
        for i in range(0, len(body), step):
            if server.stopped.wait(0.1):
                return
            client.sendall(body[i : i + step])

    return behave


def streamed(parts: Callable[[], Iterable[bytes]], *, gzip: bool = False) -> Behaviour:
    """A chunked body made of ``parts()`` as it is generated (documents of any size);
    ``gzip`` compresses it as it goes (``Content-Encoding: gzip``), never holding it whole."""

    def behave(client: socket.socket, request: Request, server: BadProvider) -> None:
        headers = {"Transfer-Encoding": "chunked"}
        if gzip:
            headers["Content-Encoding"] = "gzip"
        client.sendall(_head(200, headers))
        for part in _gzip_stream(parts()) if gzip else parts():
            if server.stopped.is_set():
                return
            if part:
                client.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        client.sendall(b"0\r\n\r\n")

    return behave


def _gzip_stream(parts: Iterable[bytes]) -> Iterator[bytes]:
    z = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    for part in parts:
        yield z.compress(part)
    yield z.flush()


def status(code: int, retry_after: str | None = None) -> Behaviour:
    return respond(status=code, headers={"Retry-After": retry_after} if retry_after else None)


def in_turn(*behaviours: Behaviour) -> Behaviour:
    """Each request gets the next behaviour; the last one repeats."""
    turns: Iterator[Behaviour] = iter(behaviours)
    last = [behaviours[-1]]
    lock = threading.Lock()

    def behave(client: socket.socket, request: Request, server: BadProvider) -> None:
        with lock:
            current = next(turns, last[0])
        current(client, request, server)

    return behave
