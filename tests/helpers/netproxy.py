"""A TCP proxy in front of PostgreSQL that makes the path to it an impaired link: latency,
stalls and resets, and counts what crosses it.

This machine's kernel has no ``netem`` qdisc, so the impairments are made here, on the path:

- **latency**: a one-way ``delay`` in each direction (RTT/2 each way). Every chunk read is
  written ``delay`` seconds after it arrived, in order; a connection's two directions and
  different connections are delayed independently (a queue per direction, not one per
  proxy), so pipelined bytes stay pipelined and one connection's wait delays no other. Timers
  wake late (epoll's and libuv's millisecond steps, the host's wake-up delay): the proxy
  wakes early by the lateness it has seen, so a round trip comes out within a few tenths of
  a millisecond of the RTT asked (``--select``, a select(2) loop whose timeouts keep
  microseconds, is the closest: 1.2 ms for 1, 5.2 for 5, 20.4 for 20, measured with
  ``SELECT 1``, its 0.1 ms of server time included).
- **stalls**: a connection's forwarding paused, both directions, for a given time. On Linux
  a stall is a *black hole*: a socket filter on the proxy's two sockets of that connection
  drops every incoming segment (data, ACKs, keepalive probes) before TCP sees it, so neither
  peer gets an acknowledgement, as on a link that stopped carrying packets. (A filter drops
  what comes in, not what goes out: each socket is black-holed once its peer has
  acknowledged what it sent, within ``ARM_WITHIN``, so that no retransmission of the proxy's
  reaches a peer during the stall; see ``Connection._blackhole``.) The peers' own TCP timers
  then decide: a stall well below their keepalive/``tcp_user_timeout`` settings
  (``pgenough.core.db.with_network_timeout``, ``PGENOUGH_NETWORK_TIMEOUT``) is a pause, a
  longer one kills the connection at the peer that times out first. Bytes the proxy holds,
  which a real link would have lost and the sender retransmitted, are delivered when the
  stall ends. Then the proxy's sockets of that connection probe their peers (TCP keepalive,
  ~3 s), so a peer that gave up meanwhile answers with a reset and the proxy resets the
  other side: a session its client abandoned ends on the server. (A unix-socket upstream
  cannot be black-holed: it is held instead; everything is held elsewhere than on Linux, or
  with ``blackhole=False``: TCP then stays acknowledged and no timer of the peers runs out.)
  A *link* stall (``stall_link``) stalls every open connection and each new one until it
  ends; ``stall_when`` (``reset_when``) stalls (resets) the connection that sends a given
  statement.
- **resets**: a connection aborted with a TCP RST to both peers, at any moment, mid-query or
  mid-commit.
- random stalls and resets at random moments (``Faults``): two Poisson processes on the link
  with seeded draws (when, which fault, how long); the connection hit is drawn among those
  open at that moment (the active ones first).

Counters (``Counters``): connections, bytes each way, stalls, resets, and **round trips**: per
connection, each turn from client-to-server bytes to server-to-client bytes, i.e. each time
the client waited for an answer. Asynchronous server messages (a NOTIFY to a listener) are not
turns; a connection's start-up is (2: the SSL request, the startup packet); so is psycopg's
preparing of a statement on its 5th run.

In a test, on the test's event loop::

    proxy = Proxy(database_url, delay=0.010, faults=Faults(stall_rate=0.5, reset_rate=0.2))
    async with proxy.running():
        ... connect to proxy.url ...

As its own process (a benchmark: a proxy on the event loop of the client it measures would
distort the measurement)::

    python -m tests.helpers.netproxy --target postgresql://postgres@127.0.0.1:5432/postgres \\
        --listen 127.0.0.1:6543 --rtt-ms 20 [--stall-rate R --reset-rate R --seed N] [--control]

It prints ``listening HOST:PORT ...`` once it accepts connections, and ``counters {json}``
when it stops (SIGTERM, SIGINT, or with ``--control`` the end of its standard input). With
``--control`` it reads commands on standard input, one a line: ``stats`` (prints ``stats
{json}``), ``stall SECONDS`` (a link stall), ``reset`` (every open connection), ``quit``.

Its own cost, measured (``python -m bench.remote`` prints it with its results): at delay 0 it
adds about 0.1 ms to a round trip on loopback (``SELECT 1`` p50: 0.06-0.13 ms direct, 0.08-0.24
through it on asyncio's loop, a little less with ``--uvloop``, a little more with
``--select``), and it takes CPU time of its own: on a 2-core machine it competes with the
client and the server it stands between.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import fcntl
import json
import os
import random
import signal
import socket
import struct
import sys
import termios
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, fields
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

CHUNK = 65536
BUFFER_LIMIT = 4 * 1024 * 1024
"""Bytes one direction of a connection may hold (in flight or stalled) before the proxy stops
reading from its sender (TCP's flow control then holds the sender)."""
LATENESS_CAP = 0.002
"""The most a delayed chunk is scheduled early for its loop's timers (seconds)."""
ARM_WITHIN = 0.3
"""Seconds a stalled socket may wait for its peer's acknowledgement of what it sent before
it is black-holed all the same (see ``Connection._blackhole``)."""
PROBE_AFTER_STALL = (1, 1, 2)
"""TCP keepalive (idle, interval, count) of the proxy's sockets of a connection once a stall
on it ended: a peer that gave up on it during the stall is found within about 3 s."""

# -- the black hole: a classic BPF socket filter that keeps nothing -----------------------------

SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27
BLACKHOLE_SUPPORTED = sys.platform.startswith("linux")


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


_DROP_ALL = (_SockFilter * 1)(_SockFilter(0x06, 0, 0, 0))  # BPF_RET | BPF_K, 0: keep no byte
_DROP_PROGRAM = bytes(_SockFprog(1, ctypes.cast(_DROP_ALL, ctypes.POINTER(_SockFilter))))
"""``struct sock_fprog`` pointing at ``_DROP_ALL`` (kept alive by the module; the kernel copies
the program when it is attached). TCP drops a segment its socket's filter rejects, before
acknowledging it."""


def _unacknowledged(sock: Any) -> int:
    """Bytes ``sock`` sent or holds to send that its peer has not acknowledged (SIOCOUTQ)."""
    try:
        raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", raw)[0])


def _port(address: Any) -> int:
    return int(address[1]) if isinstance(address, tuple) and len(address) >= 2 else 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- what the link counts ---------------------------------------------------------------------


@dataclass
class Counters:
    """What crossed the link (or was done to it) since the proxy was made."""

    connections: int = 0
    """Client connections accepted and joined to the target."""
    refused: int = 0
    """Client connections accepted whose target could not be reached (closed at once)."""
    closed: int = 0
    bytes_up: int = 0
    """Client to server."""
    bytes_down: int = 0
    round_trips: int = 0
    """Turns from client-to-server bytes to server-to-client bytes, over all connections."""
    stalls: int = 0
    """Connections stalled (a link stall counts each connection it stalls)."""
    stalled_s: float = 0.0
    resets: int = 0
    """Connections the proxy reset (a fault, or ``reset``), not those a peer ended."""

    def minus(self, earlier: Counters) -> Counters:
        """What happened since ``earlier`` (a copy taken then)."""
        return Counters(
            **{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)}
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Faults:
    """Random faults of a link: stalls and resets at random moments (Poisson processes, so
    ``rate`` per second on average), each hitting one connection drawn among those open and
    not stalled: among those that carried bytes in the last ``active_within`` seconds when
    there are any (a fault that hits a statement or a commit in flight; None: any)."""

    stall_rate: float = 0.0
    """Stalls per second on the link."""
    stall_s: tuple[float, float] = (0.05, 1.0)
    """A stall lasts a time drawn uniformly in this range (seconds)."""
    reset_rate: float = 0.0
    """Resets per second on the link."""
    seed: int = 0
    active_within: float | None = 1.0

    def __post_init__(self) -> None:
        if self.stall_rate < 0 or self.reset_rate < 0:
            raise ValueError("fault rates must be >= 0")
        low, high = self.stall_s
        if not 0 <= low <= high:
            raise ValueError("stall_s must be (low, high) with 0 <= low <= high")


@dataclass(frozen=True)
class Event:
    """A fault the proxy applied: when (``time.monotonic()``), what, to which connection."""

    at: float
    kind: str
    """``stall``, ``link-stall`` or ``reset``."""
    connection: int | None
    seconds: float = 0.0


# -- one proxied connection ---------------------------------------------------------------------


class Connection:
    """One client connection and its connection to the target."""

    def __init__(
        self,
        proxy: Proxy,
        number: int,
        client: asyncio.StreamWriter,
        upstream: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.number = number
        self.opened = time.monotonic()
        self.closed: float | None = None
        """When (``time.monotonic()``) it ended; None while open."""
        self.ended_by: str | None = None
        """``client`` or ``server`` (that peer closed it or failed: EOF, reset, timeout),
        ``reset`` (a fault of the proxy's) or ``cut``."""
        self.client_port = _port(client.get_extra_info("peername"))
        """The client's port (its end of the connection to the proxy)."""
        self.upstream_port = _port(upstream.get_extra_info("sockname"))
        """The proxy's port towards the target: ``pg_stat_activity.client_port`` of the
        session (0 over a unix socket)."""
        self.bytes_up = 0
        self.bytes_down = 0
        self.round_trips = 0
        self.stalls = 0
        self.last_active = self.opened
        """When (``time.monotonic()``) bytes last arrived from either side."""
        self._client_spoke = False
        self._writers = (client, upstream)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._stall_end = 0.0
        self._stall_timer: asyncio.TimerHandle | None = None
        self._arming: asyncio.Task[None] | None = None
        self._filtered: list[Any] = []

    def __repr__(self) -> str:
        state = "open" if self.closed is None else f"ended by {self.ended_by}"
        return f"<Connection {self.number} from port {self.client_port}, {state}>"

    @property
    def is_open(self) -> bool:
        return self.closed is None

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    def arrived(self, up: bool, data: bytes) -> None:
        counters = self.proxy.counters
        size = len(data)
        self.last_active = time.monotonic()
        if up:
            self.bytes_up += size
            counters.bytes_up += size
            self._client_spoke = True
            if self.proxy._triggers:
                self.proxy._check_triggers(self, data)
        else:
            self.bytes_down += size
            counters.bytes_down += size
            if self._client_spoke:
                self._client_spoke = False
                self.round_trips += 1
                counters.round_trips += 1

    async def flowing(self) -> None:
        """Return once the connection is not stalled."""
        if not self._flowing.is_set():
            await self._flowing.wait()

    # -- faults --

    def stall(self, seconds: float) -> None:
        """Stop forwarding both ways for ``seconds`` (from now; extends a running stall)."""
        if self.closed is not None or seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        if end <= self._stall_end:
            return
        if self._flowing.is_set():
            self._flowing.clear()
            self.stalls += 1
            self.proxy.counters.stalls += 1
            if BLACKHOLE_SUPPORTED and self.proxy.blackhole:
                self._arming = loop.create_task(self._blackhole())
        self.proxy.counters.stalled_s += end - max(self._stall_end, loop.time())
        self._stall_end = end
        if self._stall_timer is not None:
            self._stall_timer.cancel()
        self._stall_timer = loop.call_at(end, self._unstall)

    def _unstall(self) -> None:
        self._stall_timer = None
        if self._arming is not None:
            self._arming.cancel()
            self._arming = None
        if self.closed is None:
            for sock in self._filtered:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
                    idle, interval, count = PROBE_AFTER_STALL
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._filtered = []
        self._flowing.set()

    def _sockets(self) -> list[Any]:
        found = []
        for writer in self._writers:
            sock = writer.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                found.append(sock)
        return found

    async def _blackhole(self) -> None:
        """Drop every segment arriving at the proxy's TCP sockets of this connection (data,
        ACKs, probes) until the stall ends.

        A socket filter drops what comes in, not what goes out: a socket of the proxy's
        holding data its peer has not acknowledged yet would go on retransmitting it during
        the stall, and each retransmission reaching the peer restarts the peer's keepalive
        timer (a received segment), so an idle peer would never find the link dead. So each
        socket is black-holed once it has nothing unacknowledged (forwarding is already
        paused: nothing new is sent), within ``ARM_WITHIN`` seconds (the peer's delayed ACK
        is at most 40 ms on Linux), and its keepalive is off meanwhile (its probes would time
        the connection out here, not at the peer)."""
        pending = self._sockets()
        deadline = time.monotonic() + ARM_WITHIN
        while pending:
            for sock in list(pending):
                if time.monotonic() < deadline and _unacknowledged(sock) > 0:
                    continue
                pending.remove(sock)
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 0)
                    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, _DROP_PROGRAM)
                    self._filtered.append(sock)
            if pending:
                await asyncio.sleep(0.005)
        self._arming = None

    def reset(self) -> None:
        """Abort both sides with a TCP RST, now."""
        if self.closed is None:
            self.proxy.counters.resets += 1
        self.end("reset", rst=True)

    def end(self, by: str, *, rst: bool = False) -> None:
        """Close both sides (a RST with ``rst``, else as the transports close); the first
        caller says who ended it."""
        if self.closed is None:
            self.closed = time.monotonic()
            self.ended_by = by
            self.proxy._ended(self)
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        if self._arming is not None:
            self._arming.cancel()
            self._arming = None
        self._flowing.set()  # release the pumps
        for writer in self._writers:
            if rst:
                sock = writer.get_extra_info("socket")
                with contextlib.suppress(OSError, AttributeError):
                    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
            writer.transport.abort()


# -- the proxy ----------------------------------------------------------------------------------


class Proxy:
    """A TCP proxy to ``target`` (a PostgreSQL URL or conninfo, or ``HOST:PORT``) listening on
    ``host``:``port`` (a free port by default); ``url`` is ``target`` through it.

    ``delay``: one-way seconds each way (RTT/2). ``faults``: random stalls and resets while it
    runs. ``blackhole``: stalls drop packets (Linux) rather than only hold them. ``cut()``
    refuses new connections and drops the open ones; ``start()`` again restores it.
    """

    def __init__(
        self,
        target: str,
        *,
        delay: float = 0.0,
        faults: Faults | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        blackhole: bool = True,
    ) -> None:
        if delay < 0:
            raise ValueError("delay must be >= 0")
        self.host = host
        self.port = port or free_port()
        self.delay = delay
        self.faults = faults
        self.blackhole = blackhole
        self.url: str | None = None
        """``target`` through the proxy, when ``target`` is a URL or conninfo."""
        if "=" in target or "://" in target:
            params = conninfo_to_dict(target)
            self._target: tuple[str, int] = (
                str(params.get("host") or "localhost"),
                int(params.get("port") or 5432),
            )
            self.url = make_conninfo(target, host=host, port=str(self.port))
        else:
            name, _, port_text = target.rpartition(":")
            self._target = (name or "127.0.0.1", int(port_text))
        self.counters = Counters()
        self.connections: list[Connection] = []
        """Every connection the proxy joined, open or ended, in order."""
        self.events: list[Event] = []
        """Every fault applied, in order."""
        self._open: dict[int, Connection] = {}
        self._server: asyncio.Server | None = None
        self._faults_task: asyncio.Task[None] | None = None
        self._rng = random.Random(faults.seed if faults else 0)
        self._seeded = faults.seed if faults else None
        self._link_stall_end = 0.0
        self._handlers: set[asyncio.Task[Any]] = set()
        self._triggers: list[list[Any]] = []
        self._lateness = 0.0
        """How late (seconds) a timer of this loop wakes, on average lately: delayed chunks
        are scheduled that much earlier."""

    @property
    def target(self) -> str:
        host, port = self._target
        return f"{host}:{port}"

    @property
    def stats(self) -> Counters:
        """A copy of the counters now."""
        return Counters(**self.counters.as_dict())

    def open_connections(self) -> list[Connection]:
        return list(self._open.values())

    # -- lifecycle --

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, reuse_address=True, limit=CHUNK
        )
        if self.faults is not None:
            self.inject(self.faults)

    def inject(self, faults: Faults) -> None:
        """Start (or change) the random faults now."""
        self.calm()
        self.faults = faults
        if faults.stall_rate + faults.reset_rate > 0:
            self._faults_task = asyncio.create_task(self._inject(faults))

    def calm(self) -> None:
        """Stop the random faults (a stall running goes on until its end)."""
        if self._faults_task is not None:
            self._faults_task.cancel()
            self._faults_task = None

    async def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        self.calm()
        if self._server is not None:
            self._server.close()
            self._server = None
        for conn in list(self._open.values()):
            conn.end("cut")
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=5)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Proxy]:
        await self.start()
        try:
            yield self
        finally:
            await self.cut()

    # -- faults on demand --

    def stall_link(self, seconds: float) -> None:
        """Stall every open connection for ``seconds``, and each one opened meanwhile until
        the same moment: the link stopped carrying packets."""
        loop = asyncio.get_running_loop()
        self._link_stall_end = max(self._link_stall_end, loop.time() + seconds)
        self.events.append(Event(time.monotonic(), "link-stall", None, seconds))
        for conn in list(self._open.values()):
            conn.stall(seconds)

    def stall_when(self, marker: bytes, seconds: float, times: int = 1) -> None:
        """Stall, for ``seconds``, the next ``times`` connection(s) whose client sends bytes
        holding ``marker`` (a statement's text), before those bytes are forwarded: a fault
        aimed at one statement, e.g. a worker's heartbeat."""
        self._triggers.append([marker, seconds, times])

    def reset_when(self, marker: bytes, times: int = 1) -> None:
        """Reset the next ``times`` connection(s) whose client sends ``marker``, before
        those bytes are forwarded."""
        self._triggers.append([marker, None, times])

    def _check_triggers(self, conn: Connection, data: bytes) -> None:
        for trigger in self._triggers:
            marker, seconds, times = trigger
            if times > 0 and marker in data:
                trigger[2] = times - 1
                if seconds is None:
                    self.events.append(Event(time.monotonic(), "reset", conn.number))
                    conn.reset()
                else:
                    self.events.append(Event(time.monotonic(), "stall", conn.number, seconds))
                    conn.stall(seconds)
        self._triggers = [t for t in self._triggers if t[2] > 0]

    def link_stalled(self) -> bool:
        return self._link_stall_end > asyncio.get_running_loop().time()

    def reset_all(self) -> None:
        for conn in list(self._open.values()):
            self.events.append(Event(time.monotonic(), "reset", conn.number))
            conn.reset()

    async def _inject(self, faults: Faults) -> None:
        if self._seeded != faults.seed:
            self._rng.seed(faults.seed)
            self._seeded = faults.seed
        rate = faults.stall_rate + faults.reset_rate
        rng = self._rng
        while True:
            await asyncio.sleep(rng.expovariate(rate))
            is_stall = rng.random() * rate < faults.stall_rate
            seconds = rng.uniform(*faults.stall_s)
            candidates = [c for c in self._open.values() if not c.stalled]
            if faults.active_within is not None:
                recent = time.monotonic() - faults.active_within
                active = [c for c in candidates if c.last_active >= recent]
                candidates = active or candidates
            pick = rng.random()
            if not candidates:
                continue
            conn = candidates[min(len(candidates) - 1, int(pick * len(candidates)))]
            if is_stall:
                self.events.append(Event(time.monotonic(), "stall", conn.number, seconds))
                conn.stall(seconds)
            else:
                self.events.append(Event(time.monotonic(), "reset", conn.number))
                conn.reset()

    # -- forwarding --

    def _ended(self, conn: Connection) -> None:
        self._open.pop(conn.number, None)
        self.counters.closed += 1

    async def _open_target(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = self._target
        if host.startswith("/"):
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}", limit=CHUNK)
        return await asyncio.open_connection(host, port, limit=CHUNK)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            try:
                up_reader, up_writer = await self._open_target()
            except OSError:
                self.counters.refused += 1
                writer.transport.abort()
                return
            for w in (writer, up_writer):
                sock = w.get_extra_info("socket")
                if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.counters.connections += 1
            conn = Connection(self, self.counters.connections, writer, up_writer)
            self.connections.append(conn)
            self._open[conn.number] = conn
            left = self._link_stall_end - asyncio.get_running_loop().time()
            if left > 0:
                conn.stall(left)
            await asyncio.gather(
                self._forward(conn, reader, up_writer, up=True),
                self._forward(conn, up_reader, writer, up=False),
            )
        finally:
            self._handlers.discard(task)

    async def _forward(
        self,
        conn: Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        up: bool,
    ) -> None:
        """Carry one direction until its sender is done; then end the connection: its sender
        closed (EOF: close the other side once what it sent is delivered) or failed (a reset,
        a timeout: reset the other side, as its peer would have been)."""
        sender = "client" if up else "server"
        try:
            if self.delay > 0:
                await self._carry_delayed(conn, reader, writer, up)
            else:
                while data := await reader.read(CHUNK):
                    conn.arrived(up, data)
                    await conn.flowing()
                    if conn.closed is not None:
                        return
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            conn.end(sender, rst=True)
            return
        await conn.flowing()
        if conn.closed is None:
            with contextlib.suppress(ConnectionError, OSError):
                await writer.drain()
        conn.end(sender)

    async def _carry_delayed(
        self,
        conn: Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up: bool,
    ) -> None:
        """Each chunk written ``delay`` after it arrived, in order; the reading goes on
        meanwhile (up to ``BUFFER_LIMIT`` held)."""
        loop = asyncio.get_running_loop()
        delay = self.delay
        pending: deque[tuple[float, bytes]] = deque()
        arrived = asyncio.Event()
        room = asyncio.Event()
        room.set()
        held = 0

        async def read() -> None:
            nonlocal held
            try:
                while data := await reader.read(CHUNK):
                    conn.arrived(up, data)
                    pending.append((loop.time() + delay, data))
                    held += len(data)
                    arrived.set()
                    if held > BUFFER_LIMIT:
                        room.clear()
                        await room.wait()
            finally:
                arrived.set()

        reading = asyncio.create_task(read())
        try:
            while True:
                if not pending:
                    if reading.done():
                        reading.result()  # a read error ends the connection as a failure
                        return
                    arrived.clear()
                    await arrived.wait()
                    continue
                due, data = pending[0]
                now = loop.time()
                if due > now:
                    # Woken early by what this loop's timers are seen to wake late (epoll's
                    # and libuv's millisecond steps, the host's wake-up delay): a running
                    # correction by a tenth of each wait's error against its due time.
                    wait = due - self._lateness - now
                    if wait > 0:
                        await asyncio.sleep(wait)
                    error = loop.time() - due
                    self._lateness = max(0.0, min(LATENESS_CAP, self._lateness + 0.1 * error))
                await conn.flowing()
                if conn.closed is not None:
                    return
                pending.popleft()
                held -= len(data)
                if held <= BUFFER_LIMIT:
                    room.set()
                writer.write(data)
                await writer.drain()
        finally:
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                    await reading


# -- as its own process -------------------------------------------------------------------------


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.helpers.netproxy",
        description="A TCP proxy making an impaired link to PostgreSQL (see the module doc).",
    )
    parser.add_argument(
        "--target", required=True, help="a PostgreSQL URL or conninfo, or HOST:PORT"
    )
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (0: a free port)")
    latency = parser.add_mutually_exclusive_group()
    latency.add_argument("--delay-ms", type=float, default=None, help="one-way delay each way")
    latency.add_argument("--rtt-ms", type=float, default=None, help="round trip: 2 x one-way")
    parser.add_argument("--stall-rate", type=float, default=0.0, help="random stalls per second")
    parser.add_argument(
        "--stall-ms",
        default="50,1000",
        help="a random stall lasts LOW,HIGH milliseconds (uniform; default 50,1000)",
    )
    parser.add_argument("--reset-rate", type=float, default=0.0, help="random resets per second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--hold", action="store_true", help="stalls hold bytes only (no black hole)"
    )
    parser.add_argument(
        "--control", action="store_true", help="read commands on stdin (stats, stall S, reset)"
    )
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    parser.add_argument("--select", action="store_true", help="select(2): timers to the µs")
    return parser.parse_args(argv)


def _say(*parts: object) -> None:
    print(*parts, flush=True)


async def _serve(args: argparse.Namespace) -> None:
    host, _, port_text = args.listen.rpartition(":")
    port = int(port_text) or free_port()
    delay = args.rtt_ms / 2000 if args.rtt_ms is not None else (args.delay_ms or 0.0) / 1000
    low, high = (float(x) / 1000 for x in args.stall_ms.split(","))
    faults = Faults(
        stall_rate=args.stall_rate, stall_s=(low, high), reset_rate=args.reset_rate, seed=args.seed
    )
    proxy = Proxy(
        args.target,
        delay=delay,
        faults=faults,
        host=host or "127.0.0.1",
        port=port,
        blackhole=not args.hold,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await proxy.start()
    each_way = f"delay {delay * 1000:g} ms each way"
    _say(f"listening {proxy.host}:{proxy.port} -> {proxy.target}, {each_way}")

    async def control() -> None:
        while line := await asyncio.to_thread(sys.stdin.readline):
            words = line.split()
            if not words:
                continue
            if words[0] == "stats":
                _say("stats " + json.dumps(proxy.stats.as_dict()))
            elif words[0] == "stall" and len(words) == 2:
                proxy.stall_link(float(words[1]))
                _say("stalled")
            elif words[0] == "reset":
                proxy.reset_all()
                _say("reset")
            elif words[0] == "quit":
                break
            else:
                _say(f"error: unknown command {line.strip()!r}")
        stop.set()

    controller = asyncio.create_task(control()) if args.control else None
    await stop.wait()
    await proxy.cut()
    _say("counters " + json.dumps(proxy.stats.as_dict()))
    if controller is not None:
        controller.cancel()


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    if args.uvloop:
        import uvloop

        uvloop.run(_serve(args))
    elif args.select:
        import selectors

        with asyncio.Runner(
            loop_factory=lambda: asyncio.SelectorEventLoop(selectors.SelectSelector())
        ) as runner:
            runner.run(_serve(args))
    else:
        asyncio.run(_serve(args))
    # A control thread may still be blocked reading stdin: do not wait for it.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
