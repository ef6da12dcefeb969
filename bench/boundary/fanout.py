"""``bench.boundary fanout``: one publisher, N subscribers spread over processes, on
pgenough's pub/sub (each delivery mode) and on NATS core; delivery, throughput and latency per
point, and its report."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from typing import Any

import psycopg
from bench.boundary import TOO_MANY
from bench.harness.machine import fmt_busy, wait_quiet
from bench.harness.processes import stop_processes
from bench.harness.report import percentile, table
from bench.harness.server import Server
from bench.harness.systems.nats import NATS_URL
from bench.harness.systems.ours import setup_ours

from pgenough.core import Gap, publish, subscribe

CHANNEL = "boundary_fanout"
MESSAGE_BYTES = 64
IDLE_S = 5.0
"""A subscriber that got nothing for this long stops (and counts what it missed)."""
BARRIER_TIMEOUT = 120.0
MAX_PROCESSES = 4
PUB_BATCH = 100
PUB_BATCHED = "pgenough-100-per-tx"
PUB_ASYNC_COMMIT = "pgenough-async-commit"
PUBLISHER_ONLY = (PUB_BATCHED, PUB_ASYNC_COMMIT)
"""Publisher-alone variants: what one NOTIFY transaction per message costs (its commit)."""


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
    finally:
        stop_processes(procs)
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
    setup_ours(url)  # publish() of large payloads needs pgenough.messages
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
