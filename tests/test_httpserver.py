"""The socket every pgenough HTTP server listens on (``pgenough.httpserver.listen``)."""

from __future__ import annotations

import asyncio
import socket

from pgenough.httpserver import listen


async def test_connections_on_a_listened_socket_send_without_delay() -> None:
    """A response written in two parts (uvicorn writes headers, then the body) must not wait
    for the client's delayed ACK: each request took 40 ms when connections lacked
    TCP_NODELAY, because the socket did not say it was TCP."""
    sock = listen("127.0.0.1", 0)
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn: socket.socket = writer.get_extra_info("socket")
        accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(handle, sock=sock)
    async with server:
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(accepted, 10) != 0
        writer.close()
