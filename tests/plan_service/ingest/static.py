"""A static HTTP server for documents the simulator does not make (fixtures, corrupted bytes,
documents too big to hold)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self

Body = bytes | Callable[[], Iterable[bytes]]
"""A document: its bytes, or a function making a fresh iterator of its chunks for each
request (streamed with chunked transfer encoding, never held whole)."""


class StaticServer:
    """Serves ``documents[path]`` on 127.0.0.1; 404 for anything else."""

    def __init__(self, documents: Mapping[str, Body]) -> None:
        self.documents = documents
        docs = documents

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked transfer encoding needs it

            def do_GET(self) -> None:
                body = docs.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.close_connection = True  # one request per connection, as with HTTP/1.0
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Connection", "close")
                if isinstance(body, bytes):
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in body():
                        if chunk:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading (a run that failed mid-body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
