"""The provider simulator: an HTTP server that serves generated Fever snapshots of any size, with
faults injected per request. For tests, benchmarks and the demo (``pgenough-plans provider-sim``).

Endpoints (a Starlette app on uvicorn):

* ``GET /planList`` (also ``/snapshot``; ``/eventList`` defaults to the older variant): a
  snapshot as ``application/xml``, streamed in chunks of about 64 KiB. Query parameters:
  ``plans`` (default: the server's), ``seed`` (default: the server's), ``version`` (pins a
  version; otherwise each request takes the next one from the server's counter, starting at 1,
  whatever its fault), ``variant`` (``planList`` or ``eventList``), ``fault`` (below; it takes
  precedence over the fault queue and leaves it untouched), and for hostile documents ``path``
  and ``net_port``. Response headers ``X-Sim-Version``, ``X-Sim-Seed``, ``X-Sim-Plans`` and
  ``X-Sim-Fault`` say what was served. The document is ``data.render_snapshot(seed, version,
  plans)``; its content is ``data.snapshot_plans(seed, version, plans)``.
* ``GET /health``: ``{"status": "ok"}``.
* ``POST /_control/faults`` with ``{"faults": ["503", "ok", ...]}``: replaces the fault queue;
  each snapshot request without ``fault=`` takes the next one, then requests are normal again.
* ``GET /_control/stats``: request counts per path, snapshot version, fault and status, the
  queued faults, the next version and the last requests.
* ``POST /_control/reset``: empties the queue and the counts, and restarts versions at 1.

Faults (``name`` or ``name:argument``):

* ``ok``: no fault.
* ``latency:S``: wait S seconds before the response headers; ``slow:S``: wait S seconds before
  each chunk of the body (read timeouts).
* ``500``, ``503``, ``5xx`` (= 500), any ``4xx``/``5xx`` code: that status with a small text
  body. ``429:S`` (S defaults to 1) and ``503:S`` add ``Retry-After: S`` (whole seconds).
* ``truncate:F``: the first F of the document (by its estimated size), then a clean end of the
  response: HTTP is fine, the XML is incomplete (the cut always falls before the root's end tag).
* ``reset:F``: the same part of the document, then the TCP connection is aborted with a reset
  (``SO_LINGER`` 0); the client sees a read or protocol error, never a clean end.
* ``malformed:R``: a share R of the plans are defective in a well-formed document (see
  ``data``; ``snapshot_plans(..., malformed=R)`` names each defect).
* ``hostile:laughs``, ``hostile:xxe-file[:PATH]``, ``hostile:xxe-net[:PORT]``: a snapshot whose
  DOCTYPE declares an exponential entity, an external entity on ``file://PATH`` (default
  ``/etc/passwd``, or ``?path=``), or external entities on ``http://127.0.0.1:PORT/`` (or
  ``?net_port=``), used in the first base_plan's title.

Evolution (details in ``data``): snapshot ``(seed, version, plans)`` is a pure function.
From one version to the next, a few percent of the plans vanish and are replaced by new ones
(always ``plans`` in all), some base_plans turn offline or online, titles change, end times move
and prices change; every snapshot carries the feed's traps (reused plan_ids, impossible dates,
repeated zone_ids, escaped non-ASCII titles, capacity 0). ``snapshot_plans`` is the truth the
XML is rendered from, so a test computes what changed by comparing two versions of it.

In-process use: ``with SimServer(plans=1000, seed=1) as sim: httpx.get(sim.url)``; the
foreground server is :func:`serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import struct
import threading
from collections import Counter, deque
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeAlias, cast, get_args

import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Scope
from uvicorn.protocols.http.h11_impl import H11Protocol

from pgenough.graceful import GracefulServer
from pgenough.httpserver import base_url, listen
from pgenough_plans.sim.data import (
    BYTES_PER_PLAN,
    VARIANTS,
    HostileKind,
    SimPlan,
    SimZone,
    Variant,
    hostile_prologue,
    render_snapshot,
    snapshot_plans,
)

__all__ = [
    "DEFAULT_PLANS",
    "DEFAULT_PORT",
    "DEFAULT_SEED",
    "Fault",
    "SimConfig",
    "SimPlan",
    "SimServer",
    "SimState",
    "SimZone",
    "create_app",
    "parse_fault",
    "render_snapshot",
    "serve",
    "snapshot_plans",
]

DEFAULT_PLANS: Final = 1000
DEFAULT_SEED: Final = 0
DEFAULT_PORT: Final = 8090
MAX_PLANS: Final = 100_000_000
RECENT_REQUESTS: Final = 100  # requests kept in the stats' "recent" list
ABORT_FLUSH_SECONDS: Final = 2.0  # how long a reset waits for the partial body to leave
FaultKind: TypeAlias = Literal[
    "ok", "latency", "slow", "status", "truncate", "reset", "malformed", "hostile"
]
_TRANSPORT_EXTENSION: Final = "pgenough.transport"
_ROOT_END_MARGIN: Final = 32  # a cut never reaches into the last 32 bytes (the root end tag)


# --- faults ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fault:
    """One request's fault, parsed from its text form (``spec``)."""

    spec: str = "ok"
    kind: FaultKind = "ok"
    status: int = 200
    seconds: float = 0.0  # latency, slow
    retry_after: int | None = None  # status: the Retry-After header, if any
    fraction: float = 0.0  # truncate, reset: share of the document; malformed: share of plans
    hostile: HostileKind | None = None
    target: str = ""  # hostile: file path or port


NO_FAULT: Final = Fault()


def _number(text: str, default: float, spec: str, low: float, high: float) -> float:
    try:
        value = float(text) if text else default
    except ValueError:
        raise ValueError(f"fault {spec!r}: {text!r} is not a number") from None
    if not low <= value <= high or math.isnan(value):
        raise ValueError(f"fault {spec!r}: {value} is outside [{low}, {high}]")
    return value


def parse_fault(spec: str) -> Fault:
    """The fault named by ``spec`` (see the module docstring); ValueError when it names none."""
    spec = spec.strip()
    name, _, arg = spec.partition(":")
    name = name.lower()
    if name in ("", "ok", "none"):
        return NO_FAULT
    if name in ("latency", "slow"):
        delay: FaultKind = "latency" if name == "latency" else "slow"
        return Fault(spec, delay, seconds=_number(arg, 1.0, spec, 0.0, 3600.0))
    if name in ("truncate", "reset"):
        cut: FaultKind = "truncate" if name == "truncate" else "reset"
        return Fault(spec, cut, fraction=_number(arg, 0.5, spec, 0.0, 1.0))
    if name == "malformed":
        return Fault(spec, "malformed", fraction=_number(arg, 0.01, spec, 0.0, 1.0))
    if name == "hostile":
        kind, _, target = arg.partition(":")
        if kind not in get_args(HostileKind):
            raise ValueError(f"fault {spec!r}: hostile documents are {get_args(HostileKind)}")
        hostile = cast(HostileKind, kind)
        try:
            hostile_prologue(hostile, target=target)  # refuses a bad path or port
        except ValueError as exc:
            raise ValueError(f"fault {spec!r}: {exc}") from None
        return Fault(spec, "hostile", hostile=hostile, target=target)
    status = 500 if name == "5xx" else int(name) if name.isdigit() else 0
    if not 400 <= status <= 599:
        raise ValueError(f"unknown fault {spec!r}")
    retry_after = None
    if status == 429 or (arg and status == 503):
        retry_after = math.ceil(_number(arg, 1.0, spec, 0.0, 86400.0))
    elif arg:
        raise ValueError(f"fault {spec!r}: only 429 and 503 take a Retry-After")
    return Fault(spec, "status", status=status, retry_after=retry_after)


# --- state shared by the server and its owner ---------------------------------------------------


class SimState:
    """The version counter, the fault queue and the request counts of one server. Thread-safe:
    the server's event loop and the thread that owns a :class:`SimServer` both use it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._next_version = 1
            self._faults: deque[Fault] = deque()
            self._paths: Counter[str] = Counter()
            self._versions: Counter[int] = Counter()
            self._fault_counts: Counter[str] = Counter()
            self._statuses: Counter[int] = Counter()
            self._recent: deque[dict[str, Any]] = deque(maxlen=RECENT_REQUESTS)

    def set_faults(self, faults: Iterable[Fault]) -> None:
        with self._lock:
            self._faults = deque(faults)

    def take_version(self) -> int:
        with self._lock:
            version = self._next_version
            self._next_version += 1
            return version

    def take_fault(self) -> Fault:
        with self._lock:
            return self._faults.popleft() if self._faults else NO_FAULT

    def count(self, path: str, status: int, snapshot: dict[str, Any] | None = None) -> None:
        """Count a request; ``snapshot`` (version, fault, plans, seed...) for snapshot requests."""
        with self._lock:
            self._paths[path] += 1
            self._statuses[status] += 1
            if snapshot is not None:
                self._versions[snapshot["version"]] += 1
                self._fault_counts[snapshot["fault"]] += 1
                self._recent.append({"path": path, "status": status, **snapshot})

    def stats(self) -> dict[str, Any]:
        """A JSON-ready copy of the counts (what ``GET /_control/stats`` answers)."""
        with self._lock:
            return {
                "requests": sum(self._paths.values()),
                "snapshots": sum(self._versions.values()),
                "paths": dict(self._paths),
                "versions": {str(v): n for v, n in sorted(self._versions.items())},
                "faults": dict(self._fault_counts),
                "statuses": {str(s): n for s, n in sorted(self._statuses.items())},
                "queued_faults": [f.spec for f in self._faults],
                "next_version": self._next_version,
                "recent": list(self._recent),
            }


# --- the app ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimConfig:
    """The defaults a snapshot request can override."""

    plans: int = DEFAULT_PLANS
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        if not 0 <= self.plans <= MAX_PLANS:
            raise ValueError(f"plans must be in [0, {MAX_PLANS}]")


def _int_param(query: QueryParams, name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}]")
    return value


def _cut(chunks: Iterator[bytes], limit: int) -> Iterator[bytes]:
    """At most the first ``limit`` bytes of a document, and always short of its root end tag."""
    sent = 0
    held: bytes | None = None  # one chunk of look-ahead: the last one must not go out whole
    for chunk in chunks:
        if held is not None:
            part = held[: limit - sent]
            if part:
                yield part
                sent += len(part)
            if sent >= limit:
                return
        held = chunk
    if held is not None:
        part = held[: min(limit - sent, len(held) - _ROOT_END_MARGIN)]
        if part:
            yield part


def _abort(transport: asyncio.Transport) -> None:
    """Reset the connection: with SO_LINGER 0, closing the socket sends an RST, not a FIN."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class _SimulatedReset(Exception):
    """Raised in the body when the server gives no transport to abort: uvicorn then drops the
    connection without ending the body (a FIN, not an RST)."""


async def _body(chunks: Iterator[bytes], fault: Fault, scope: Scope) -> AsyncIterator[bytes]:
    """The response body: chunks from the generator, with the fault's delays, cut and reset."""
    for chunk in chunks:
        if fault.kind == "slow":
            await asyncio.sleep(fault.seconds)
        yield chunk
        await asyncio.sleep(0)  # let other requests run between chunks of a large snapshot
    if fault.kind == "reset":
        transport = scope.get("extensions", {}).get(_TRANSPORT_EXTENSION)
        if not isinstance(transport, asyncio.Transport):
            raise _SimulatedReset("reset fault")
        # Let the partial body reach the client first (asyncio has no event for an empty
        # write buffer, so this polls, for at most ABORT_FLUSH_SECONDS).
        for _ in range(int(ABORT_FLUSH_SECONDS / 0.005)):
            if not transport.get_write_buffer_size():
                break
            await asyncio.sleep(0.005)
        _abort(transport)
        await asyncio.sleep(0)


def create_app(config: SimConfig | None = None, state: SimState | None = None) -> Starlette:
    """The simulator's ASGI app; ``state`` is shared with its owner (a fresh one by default)."""
    config = config or SimConfig()
    state = state or SimState()

    async def snapshot(request: Request) -> Response:
        query = request.query_params
        default_variant: Variant = "eventList" if request.url.path == "/eventList" else "planList"
        try:
            plans = _int_param(query, "plans", config.plans, 0, MAX_PLANS)
            seed = _int_param(query, "seed", config.seed, -(2**63), 2**63 - 1)
            pinned = _int_param(query, "version", -1, 0, 2**62)
            variant = query.get("variant", default_variant)
            if variant not in VARIANTS:
                raise ValueError(f"variant must be one of {VARIANTS}")
            fault = parse_fault(query["fault"]) if "fault" in query else state.take_fault()
            doctype = preamble = ""
            if fault.hostile is not None:
                where = "path" if fault.hostile == "xxe-file" else "net_port"
                target = fault.target or query.get(where, "")
                doctype, preamble = hostile_prologue(fault.hostile, variant, target)
        except ValueError as exc:
            state.count(request.url.path, 400)
            return PlainTextResponse(f"400 bad request: {exc}\n", status_code=400)
        version = pinned if pinned >= 0 else state.take_version()
        headers = {
            "X-Sim-Version": str(version),
            "X-Sim-Seed": str(seed),
            "X-Sim-Plans": str(plans),
            "X-Sim-Fault": fault.spec,
        }
        state.count(
            request.url.path,
            fault.status,
            {"version": version, "fault": fault.spec, "plans": plans, "seed": seed},
        )
        if fault.kind == "latency" and await _client_left_within(request, fault.seconds):
            return Response(status_code=499)  # nobody reads it; the handler just ends
        if fault.kind == "status":
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
            text = f"{fault.status} simulated by the provider simulator\n"
            return PlainTextResponse(text, status_code=fault.status, headers=headers)
        chunks = render_snapshot(
            seed,
            version,
            plans,
            variant=variant,
            malformed=fault.fraction if fault.kind == "malformed" else 0.0,
            doctype=doctype,
            preamble=preamble,
        )
        if fault.kind in ("truncate", "reset"):
            chunks = _cut(chunks, int(fault.fraction * (plans * BYTES_PER_PLAN + 256)))
        body = _body(chunks, fault, request.scope)
        return StreamingResponse(body, media_type="application/xml", headers=headers)

    async def health(request: Request) -> Response:
        state.count(request.url.path, 200)
        return JSONResponse({"status": "ok"})

    async def control_faults(request: Request) -> Response:
        try:
            payload = await request.json()
            specs = payload["faults"]
            if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
                raise ValueError("faults must be a list of strings")
            faults = [parse_fault(s) for s in specs]
        except (ValueError, KeyError, TypeError) as exc:
            state.count(request.url.path, 400)
            message = f'expected {{"faults": ["503", "ok", ...]}}: {exc}'
            return JSONResponse({"error": message}, status_code=400)
        state.set_faults(faults)
        state.count(request.url.path, 200)
        return JSONResponse({"queued": [f.spec for f in faults]})

    async def control_stats(request: Request) -> Response:
        state.count(request.url.path, 200)
        return JSONResponse(state.stats())

    async def control_reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"reset": True})

    return Starlette(
        routes=[
            Route("/planList", snapshot),
            Route("/snapshot", snapshot),
            Route("/eventList", snapshot),
            Route("/health", health),
            Route("/_control/faults", control_faults, methods=["POST"]),
            Route("/_control/stats", control_stats),
            Route("/_control/reset", control_reset, methods=["POST"]),
        ]
    )


# --- serving ------------------------------------------------------------------------------------


class _H11WithTransport(H11Protocol):
    """uvicorn's h11 protocol, handing the app each connection's transport in the ASGI scope
    (``scope["extensions"]["pgenough.transport"]``) so that the reset fault can abort it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        app = self.app

        async def app_with_transport(scope: Any, receive: Any, send: Any) -> None:
            scope.setdefault("extensions", {})[_TRANSPORT_EXTENSION] = self.transport
            await app(scope, receive, send)

        self.app = app_with_transport


class _Server(GracefulServer):
    """A uvicorn server that says when it is accepting connections (or failed to start),
    and prints ``banner`` then: by that time its signal handlers are in place, so whoever
    reads the banner may stop it with SIGTERM and get exit 0."""

    def __init__(self, config: uvicorn.Config, banner: str | None = None) -> None:
        super().__init__(config)
        self.ready = threading.Event()
        self.banner = banner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.ready.set()
        if self.banner is not None and self.started:
            print(self.banner, flush=True)


async def _client_left_within(request: Request, seconds: float) -> bool:
    """Wait ``seconds`` before answering, as a slow provider does, unless the client hangs
    up first (then True): a handler asleep for a client that is gone would otherwise hold up
    the server's shutdown until uvicorn cancels it with a traceback."""

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    try:
        await asyncio.wait_for(gone(), timeout=seconds)
    except TimeoutError:
        return False
    return True


def _uvicorn_config(app: Starlette, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        http=_H11WithTransport,
        loop="asyncio",
        lifespan="off",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=1,
    )


class SimServer:
    """The simulator on a background thread, for tests and benchmarks::

    with SimServer(plans=1000, seed=1) as sim:
        sim.set_faults(["503", "ok"])
        httpx.get(sim.url)  # 503, then the next request gets a snapshot
        sim.stats()["faults"]
    """

    def __init__(
        self,
        plans: int = DEFAULT_PLANS,
        seed: int = DEFAULT_SEED,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        start_timeout: float = 10.0,
    ) -> None:
        self.config = SimConfig(plans=plans, seed=seed)
        self.state = SimState()
        self.host = host
        self._port = port
        self._start_timeout = start_timeout
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        """``http://host:port``, the server's root."""
        return base_url(self.host, self._port)

    @property
    def url(self) -> str:
        """The snapshot endpoint, ``http://host:port/planList``."""
        return self.base_url + "/planList"

    def start(self) -> Self:
        """Start serving; returns once the server accepts connections."""
        if self._thread is not None:
            raise RuntimeError("the simulator is already running")
        sock = listen(self.host, self._port)
        self._port = sock.getsockname()[1]
        server = _Server(_uvicorn_config(create_app(self.config, self.state), "warning"))

        def run() -> None:
            try:
                server.run(sockets=[sock])
            finally:
                server.ready.set()
                sock.close()

        thread = threading.Thread(target=run, name=f"provider-sim:{self._port}", daemon=True)
        thread.start()
        if not server.ready.wait(self._start_timeout) or not server.started:
            server.should_exit = True
            thread.join(self._start_timeout)
            raise RuntimeError(f"the provider simulator did not start on {self.base_url}")
        self._server, self._thread = server, thread
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (responses in progress get about a second to finish)."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(timeout)
        if thread.is_alive():
            server.force_exit = True
            thread.join(timeout)
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def set_faults(self, faults: Iterable[str]) -> None:
        """Replace the fault queue (as ``POST /_control/faults`` does)."""
        self.state.set_faults([parse_fault(f) for f in faults])

    def stats(self) -> dict[str, Any]:
        """The request counts (as ``GET /_control/stats`` answers)."""
        return self.state.stats()

    def reset(self) -> None:
        """Empty the fault queue and the counts, and restart versions at 1."""
        self.state.reset()


def serve(
    plans: int = DEFAULT_PLANS,
    port: int = DEFAULT_PORT,
    seed: int = DEFAULT_SEED,
    host: str = "127.0.0.1",
) -> None:
    """Serve the simulator in the foreground until Ctrl-C (``pgenough-plans provider-sim``);
    ``ListenError`` when it cannot take the address."""
    app = create_app(SimConfig(plans=plans, seed=seed))
    sock = listen(host, port)
    url = base_url(host, sock.getsockname()[1])
    banner = f"provider simulator: {url}/planList ({plans} plans, seed {seed})"
    server = _Server(_uvicorn_config(app, "info"), banner)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
