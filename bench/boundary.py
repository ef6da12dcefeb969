"""Broker-boundary benchmark: pub/sub fan-out, and PostgreSQL connections vs workers (a pooler).

Run it from the repository root::

    pip install -e '.[bench]'                        # matplotlib, nats-py
    apt-get install -y pgbouncer                     # optional: the pooler half of `connections`
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.boundary
    python -m bench.boundary fanout                  # one sub-benchmark (fanout | connections)
    python -m bench.boundary --quick                 # smoke run: fewer points, fewer messages

With ``DATABASE_URL`` it creates a fresh database per sub-benchmark (and per mode) on that
server and drops it at the end; without it, it starts (or reuses) the embedded server in
``.pgenough-bench/``. The server's settings are printed first. Each sub-benchmark prints a
table and, when asked, renders a PNG (matplotlib, Agg): ``--plot-fanout PATH.png``,
``--plot-connections PATH.png`` (the docs' are ``docs/img/boundary-fanout.png`` and
``docs/img/boundary-connections.png``; nothing is drawn without them); ``--json FILE`` saves
everything, and ``--replot FILE`` with those options draws the images again from it.

fanout (``--plot-fanout``; the docs' ``docs/img/boundary-fanout.png``)
-----------------------------------------------------------------------

One publisher, S subscribers (S = 1, 2, 4, 8, 16, 32, 64), every subscriber on its own
connection, as users would deploy them. The subscribers are spread over ``min(S, 4)`` processes
(``multiprocessing`` spawn), each an asyncio loop holding its share of the connections; all of
them subscribe, then wait on a barrier. The publisher (the benchmark process) then publishes
``--messages`` (default 2,000) 64-byte JSON messages, one after the other, as fast as it can;
each carries its sequence number and ``time.time()`` at publish.

- ``pgenough``: ``publish(conn, channel, payload)`` on an autocommit connection, so each message
  is its own transaction (how ``publish`` inside an application's transaction behaves); each
  subscriber is ``async with subscribe(url, channel) as sub: async for item in sub``.
- ``notify``: the baseline, plain psycopg: ``SELECT pg_notify(%s, %s)`` in autocommit; each
  subscriber an ``AsyncConnection`` that ran ``LISTEN`` and reads ``conn.notifies()``.
- ``nats``: NATS core (no JetStream, at most once): ``nc.publish`` per message and one
  ``flush`` at the end; each subscriber its own ``nats.connect`` with a callback subscription.

*delivered msgs/s* = messages received by all subscribers together / (last receipt - first
publish). *latency* = receipt ``time.time()`` - the message's timestamp, p50 and p99 over every
delivery. *publish msgs/s* = messages / the publisher's own time, at each S; ``S = 0`` is the
publisher alone. Every subscriber must get every message exactly once: losses and duplicates are
counted and printed (a subscriber stops after the last message or ``IDLE_S`` seconds without
one), never hidden.

connections (``--plot-connections``; the docs' ``docs/img/boundary-connections.png``)
------------------------------------------------------------------------------------

W = 1, 2, 4, 8, 16 worker processes, each the command a user deploys: ``python -m pgenough
worker run bench._boundary_tasks:app`` (a no-op task on queue ``boundary``, default settings:
concurrency 10, pool ``max(pool_max_size, concurrency + 5)``, one listener, maintenance on).
Once every worker has logged its start, the idle server connections of the database are counted
in ``pg_stat_activity``; then ``--jobs`` (default 5,000) jobs are enqueued in one COPY and the
benchmark samples, every ``SAMPLE_S`` seconds, the jobs left and the server connections (of the
database, and of every client backend against ``max_connections``). *drain jobs/s* = jobs /
(last job gone - first job claimed); *wake* = first claim - the enqueue's commit. Then SIGTERM;
each worker's exit code and error lines are reported.

The same again through PgBouncer (if installed): the benchmark writes a ``pgbouncer.ini`` in a
temporary directory (``pool_mode = transaction``, ``default_pool_size = --pool-size``, default
8), starts it on a free port, points the workers' ``DATABASE_URL`` at it, and stops it at the
end. Enqueueing and sampling stay on direct connections. Three session-state checks run
through it too: a ``subscribe()`` listening through PgBouncer while 20 messages are published
directly; the same session-level advisory lock tried by two pooled connections; and psycopg's
automatic prepared statements (a query run more than ``prepare_threshold`` times).

*busy* - the machine's CPU busy fraction just before a measurement, after waiting up to
``--quiet-wait`` seconds for it to drop under ``QUIET_BUSY`` (as in ``bench/queue.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psycopg
from bench._boundary_tasks import noop
from bench.harness.api_process import free_port
from bench.harness.machine import (
    QUIET_BUSY,
    fmt_busy,
    refuse_if_busy,
    wait_quiet,
)
from bench.harness.report import (
    percentile,
    table,
)
from bench.harness.server import (
    Server,
    version_of,
)
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgenough.core import Gap, migrate, publish, subscribe

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = ROOT / ".pgenough-bench"

CHANNEL = "boundary_fanout"
MESSAGE_BYTES = 64
IDLE_S = 5.0
"""A subscriber that got nothing for this long stops (and counts what it missed)."""
BARRIER_TIMEOUT = 120.0
MAX_PROCESSES = 4
NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
PUB_BATCH = 100
PUB_BATCHED = "pgenough-100-per-tx"
PUB_ASYNC_COMMIT = "pgenough-async-commit"
PUBLISHER_ONLY = (PUB_BATCHED, PUB_ASYNC_COMMIT)
"""Publisher-alone variants: what one NOTIFY transaction per message costs (its commit)."""

TASKS_APP = "bench._boundary_tasks:app"
SAMPLE_S = 0.01
START_TIMEOUT = 120.0
DRAIN_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
STARTED_MARK = "task(s); queues"
"""What ``pgenough worker run`` logs once its pool is open and migrated (cli.worker_run)."""


# -- fan-out ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FanoutSpec:
    system: str
    url: str
    subscribers: int
    messages: int
    """At most this many messages..."""
    seconds: float
    """...or publishing for at most this long, whichever ends first."""


@dataclass
class SubscriberReport:
    received: list[int] = field(default_factory=list)
    """Deliveries per subscriber."""
    distinct: list[int] = field(default_factory=list)
    """Distinct sequence numbers per subscriber (received - distinct = duplicates)."""
    last: float = 0.0
    latencies: list[float] = field(default_factory=list)
    gaps: int = 0
    error: str | None = None


@dataclass
class FanoutPoint:
    system: str
    subscribers: int
    messages: int
    publish_s: float
    delivered: int
    elapsed_s: float
    """First publish to last receipt."""
    p50_ms: float
    p99_ms: float
    lost: int
    duplicates: int
    gaps: int
    busy: float | None
    refused: str | None = None
    """Why the point could not run (the server refused a connection: max_connections)."""

    @property
    def delivered_rate(self) -> float:
        return self.delivered / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def publish_rate(self) -> float:
        return self.messages / self.publish_s


def payload(seq: int) -> str:
    """A JSON message of exactly MESSAGE_BYTES bytes carrying its sequence and send time."""
    head = json.dumps({"seq": seq, "t": time.time(), "pad": ""})
    return head[:-2] + "x" * max(0, MESSAGE_BYTES - len(head)) + '"}'


class _Tally:
    """One subscriber's receipts."""

    def __init__(self) -> None:
        self.count = 0
        self.seen: set[int] = set()
        self.last = 0.0
        self.latencies: list[float] = []
        self.gaps = 0

    def add(self, text: str | bytes) -> None:
        now = time.time()
        body = json.loads(text)
        self.count += 1
        self.seen.add(body["seq"])
        self.last = now
        self.latencies.append(now - body["t"])


async def _until_done_or_idle(tallies: Sequence[_Tally], published: Synchronized[int]) -> None:
    """Once the publisher is done (``published`` > 0), return when every subscriber has every
    message or got none for IDLE_S."""
    since = 0.0
    while True:
        await asyncio.sleep(0.05)
        n = published.value
        if not n:
            continue
        now = time.time()
        since = since or now
        if all(len(t.seen) >= n or now - max(t.last, since) > IDLE_S for t in tallies):
            return


async def _fanout_subscribers(
    spec: FanoutSpec, count: int, barrier: Barrier, published: Synchronized[int]
) -> SubscriberReport:
    tallies = [_Tally() for _ in range(count)]
    stack = contextlib.AsyncExitStack()
    consumers: list[asyncio.Task[None]] = []
    async with stack:
        if spec.system == "pgenough":
            subs = [await stack.enter_async_context(subscribe(spec.url, CHANNEL)) for _ in tallies]

            async def consume_sub(sub: Any, tally: _Tally) -> None:
                async for item in sub:
                    if isinstance(item, Gap):
                        tally.gaps += 1
                        continue
                    tally.add(item.payload)

            consumers = [
                asyncio.create_task(consume_sub(s, t)) for s, t in zip(subs, tallies, strict=True)
            ]
        elif spec.system == "notify":
            conns = []
            for _ in tallies:
                conn = await psycopg.AsyncConnection.connect(spec.url, autocommit=True)
                stack.push_async_callback(conn.close)
                await conn.execute(f"LISTEN {CHANNEL}")
                conns.append(conn)

            async def consume_conn(conn: psycopg.AsyncConnection[Any], tally: _Tally) -> None:
                while True:
                    async for n in conn.notifies(timeout=1.0):
                        tally.add(n.payload)

            consumers = [
                asyncio.create_task(consume_conn(c, t)) for c, t in zip(conns, tallies, strict=True)
            ]
        else:
            import nats

            for tally in tallies:
                nc = await nats.connect(NATS_URL)
                stack.push_async_callback(nc.close)

                async def on_msg(msg: Any, tally: _Tally = tally) -> None:
                    tally.add(msg.data)

                await nc.subscribe(CHANNEL, cb=on_msg)
                await nc.flush()  # the server knows the subscription before the publisher starts
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        await _until_done_or_idle(tallies, published)
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
    return SubscriberReport(
        received=[t.count for t in tallies],
        distinct=[len(t.seen) for t in tallies],
        last=max(t.last for t in tallies),
        latencies=[x for t in tallies for x in t.latencies],
        gaps=sum(t.gaps for t in tallies),
    )


def _fanout_process_main(
    spec: FanoutSpec,
    count: int,
    barrier: Barrier,
    published: Synchronized[int],
    reports: MPQueue[SubscriberReport],
) -> None:
    try:
        report = asyncio.run(_fanout_subscribers(spec, count, barrier, published))
    except BaseException:
        barrier.abort()
        report = SubscriberReport(error=traceback.format_exc())
    reports.put(report)


async def _publish_all(spec: FanoutSpec) -> tuple[float, float, int]:
    """Publish as fast as one publisher can, ``spec.messages`` or for ``spec.seconds``,
    whichever ends first; (first publish time, seconds, messages published)."""
    system, url, messages = spec.system, spec.url, spec.messages
    seq = 0

    def more() -> bool:
        return seq < messages and time.perf_counter() - start < spec.seconds

    if system == "nats":
        import nats

        nc = await nats.connect(NATS_URL)
        try:
            first = time.time()
            start = time.perf_counter()
            while more():
                await nc.publish(CHANNEL, payload(seq).encode())
                seq += 1
            await nc.flush()
            return first, time.perf_counter() - start, seq
        finally:
            await nc.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        first = time.time()
        start = time.perf_counter()
        if system == PUB_ASYNC_COMMIT:
            await conn.execute("SET synchronous_commit = off")
        while more():
            if system == PUB_BATCHED:
                async with conn.transaction():
                    for _ in range(PUB_BATCH):
                        await publish(conn, CHANNEL, payload(seq))
                        seq += 1
            elif system == "notify":
                await conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload(seq)))
                seq += 1
            else:
                await publish(conn, CHANNEL, payload(seq))
                seq += 1
        return first, time.perf_counter() - start, seq


TOO_MANY = "too many clients"
"""PostgreSQL's refusal past max_connections: a measured outcome, reported as such."""


def run_fanout_point(ctx: SpawnContext, spec: FanoutSpec, busy: float | None) -> FanoutPoint:
    try:
        return _run_fanout_point(ctx, spec, busy)
    except (psycopg.OperationalError, RuntimeError) as exc:
        if TOO_MANY not in str(exc):
            raise
        nan = float("nan")
        return FanoutPoint(
            spec.system,
            spec.subscribers,
            0,
            nan,
            0,
            0.0,
            nan,
            nan,
            0,
            0,
            0,
            busy,
            refused=f"server refused a connection ({TOO_MANY}, max_connections)",
        )


def _run_fanout_point(ctx: SpawnContext, spec: FanoutSpec, busy: float | None) -> FanoutPoint:
    if spec.subscribers == 0:
        _, publish_s, sent = asyncio.run(_publish_all(spec))
        return FanoutPoint(
            spec.system,
            0,
            sent,
            publish_s,
            0,
            0.0,
            float("nan"),
            float("nan"),
            0,
            0,
            0,
            busy,
        )
    processes = min(spec.subscribers, MAX_PROCESSES)
    shares = [
        spec.subscribers // processes + (i < spec.subscribers % processes) for i in range(processes)
    ]
    barrier = ctx.Barrier(processes + 1)
    published = ctx.Value("q", 0)
    reports: MPQueue[SubscriberReport] = ctx.Queue()
    procs = [
        ctx.Process(
            target=_fanout_process_main,
            args=(spec, n, barrier, published, reports),
            daemon=True,
        )
        for n in shares
    ]
    for p in procs:
        p.start()
    try:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(BARRIER_TIMEOUT)
        first, publish_s, sent = asyncio.run(_publish_all(spec))
        published.value = sent
        got = [reports.get(timeout=BARRIER_TIMEOUT + IDLE_S * 4) for _ in procs]
        for p in procs:
            p.join(30)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
    errors = [r.error for r in got if r.error]
    if errors:
        raise RuntimeError(f"{spec.system} subscriber failed:\n{errors[0]}")
    received = [n for r in got for n in r.received]
    distinct = [n for r in got for n in r.distinct]
    latencies = [x for r in got for x in r.latencies]
    last = max(r.last for r in got)
    return FanoutPoint(
        system=spec.system,
        subscribers=spec.subscribers,
        messages=sent,
        publish_s=publish_s,
        delivered=sum(received),
        elapsed_s=last - first if last else 0.0,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        lost=sum(sent - d for d in distinct),
        duplicates=sum(r - d for r, d in zip(received, distinct, strict=True)),
        gaps=sum(r.gaps for r in got),
        busy=busy,
    )


def nats_available() -> str | None:
    """None when NATS answers, else why it is skipped."""
    try:
        import nats
    except ImportError:
        return "nats-py not installed (pip install -e '.[bench]')"

    async def probe() -> None:
        nc = await nats.connect(NATS_URL, connect_timeout=2, max_reconnect_attempts=0)
        await nc.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        return f"NATS at {NATS_URL} not reachable ({type(exc).__name__}: {exc})"
    return None


def fanout(
    server: Server, subscribers: Sequence[int], messages: int, seconds: float, quiet_wait: float
) -> list[FanoutPoint]:
    systems = ["pgenough", "notify"]
    why = nats_available()
    if why:
        print(f"fanout: nats skipped: {why}")
    else:
        systems.append("nats")
    url = server.database("boundary_fanout")
    asyncio.run(_migrate(url))  # publish() of large payloads needs pgenough.messages
    print(
        f"fanout: up to {messages:,} messages of {MESSAGE_BYTES} bytes or {seconds:g} s of "
        f"publishing per point, subscribers "
        f"{list(subscribers)}, systems {systems}, up to {MAX_PROCESSES} subscriber processes\n"
    )
    ctx = multiprocessing.get_context("spawn")
    points = []
    for variant in PUBLISHER_ONLY:
        busy = wait_quiet(quiet_wait)
        point = run_fanout_point(ctx, FanoutSpec(variant, url, 0, messages, seconds), busy)
        points.append(point)
        print(
            f"{variant} publisher alone: {point.publish_rate:>9,.0f} msgs/s, "
            f"before: {fmt_busy(busy)}",
            flush=True,
        )
    for system in systems:
        for s in (0, *subscribers):
            busy = wait_quiet(quiet_wait)
            point = run_fanout_point(ctx, FanoutSpec(system, url, s, messages, seconds), busy)
            points.append(point)
            if s == 0:
                print(
                    f"{system:>8} publisher alone: {point.publish_rate:>9,.0f} msgs/s, "
                    f"before: {fmt_busy(busy)}",
                    flush=True,
                )
                continue
            if point.refused:
                print(f"{system:>8} S={s:>2}: REFUSED: {point.refused}", flush=True)
                continue
            print(
                f"{system:>8} S={s:>2}: delivered {point.delivered_rate:>9,.0f} msgs/s, publish "
                f"{point.publish_rate:>8,.0f} msgs/s, latency p50 {point.p50_ms:8.1f} ms p99 "
                f"{point.p99_ms:8.1f} ms, lost {point.lost}, dup {point.duplicates}, gaps "
                f"{point.gaps}, before: {fmt_busy(busy)}",
                flush=True,
            )
    return points


async def _migrate(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn)


def report_fanout(points: Sequence[FanoutPoint]) -> None:
    print("\n## Pub/sub fan-out (one publisher; delivered = all subscribers' receipts)\n")
    rows = []
    for p in points:
        if p.subscribers == 0:
            continue
        if p.refused:
            rows.append([p.system, str(p.subscribers), "REFUSED", "", "", "", "", "", p.refused])
            continue
        rows.append(
            [
                p.system,
                str(p.subscribers),
                f"{p.delivered_rate:,.0f}",
                f"{p.publish_rate:,.0f}",
                f"{p.p50_ms:.1f}",
                f"{p.p99_ms:.1f}",
                f"{p.lost}",
                f"{p.duplicates}",
                fmt_busy(p.busy),
            ]
        )
    print(
        table(
            [
                "system",
                "subs",
                "delivered/s",
                "publish/s",
                "p50 ms",
                "p99 ms",
                "lost",
                "dup",
                "before",
            ],
            rows,
        )
    )
    alone = {p.system: p.publish_rate for p in points if p.subscribers == 0}
    print(
        "\npublisher alone (no subscriber): "
        + ", ".join(f"{s} {r:,.0f} msgs/s" for s, r in alone.items())
    )
    base = {p.subscribers: p for p in points if p.system == "notify" and not p.refused}
    ratios = [
        f"S={p.subscribers}: {p.delivered_rate / base[p.subscribers].delivered_rate:.2f}x"
        for p in points
        if p.system == "pgenough"
        and not p.refused
        and p.subscribers in base
        and base[p.subscribers].delivered_rate
    ]
    print("pgenough / plain LISTEN-NOTIFY, delivered: " + ", ".join(ratios))


def load_note(busy: Sequence[float | None]) -> str:
    """What the image says about other load on the machine while it was measured."""
    noisy = sum(1 for b in busy if b is not None and b > QUIET_BUSY)
    if not noisy:
        return "machine idle before every point"
    return (
        f"measured with other work running: CPU >{QUIET_BUSY:.0%} busy before {noisy} of "
        f"{len(busy)} points"
    )


def plot_fanout(points: Sequence[FanoutPoint], path: Path, note: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, lat) = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = {"pgenough": "pgenough pub/sub", "notify": "plain LISTEN/NOTIFY", "nats": "NATS core"}
    systems = dict.fromkeys(p.system for p in points if p.subscribers > 0)
    for system, color in zip(systems, ("C0", "C1", "C2", "C3"), strict=False):
        pts = [p for p in points if p.system == system and p.subscribers > 0 and not p.refused]
        xs = [p.subscribers for p in pts]
        name = labels.get(system, system)
        ax.plot(xs, [p.delivered_rate for p in pts], marker="o", color=color, label=name)
        ax.plot(
            xs,
            [p.publish_rate for p in pts],
            marker=".",
            ls="--",
            color=color,
            label=f"{name}: published/s",
        )
        lat.plot(xs, [p.p99_ms for p in pts], marker="o", color=color, label=f"{name} p99")
        lat.plot(xs, [p.p50_ms for p in pts], marker=".", ls=":", color=color, label=f"{name} p50")
        lost = [p for p in pts if p.lost]
        if lost:
            ax.scatter(
                [p.subscribers for p in lost],
                [p.delivered_rate for p in lost],
                marker="x",
                s=80,
                color="red",
                zorder=5,
            )
    for a in (ax, lat):
        a.set_xscale("log", base=2)
        a.set_xticks([p.subscribers for p in points if p.subscribers > 0])
        a.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        a.set_xlabel("subscribers (one connection each)")
        a.grid(True, alpha=0.3)
    ax.set_yscale("log")
    top = max((p.delivered_rate for p in points if p.subscribers > 0), default=1.0)
    ax.set_ylim(top=max(top, 1.0) * 30)  # room for the legend above the curves
    ax.set_ylabel("messages/s (solid: delivered to all subscribers)")
    ax.set_title("Fan-out throughput (red x: messages lost)")
    lat.set_yscale("log")
    lat.set_ylabel("publish-to-receipt latency, ms")
    lat.set_title("Delivery latency")
    ax.legend(fontsize=6.5, loc="upper left", ncol=2)
    lat.legend(fontsize=7)
    fig.suptitle(
        "; ".join(
            x
            for x in (
                f"Pub/sub fan-out, one publisher, {MESSAGE_BYTES}-byte messages",
                note,
                load_note([p.busy for p in points]),
            )
            if x
        ),
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"\nwrote {path}")


# -- connections vs workers, and PgBouncer -------------------------------------------------------


@dataclass
class ConnPoint:
    mode: str
    workers: int
    jobs: int
    idle_conns: int
    """Server connections of the database once every worker has started, before the jobs."""
    peak_conns: int
    """Most server connections of the database seen during the drain."""
    peak_all: int
    """Most client backends of the whole server seen during the drain (other work included)."""
    wake_s: float
    drain_s: float
    exit_codes: list[int]
    error_lines: list[str]
    busy: float | None
    left: int = 0
    """Jobs still in the table when the drain gave up (DRAIN_TIMEOUT): 0 for a full drain."""
    refused: str | None = None
    """Set when a worker could not start because the server refused its connections."""

    @property
    def rate(self) -> float:
        return self.jobs / self.drain_s if self.drain_s > 0 else 0.0

    @property
    def per_worker(self) -> float:
        return self.peak_conns / self.workers


class PgBouncer:
    """A PgBouncer of our own, in transaction pooling mode, in front of ``server_url``."""

    def __init__(self, server_url: str, pool_size: int) -> None:
        binary = shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
        )
        if binary is None:
            raise FileNotFoundError("pgbouncer not installed (apt-get install -y pgbouncer)")
        self.binary = binary
        self.server = conninfo_to_dict(server_url)
        self.pool_size = pool_size
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="boundary-pgbouncer-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, dbname: str) -> str:
        params = {**self.server, "host": "127.0.0.1", "port": str(self.port), "dbname": dbname}
        return make_conninfo(**params)

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True)
        return out.stdout.splitlines()[0] if out.stdout else "?"

    def start(self) -> None:
        user = self.server.get("user") or "postgres"
        (self.dir / "users.txt").write_text(f'"{user}" ""\n')
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={self.server.get('host', '127.0.0.1')}"
            f" port={self.server.get('port', 5432)}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 2000\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
            f"pidfile = {self.dir / 'pgbouncer.pid'}\n"
            f"unix_socket_dir = {self.dir}\n"
            # psycopg sets these at connect; PgBouncer must let them through.
            "ignore_startup_parameters = extra_float_digits,options\n"
            + ("user = postgres\n" if os.geteuid() == 0 else "")
        )
        if os.geteuid() == 0:  # PgBouncer refuses to run as root: it switches to `user`
            shutil.chown(self.dir, "postgres")
            for f in self.dir.iterdir():
                shutil.chown(f, "postgres")
        self.proc = subprocess.Popen([self.binary, str(ini)], stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            try:
                with psycopg.connect(
                    self.url(self.server.get("dbname", "postgres")), connect_timeout=2
                ):
                    return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                    log = self.dir / "pgbouncer.log"
                    tail = log.read_text()[-2000:] if log.exists() else ""
                    raise RuntimeError(f"pgbouncer did not start: {err}\n{tail}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # SIGINT: PgBouncer's immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def _count(conn: psycopg.Connection[Any], dbname: str) -> tuple[int, int]:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE datname = %s),"
        " count(*) FILTER (WHERE backend_type = 'client backend') FROM pg_stat_activity",
        (dbname,),
    ).fetchone()
    assert row is not None
    return int(row[0]) - 1, int(row[1])  # not the sampling connection itself


def start_workers(
    url: str, workers: int, logdir: Path, extra_env: dict[str, str]
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    env = {
        **os.environ,
        **extra_env,
        "DATABASE_URL": url,
        "PGENOUGH_LOG_LEVEL": "INFO",
        "PGENOUGH_CONFIG": str(logdir / "none.toml"),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")) if p
        ),
    }
    (logdir / "none.toml").write_text("")
    out = []
    for i in range(workers):
        log = logdir / f"worker-{i}.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pgenough", "worker", "run", TASKS_APP],
                cwd=ROOT,
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        out.append((proc, log))
    return out


def _started(log: Path) -> bool:
    return STARTED_MARK in log.read_text(errors="replace")


def _error_lines(log: Path) -> list[str]:
    keep = ("ERROR", "Error", "error:", "WARNING", "Traceback")
    return [
        line.strip()
        for line in log.read_text(errors="replace").splitlines()
        if any(k in line for k in keep)
    ]


def run_conn_point(
    mode: str,
    worker_url: str,
    direct_url: str,
    dbname: str,
    workers: int,
    jobs: int,
    quiet_wait: float,
    extra_env: dict[str, str],
) -> ConnPoint:
    logdir = Path(tempfile.mkdtemp(prefix="boundary-workers-"))
    procs = start_workers(worker_url, workers, logdir, extra_env)
    try:
        with psycopg.connect(direct_url, autocommit=True) as mon:
            deadline = time.monotonic() + START_TIMEOUT
            while not all(_started(log) for _, log in procs):
                dead = [log for p, log in procs if p.poll() is not None]
                if dead:
                    raise RuntimeError(f"a worker exited at start:\n{dead[0].read_text()[-3000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError("workers did not start in time")
                time.sleep(0.1)
            time.sleep(1.0)  # the listeners connect after the start line
            idle, _ = _count(mon, dbname)
            busy = wait_quiet(quiet_wait)
            with psycopg.connect(direct_url) as conn:
                noop.enqueue_many(conn, ({"n": i} for i in range(jobs)))
                conn.commit()
            committed = time.perf_counter()
            first = end = 0.0
            left = jobs
            peak = peak_all = 0
            stop_at = time.monotonic() + DRAIN_TIMEOUT
            while time.monotonic() < stop_at:
                row = mon.execute(
                    "SELECT count(*) FILTER (WHERE state = 'ready'), count(*) FROM pgenough.jobs"
                ).fetchone()
                assert row is not None
                now = time.perf_counter()
                ready, left = int(row[0]), int(row[1])
                if not first and ready < jobs:
                    first = now
                c, a = _count(mon, dbname)
                peak, peak_all = max(peak, c), max(peak_all, a)
                if left == 0:
                    end = now
                    break
                time.sleep(SAMPLE_S)
            # else: a stuck drain (end stays 0) is reported with the workers' error lines
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, _ in procs:
            try:
                p.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
    errors = [line for _, log in procs for line in _error_lines(log)]
    shutil.rmtree(logdir, ignore_errors=True)
    return ConnPoint(
        mode=mode,
        workers=workers,
        jobs=jobs,
        idle_conns=idle,
        peak_conns=peak,
        peak_all=peak_all,
        wake_s=first - committed,
        drain_s=end - first,
        exit_codes=[int(p.returncode) for p, _ in procs],
        error_lines=errors,
        busy=busy,
    )


@dataclass
class PoolerChecks:
    listen_direct: int = 0
    listen_pooled: int = 0
    lock_direct: tuple[bool, bool] = (False, False)
    lock_pooled: tuple[bool, bool] = (False, False)
    prepared_error: str | None = None
    notes: list[str] = field(default_factory=list)


async def _listen_check(listen_url: str, publish_url: str, n: int) -> int:
    got = 0
    async with subscribe(listen_url, CHANNEL, ping_interval=0.5) as sub:

        async def count() -> None:
            nonlocal got
            async for item in sub:
                if not isinstance(item, Gap):
                    got += 1

        task = asyncio.create_task(count())
        async with await psycopg.AsyncConnection.connect(publish_url, autocommit=True) as pub:
            for i in range(n):
                await publish(pub, CHANNEL, f"check {i}")
        await asyncio.sleep(2.0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return got


def _lock_check(url: str) -> tuple[bool, bool]:
    """Two sessions try the same session-level advisory lock: (first got it, second got it)."""
    key = 424242
    with psycopg.connect(url, autocommit=True) as a, psycopg.connect(url, autocommit=True) as b:
        got_a = bool(a.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])  # type: ignore[index]
        got_b = bool(b.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0])  # type: ignore[index]
        for c in (a, b):
            c.execute("SELECT pg_advisory_unlock_all()")
    return got_a, got_b


def _prepared_check(url: str) -> str | None:
    """psycopg prepares a query server-side after ``prepare_threshold`` (5) runs; through
    transaction pooling the next run may land on a server connection that never saw it."""
    try:
        with psycopg.connect(url, autocommit=True) as a, psycopg.connect(url, autocommit=True) as b:
            for i in range(20):
                for c in (a, b):
                    c.execute("SELECT %s::int + 1", (i,)).fetchone()
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return None


def pooler_checks(pooled_url: str, direct_url: str) -> PoolerChecks:
    checks = PoolerChecks()
    checks.listen_direct = asyncio.run(_listen_check(direct_url, direct_url, 20))
    checks.listen_pooled = asyncio.run(_listen_check(pooled_url, direct_url, 20))
    checks.lock_direct = _lock_check(direct_url)
    checks.lock_pooled = _lock_check(pooled_url)
    checks.prepared_error = _prepared_check(pooled_url)
    return checks


def connections(
    server: Server, workers: Sequence[int], jobs: int, pool_size: int, quiet_wait: float
) -> tuple[list[ConnPoint], PoolerChecks | None, str]:
    points: list[ConnPoint] = []
    modes: list[tuple[str, PgBouncer | None]] = [("direct", None)]
    bouncer_note = ""
    try:
        bouncer = PgBouncer(server.admin_url, pool_size)
        bouncer.start()
        bouncer_note = f"{bouncer.version()}, transaction pooling, default_pool_size {pool_size}"
        modes.append(("pgbouncer", bouncer))
    except (FileNotFoundError, RuntimeError) as exc:
        bouncer_note = f"skipped: {exc}"
        print(f"connections: pgbouncer {bouncer_note}")
    print(
        f"connections: workers {list(workers)}, {jobs:,} jobs per drain, max_connections "
        f"{server.settings['max_connections']}; pgbouncer: {bouncer_note}\n"
    )
    checks = None
    try:
        for mode, bouncer in modes:
            direct = server.database(f"boundary_conn_{mode}")
            dbname = conninfo_to_dict(direct)["dbname"]
            asyncio.run(_migrate(direct))
            worker_url = bouncer.url(dbname) if bouncer else direct
            if bouncer:
                checks = pooler_checks(worker_url, direct)
            # PgBouncer 1.18 cannot carry psycopg's server-side prepared statements in
            # transaction pooling (pooler_checks shows the error): the setting made for it.
            extra = {"PGENOUGH_PREPARED_STATEMENTS": "false"} if bouncer else {}
            for w in workers:
                try:
                    point = run_conn_point(
                        mode, worker_url, direct, dbname, w, jobs, quiet_wait, extra
                    )
                except RuntimeError as exc:
                    if TOO_MANY not in str(exc):
                        raise
                    why = f"a worker's connection was refused ({TOO_MANY}, max_connections)"
                    points.append(
                        ConnPoint(mode, w, jobs, 0, 0, 0, 0.0, 0.0, [], [], None, refused=why)
                    )
                    print(f"{mode:>9} W={w:>2}: REFUSED: {why}", flush=True)
                    continue
                points.append(point)
                print(
                    f"{mode:>9} W={w:>2}: server conns idle {point.idle_conns:>3}, peak "
                    f"{point.peak_conns:>3} ({point.per_worker:.1f}/worker; whole server "
                    f"{point.peak_all}), drain {point.rate:>8,.0f} jobs/s"
                    f"{f' STUCK, {point.left} left' if point.left else ''}, wake "
                    f"{point.wake_s * 1000:6.0f} ms, exits {sorted(set(point.exit_codes))}, "
                    f"{len(point.error_lines)} error/warning line(s), "
                    f"before: {fmt_busy(point.busy)}",
                    flush=True,
                )
                for line in dict.fromkeys(point.error_lines[:3]):
                    print(f"           {line[:200]}")
    finally:
        for _, bouncer in modes:
            if bouncer:
                bouncer.stop()
    return points, checks, bouncer_note


def report_connections(
    points: Sequence[ConnPoint], checks: PoolerChecks | None, max_connections: str
) -> None:
    print(f"\n## Server connections vs worker processes (max_connections {max_connections})\n")
    rows = [
        [p.mode, str(p.workers), "REFUSED", "", "", "", "", "", "", p.refused]
        if p.refused
        else [
            p.mode,
            str(p.workers),
            str(p.idle_conns),
            str(p.peak_conns),
            f"{p.per_worker:.1f}",
            str(p.peak_all),
            f"{p.rate:,.0f}",
            f"{p.wake_s * 1000:.0f}",
            str(len(p.error_lines)),
            fmt_busy(p.busy),
        ]
        for p in points
    ]
    print(
        table(
            [
                "mode",
                "W",
                "idle conns",
                "peak conns",
                "per worker",
                "server all",
                "drain jobs/s",
                "wake ms",
                "err lines",
                "before",
            ],
            rows,
        )
    )
    direct = {p.workers: p for p in points if p.mode == "direct"}
    ratios = [
        f"W={p.workers}: {p.rate / direct[p.workers].rate:.2f}x"
        for p in points
        if p.mode == "pgbouncer" and p.workers in direct and direct[p.workers].rate
    ]
    if ratios:
        print("\npgbouncer / direct drain: " + ", ".join(ratios))
    if checks:
        print(
            f"\nthrough pgbouncer (transaction pooling):\n"
            f"- subscribe(): {checks.listen_pooled} of 20 messages received "
            f"(direct: {checks.listen_direct} of 20)\n"
            f"- session advisory lock tried by two sessions: first {checks.lock_pooled[0]}, "
            f"second {checks.lock_pooled[1]} (direct: {checks.lock_direct[0]}, "
            f"{checks.lock_direct[1]})\n"
            f"- automatic prepared statements: "
            f"{checks.prepared_error or 'no error in 40 runs on two sessions'}"
        )


def plot_connections(
    points: Sequence[ConnPoint], path: Path, max_connections: int, pool_size: int, note: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, rate) = plt.subplots(1, 2, figsize=(11, 4.5))
    for mode, color in zip(dict.fromkeys(p.mode for p in points), ("C0", "C1"), strict=False):
        pts = [p for p in points if p.mode == mode and not p.refused]
        xs = [p.workers for p in pts]
        label = "direct" if mode == "direct" else f"PgBouncer ({pool_size})"
        ax.plot(xs, [p.peak_conns for p in pts], marker="o", color=color, label=f"{label}: peak")
        ax.plot(
            xs, [p.idle_conns for p in pts], marker=".", ls=":", color=color, label=f"{label}: idle"
        )
        ax.plot(
            xs,
            [p.peak_all for p in pts],
            marker="x",
            ls="--",
            lw=0.8,
            color=color,
            label=f"{label}: server total",
        )
        rate.plot(xs, [p.rate for p in pts], marker="o", color=color, label=label)
    ax.axhline(max_connections, color="red", ls="--", lw=1, label="max_connections")
    for a in (ax, rate):
        a.set_xscale("log", base=2)
        a.set_xticks(sorted({p.workers for p in points}))
        a.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        a.set_xlabel("worker processes (pgenough worker run)")
        a.grid(True, alpha=0.3)
    ax.set_ylim(0, max_connections * 1.6)  # room for the legend above max_connections
    ax.set_ylabel("server connections")
    ax.set_title("PostgreSQL connections vs workers")
    rate.set_ylabel("drain jobs/s")
    rate.set_title("Drain rate, direct vs through the pooler")
    rate.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    rate.legend(fontsize=8)
    fig.suptitle(
        "; ".join(
            x
            for x in (
                "Connections and pooling, no-op jobs",
                note,
                load_note([p.busy for p in points]),
            )
            if x
        ),
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"\nwrote {path}")


# -- main ------------------------------------------------------------------------------------------

SUBBENCHMARKS = ("fanout", "connections")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.boundary", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument(
        "which",
        nargs="*",
        default=[],
        help="sub-benchmarks to run: fanout, connections (default: both)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 200 messages, subscribers 1,4,16; workers 1,4; 1,000 jobs",
    )
    parser.add_argument("--messages", type=int, default=None, help="per fan-out point (2000)")
    parser.add_argument(
        "--seconds", type=float, default=None, help="most publishing per fan-out point (5)"
    )
    parser.add_argument("--jobs", type=int, default=None, help="per drain (default 5000)")
    parser.add_argument("--pool-size", type=int, default=8, help="PgBouncer default_pool_size")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="embedded server")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=10.0,
        help="before each measurement, wait up to this many seconds for an idle machine",
    )
    parser.add_argument(
        "--plot-fanout",
        type=Path,
        default=None,
        help="PNG of the fan-out (e.g. docs/img/boundary-fanout.png); none without it",
    )
    parser.add_argument(
        "--plot-connections",
        type=Path,
        default=None,
        help="PNG of connections vs workers (e.g. docs/img/boundary-connections.png)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument(
        "--replot",
        type=Path,
        default=None,
        help="only render the images asked for (--plot-*) from a --json file",
    )
    return parser.parse_args(argv)


@contextlib.contextmanager
def open_server(data_dir: Path) -> Iterator[Server]:
    server = Server.under_test(data_dir)
    try:
        yield server
    finally:
        server.drop_all()


def replot(path: Path, fanout_png: Path | None, connections_png: Path | None) -> None:
    """Render the images asked for again from a ``--json`` file, without measuring anything."""
    if not fanout_png and not connections_png:
        sys.exit("--replot draws what --plot-fanout / --plot-connections name: give one")
    saved = json.loads(path.read_text())
    note = saved.get("note", "")
    fanout_fields = {f.name for f in fields(FanoutPoint)}
    conn_fields = {f.name for f in fields(ConnPoint)}
    if "fanout" in saved and fanout_png:
        points = [
            FanoutPoint(**{k: v for k, v in p.items() if k in fanout_fields})
            for p in saved["fanout"]["points"]
        ]
        plot_fanout(points, fanout_png, note)
    if "connections" in saved and connections_png:
        cpoints = [
            ConnPoint(**{k: v for k, v in p.items() if k in conn_fields})
            for p in saved["connections"]["points"]
        ]
        plot_connections(
            cpoints,
            connections_png,
            int(saved["settings"]["max_connections"]),
            int(saved["connections"].get("pool_size", 8)),
            note,
        )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.boundary")
    if args.replot:
        replot(args.replot, args.plot_fanout, args.plot_connections)
        return
    which = args.which or list(SUBBENCHMARKS)
    unknown = set(which) - set(SUBBENCHMARKS)
    if unknown:
        sys.exit(f"unknown sub-benchmark(s) {sorted(unknown)}; choose from {SUBBENCHMARKS}")
    subscribers = (1, 4, 16) if args.quick else (1, 2, 4, 8, 16, 32, 64)
    messages = args.messages or (200 if args.quick else 2_000)
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    workers = (1, 4) if args.quick else (1, 2, 4, 8, 16)
    jobs = args.jobs or (1_000 if args.quick else 5_000)
    note = f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}"
    results: dict[str, Any] = {"note": note}
    with open_server(args.data_dir) as server:
        print(f"server: {server.description}")
        print("settings: " + ", ".join(f"{k}={v}" for k, v in server.settings.items()))
        print(
            f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python "
            f"{platform.python_version()}; pgenough {version_of('pgenough')}, psycopg "
            f"{version_of('psycopg')}, nats-py {version_of('nats-py')}, matplotlib "
            f"{version_of('matplotlib')}\n"
        )
        results["settings"] = server.settings
        if "fanout" in which:
            began = time.perf_counter()
            points = fanout(server, subscribers, messages, seconds, args.quiet_wait)
            report_fanout(points)
            if args.plot_fanout:
                plot_fanout(points, args.plot_fanout, note)
            took = time.perf_counter() - began
            print(f"fanout took {took:.0f} s\n")
            results["fanout"] = {
                "messages": messages,
                "publish_seconds": seconds,
                "seconds": took,
                "points": [
                    {
                        **asdict(p),
                        "delivered_rate": p.delivered_rate,
                        "publish_rate": p.publish_rate,
                    }
                    for p in points
                ],
            }
        if "connections" in which:
            began = time.perf_counter()
            cpoints, checks, bouncer = connections(
                server, workers, jobs, args.pool_size, args.quiet_wait
            )
            report_connections(cpoints, checks, server.settings["max_connections"])
            if args.plot_connections:
                plot_connections(
                    cpoints,
                    args.plot_connections,
                    int(server.settings["max_connections"]),
                    args.pool_size,
                    note,
                )
            took = time.perf_counter() - began
            print(f"connections took {took:.0f} s")
            results["connections"] = {
                "jobs": jobs,
                "pool_size": args.pool_size,
                "seconds": took,
                "pgbouncer": bouncer,
                "points": [{**asdict(p), "rate": p.rate} for p in cpoints],
                "checks": asdict(checks) if checks else None,
            }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
