"""HTTP API benchmark: ``pgenough api`` serving ``GET /search`` from 1M plans, under ``wrk``.

Run it from the repository root, with the project's virtualenv and ``wrk`` installed
(``apt-get install -y wrk``)::

    .venv/bin/python -m bench.api              # 1M plans, 10 s per scenario, embedded server
    .venv/bin/python -m bench.api --quick      # 100k plans, 3 s per scenario: a smoke run
    .venv/bin/python -m bench.api --plot-search docs/img/boundary-search.png  # curve drawn
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.api
    # during ingestion only the shared placement, unpaced and paced; no curve:
    .venv/bin/python -m bench.api --skip-curve --placements shared --cells 2

(``make bench-api`` runs the third line: everything, the curve drawn. A full run at 1M plans:
about 13-15 min on a quiet 2-core machine, estimated; 21 min at 200k plans under load.)
Run it as a module: ``python bench/api.py`` puts
``bench/`` first on ``sys.path``, where ``bench/queue.py`` shadows the standard library's
``queue`` and psycopg fails to import. With
``DATABASE_URL`` a fresh database is created on that server; without it, on the embedded
server started in ``.pgenough-bench/``. It is dropped at the end unless ``--keep``.

Setup (untimed, except the load, whose time is printed):

1. A fresh database, migrated.
2. **Load**: ``--plans`` plans (default 1,000,000) through the real ingestion path: the
   simulator as its own process (``pgenough provider-sim --plans N --port 0 --seed 1``), then
   ``pgenough worker fetch --once --provider sim=<url>?version=1``, then ``pgenough worker
   process --until-idle --concurrency 2`` (as ``bench/ingest.py`` does, whose helpers this
   script imports). The simulator's plans start on days spread over 2021-2022; ~90% are
   ever online. Then ``VACUUM ANALYZE plans.plans``. Autovacuum is on for the whole run,
   as users run it: on a server that has it off (the PostgreSQL 15 server here runs with
   ``autovacuum=off``) the benchmark turns it on with ``ALTER SYSTEM SET autovacuum = on``
   and a reload and resets it at the end, as ``bench/steady.py`` does (``--no-alter-system``
   stops instead).
3. ``pgenough api --port P`` as its own process (one uvicorn worker, ``DATABASE_URL`` in its
   environment, every other setting at its default except ``PGENOUGH_API_CACHE_TTL=60`` so
   that the hot scenario's cached first pages outlive it). Ready when ``/health/ready``
   answers 200.

Scenarios (each ``--duration`` seconds; load generator ``wrk -t1 -c64 --latency
--timeout 5s`` with a Lua script that builds every request; a Lua ``done`` hook prints
wrk's exact figures as JSON):

Every ``/search`` the wrk scenarios send has ``limit=50``: the page size these scenarios have
always measured (``/search``'s default before it answered every event without ``limit``).

- ``trivial``: ``GET /health/live`` (a constant body, no database): the framework ceiling.
- ``hot``: five fixed first-page ranges (offset 0, 1-30 day windows), cycled; each is
  requested once before the clock starts, so every timed request is a cache hit (steady
  state; the cache has no single-flight, so a cold start under 64 connections sends up to 8
  identical searches to PostgreSQL and answers the rest 503 until the first one lands).
- ``cold``: random windows: ``starts_at`` a random second in 2021-01-01..2022-12-31,
  ``ends_at`` 1-30 days (a random number of seconds) later, ``offset`` random in 0..1000;
  the cache cannot hit (checked with ``/metrics``: cache hits during the scenario).
- ``cold@1000``: the same requests at a fixed rate of 1,000 requests/s. wrk has no rate
  option (wrk2 is not in Debian), so the Lua ``delay()`` hook (called between a response and
  its connection's next request) reserves the next free 1 ms slot on one schedule shared by
  the 64 connections (a monotonic clock read through LuaJIT's FFI) and waits for it; the
  first request of each connection is sent at once. The achieved rate is printed: it falls
  short only when all 64 connections are waiting for answers. Latency is measured from each
  request's send (no coordinated-omission correction: a request is late only if all 64
  connections were busy, which the achieved rate shows).
Then the whole ranges and deep pages below, and then **during ingestion** (issue 13 §4), per
**placement**:

- ``shared``: as a single small box runs it, every process wherever the kernel puts it on
  the two cores;
- ``pinned``: as a deployment would place it: the API process (every thread, with
  ``os.sched_setaffinity``) and wrk on the first CPU, the fetch and process workers and the
  simulator on the second (``sched_setaffinity`` in the child before ``exec``, inherited by
  its threads), PostgreSQL free on both (it serves both sides, so it cannot be placed with
  either). Skipped, with a note, on fewer than 2 CPUs.

For each: ``cold@1000 alone [placement]`` (the baseline of its ratios, measured placed), then
a new snapshot (``?version=k`` of the same ``--plans`` plans) fetched and then processed into
the same database, three times (*cells*): without pacing
(``PGENOUGH_INGEST_PACING_MAX_PAUSE=0`` in the workers' environment), with the product's
default pacing (the API publishes its bulkhead's pressure, the workers pause between chunks:
``src/pgenough/plans/pacing.py``), and with that pacing and ``PGENOUGH_INGEST_NICE=10`` (the
workers lower their own priority; the bench renices the simulator likewise, since it stands
for a provider on another machine). wrk runs
``cold@1000`` for the *whole* of each phase: started once the fetch's first COPY batch landed
(or the process's first chunk is claimed) and stopped with SIGINT when the phase's process
exits (wrk still reports everything), so the p99 and 503 share cover the phase and the
phase's own time is measured under that load: fetch s and process s (``plans.runs``), and
plans/s end to end = plans / (fetch s + process s).

Order and state: every ingestion rewrites the plans, so a cell measured after others would
meet their dead rows. Each measured cell (each ``alone`` baseline, each ingestion cell, each
curve point and the curve's ``alone``) therefore starts on a freshly vacuumed database:
``VACUUM (ANALYZE)`` of ``plans.plans``, ``plan_seen``, ``plan_failures`` and ``runs``
just before it (its time printed; autovacuum stays on). The ``alone``
baselines of every placement run first; then the cells run cell by cell, the placements
taking turns at going first (rotated: no pacing shared then pinned, default pacing pinned
then shared, pacing with nice shared then pinned), so neither placement always follows the
other's ingestion or always meets the machine first.

Then the **curve** (``--skip-curve`` leaves it out; ``--plot-search PNG`` draws it):
``/search`` p99 and 503 share at 1,000 cold/s against the fetch's rate, shared placement.
Each point: a fetch of a fresh snapshot under ``cold@1000`` for ``--duration`` s, then
stopped with SIGTERM (its run ends FAILED, its staging dropped); its rate is the rows COPYed
into staging during the window (``pg_stat_user_tables.n_tup_ins``, flushed by the backend
at most once a second). Two series: a *fixed throttle* (the bench publishes a pressure of 1
itself, so every COPY batch is followed by a pause of exactly ``max_pause``: 0, 0.05, 0.1,
0.25, 0.5 s; the API's own reports cannot change it) and the *pacing* (the API's pressure
alone sets each pause, bounded by ``max_pause``: 0.1, 0.25, 0.5, 1 s). Black: the same
requests with no ingestion, measured right after.

Then, without wrk:

- **whole ranges without limit**: one client reads ``/search?ends_at=E`` (E: the start of the
  10,001st event, so about 10,000 events) and then ``/search`` (every event of the table) to
  the end, counting events and bytes, while a thread samples the API process's ``VmRSS``
  every 10 ms: its RSS before and its peak, per range. Baseline in the same run: the same
  keyset pages read by psycopg straight from PostgreSQL (``raw pages``), so ``API / raw`` is
  what HTTP and the API add. Target: peak RSS for every event / for 10k <= 1.25 (flat).
- **deep pages** (``wrk -c1``: one client, closed loop, one fixed path each, so each figure
  is the cost of one search rather than the bulkhead's 503s): ``limit=50&offset=100000``
  against the same page by cursor (the ``after=`` of the Link of the page at offset 99,950;
  checked to be the same bytes), and ``offset=1`` (near the start, not cached) for scale.
  With ``--quick`` the depth is the number of events minus 50.

Figures per scenario:

- ``rps``: all responses / wrk's duration; ``2xx rps``: responses with status < 400.
- ``p50``, ``p99``, ``max``: wrk's latency distribution (all responses, 503s included), ms.
- ``non-2xx``: responses with status >= 400 (here: 503 ``TOO_BUSY`` when the bulkhead of
  ``PGENOUGH_API_MAX_CONCURRENT_SEARCHES`` = 8 searches is full); ``sock err``: connect,
  read, write errors and timeouts; ``cache h/m``: cache hits / misses during the scenario.

Ratios and targets: hot / trivial rps >= 0.7; cold@1000 p99 <= 50 ms; during ingestion, per
placement and pacing: no 503 at 1,000/s and p99 / alone p99 (same placement) <= 2, during the
fetch and during the process (the worse is judged); each with the ingestion's plans/s against
the unpaced one's.

Display: rates and ratios better-is-higher are truncated, latencies and ratios
better-is-lower rounded up (never in the flattering direction).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TypeVar

import psycopg
from bench.harness.api_process import CACHE_TTL, Api, http_get
from bench.harness.machine import (
    refuse_if_busy,
)
from bench.harness.plan_workers import (
    Phase,
    load,
    retried,
    staged_rows,
    vacuum_plans,
    wait_streaming,
)
from bench.harness.processes import (
    Simulator,
    pgenough_command,
)
from bench.harness.report import (
    down,
    print_target,
    up,
)
from bench.harness.server import (
    ServerUnderTest,
    autovacuum_on,
    migrate_database,
    server_facts,
)
from bench.harness.under_load import (
    Cell,
    ingest_cell,
    pacing_env,
    pin,
    placements,
    throttle,
)
from bench.harness.wrk import (
    CONNECTIONS,
    FIXED_RATE,
    PAGE,
    Result,
    run_wrk,
    show,
)

from pgenough.core.db import create_database, drop_database, with_database
from pgenough_plans.api.search import Q as SEARCH_Q
from pgenough_plans.api.search import SearchQuery, fetch_page
from pgenough_plans.ingest.defaults import DEFAULT_PACING_MAX_PAUSE

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = ROOT / ".pgenough-bench"
DEFAULT_PLANS = 1_000_000
QUICK_PLANS = 100_000
DEEP = 100_000  # the offset the cursor is compared at
SMALL_RANGE = 10_000  # events in the smaller streamed range
RSS_SAMPLE_EVERY = 0.01
TARGET_STREAM_RSS_GROWTH = 1.25

TARGET_HOT_RATIO = 0.7
TARGET_COLD_P99_MS = 50.0
TARGET_INGEST_RATIO = 2.0

THROTTLED = "fixed throttle"
PACED = "pacing"
NICE = 10
CELLS = ((0.0, 0), (DEFAULT_PACING_MAX_PAUSE, 0), (DEFAULT_PACING_MAX_PAUSE, NICE))
"""The ingestion cells of each placement, (max_pause, nice): none, the product's default
pacing, and that pacing with the workers (and the simulator) at niceness NICE."""
CURVE = (
    (THROTTLED, (0.0, 0.05, 0.1, 0.25, 0.5)),
    (PACED, (0.1, 0.25, 0.5, 1.0)),
)
"""The curve's fetches: a fixed pause per COPY batch, and the pacing at several bounds."""


# --- results ----------------------------------------------------------------------------------


# --- the API process and wrk ------------------------------------------------------------------


# --- loading and ingesting --------------------------------------------------------------------


@dataclass
class Point:
    """One point of the curve: /search at 1,000/s during a fetch held at some rate."""

    series: str
    max_pause: float
    rate: float
    result: Result


def curve_point(
    api: Api,
    url: str,
    plans: int,
    series: str,
    max_pause: float,
    duration: int,
    tmp: Path,
    seed: int,
) -> Point:
    """A fetch of a fresh snapshot under cold@1000 for ``duration`` s, then stopped (its run
    FAILED, its staging dropped). ``THROTTLED``: a pressure of 1 published by the bench
    itself holds every pause at ``max_pause`` whatever the API says (a fixed throttle);
    ``PACED``: the API's own pressure sets each pause (the pacing). The rate is the rows
    COPYed into staging during the window."""
    env = pacing_env(url, max_pause)
    pin(api.proc.pid, None)
    with psycopg.connect(url, autocommit=True) as conn:
        if series == THROTTLED and max_pause:
            asyncio.run(throttle(url, True))
        with (tmp / "curve.log").open("ab") as log:
            sim = Simulator(plans, log, env, tmp)
            fetch: Phase | None = None
            try:
                fetch = Phase(
                    "fetch",
                    [
                        pgenough_command(),
                        "worker",
                        "fetch",
                        "--once",
                        "--provider",
                        f"sim={sim.url}?version=9",
                    ],
                    env,
                    log,
                    tmp,
                )
                wait_streaming(url, fetch)
                rows0, t0 = staged_rows(conn), time.monotonic()
                name = f"{series} {max_pause:g}s" if max_pause else f"{series} (none)"
                r = run_wrk(
                    api, f"cold@1000 during fetch, {name}", "cold", duration, tmp, seed, FIXED_RATE
                )
                rows1, t1 = staged_rows(conn), time.monotonic()
                r.note = fetch.covered(t0, t1)
            finally:
                if fetch is not None:
                    fetch.proc.send_signal(signal.SIGTERM)
                    fetch.join(60)
                sim.stop()
                asyncio.run(throttle(url, False))
    point = Point(series, max_pause, (rows1 - rows0) / (t1 - t0), r)
    show(r)
    print(f"    fetch rate during the window: {down(point.rate)} plans/s", flush=True)
    return point


def during_ingestion(
    api: Api,
    url: str,
    plans: int,
    tmp: Path,
    duration: int,
    only: frozenset[str] | None = None,
    cells_per_placement: int = len(CELLS),
) -> tuple[dict[str, Result], list[Cell]]:
    """cold@1000 alone (per placement), then through a fetch and a process of a new snapshot
    per placement, without pacing and with it (``only`` these placements, the first
    ``cells_per_placement`` of CELLS)."""
    alone: dict[str, Result] = {}
    cells: list[Cell] = []
    version = 2
    order = [p for p in placements() if only is None or p.name in only]
    for placement in order:
        vacuum_plans(url)
        pin(api.proc.pid, placement.api)
        r = run_wrk(
            api,
            f"cold@1000 alone [{placement.name}]",
            "cold",
            duration,
            tmp,
            6,
            FIXED_RATE,
            cpus=placement.api,
        )
        show(r)
        alone[placement.name] = r
    for i, (max_pause, nice) in enumerate(CELLS[:cells_per_placement]):
        # Placements take turns going first (rotated per cell), each cell on a freshly
        # vacuumed database: no placement inherits the others' dead rows or goes first always.
        turn = order[i % len(order) :] + order[: i % len(order)] if order else []
        for placement in turn:
            vacuum_plans(url)
            cells.append(
                retried(
                    f"v{version}",
                    partial(ingest_cell, api, url, plans, version, placement, max_pause, nice, tmp),
                )
            )
            version += 1
    pin(api.proc.pid, None)
    return alone, cells


def search_curve(api: Api, url: str, plans: int, duration: int, tmp: Path) -> list[Point]:
    points = []
    seed = 40
    for series, pauses in CURVE:
        for max_pause in pauses:
            vacuum_plans(url)
            points.append(
                retried(
                    f"{series} {max_pause:g}s",
                    partial(curve_point, api, url, plans, series, max_pause, duration, tmp, seed),
                )
            )
            seed += 1
    return points


def plot_search(path: Path, alone: Result, points: list[Point], plans: int) -> None:
    """/search p99 and 503 share at 1,000/s against the fetch's rate, per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (p99, busy) = plt.subplots(1, 2, figsize=(11, 4.4))
    for series, marker in ((THROTTLED, "o"), (PACED, "s")):
        pts = sorted((p for p in points if p.series == series), key=lambda p: p.rate)
        xs = [p.rate for p in pts]
        label = "fixed pause per COPY batch (no pacing)" if series == THROTTLED else "pacing"
        p99.plot(xs, [p.result.p99_ms for p in pts], marker=marker, label=label)
        busy.plot(xs, [100 * p.result.non2xx / p.result.requests for p in pts], marker=marker)
        for p in pts:
            p99.annotate(
                f"{p.max_pause:g}s",
                (p.rate, p.result.p99_ms),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    p99.scatter([0], [alone.p99_ms], color="black", zorder=3, label="no ingestion")
    busy.scatter([0], [100 * alone.non2xx / alone.requests], color="black", zorder=3)
    p99.axhline(
        TARGET_INGEST_RATIO * alone.p99_ms,
        color="grey",
        ls="--",
        label=f"target: {TARGET_INGEST_RATIO:g}x alone",
    )
    p99.set(xlabel="fetch rate (plans/s)", ylabel="/search p99 (ms)", ylim=(0, None))
    busy.set(xlabel="fetch rate (plans/s)", ylabel="answered 503 (%)", ylim=(0, None))
    p99.legend(fontsize=8)
    for ax in (p99, busy):
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"/search at 1,000 cold requests/s on {plans:,} plans during a fetch of {plans:,}"
        " (one API process, 2 shared cores)",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"  curve written to {path}", flush=True)


def share(r: Result) -> str:
    return f"{100 * r.non2xx / r.requests:.1f}%" if r.requests else "-"


def ingestion_summary(alone: dict[str, Result], cells: list[Cell]) -> None:
    print(
        "\n/search at 1,000/s during ingestion (p99 / alone p99 of the same placement;"
        " 503 share) and the ingestion's own rate:"
    )
    for c in cells:
        base = alone[c.placement]
        parts = []
        for phase, r in (("fetch", c.fetch), ("process", c.process)):
            parts.append(
                f"{phase} p99 {up(r.p99_ms, 2)} ms ({up(r.p99_ms / base.p99_ms, 2)}x) 503"
                f" {share(r)}"
            )
        print(
            f"  {c.placement:<6} {c.pacing:<22} " + "; ".join(parts) + f"; fetch"
            f" {up(c.fetch_s, 1)} s, process {up(c.process_s, 1)} s, {down(c.rate)} plans/s"
        )
    for placement, base in alone.items():
        off = next(c for c in cells if c.placement == placement and not (c.max_pause or c.nice))
        for c in (c for c in cells if c.placement == placement):
            worst = max(c.fetch.p99_ms, c.process.p99_ms) / base.p99_ms
            refused = c.fetch.non2xx + c.process.non2xx
            print_target(
                f"{placement}, {c.pacing}: no 503 at 1,000/s and p99 <= {TARGET_INGEST_RATIO:g}x"
                " alone, during fetch and process",
                refused == 0 and worst <= TARGET_INGEST_RATIO,
                f"worst p99 ratio {up(worst, 2)} (alone {up(base.p99_ms, 2)} ms, 503 there"
                f" {share(base)}); 503s {refused}; ingestion {down(c.rate)} plans/s ="
                f" {down(c.rate / off.rate, 2)}x unpaced",
            )


# --- whole ranges streamed, and deep pages ----------------------------------------------------


def vmrss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


@dataclass
class Streamed:
    name: str
    events: int
    megabytes: float
    seconds: float
    rss_before_kib: int
    rss_peak_kib: int
    raw_seconds: float
    """The same keyset pages read by psycopg straight from PostgreSQL (no HTTP, no API)."""


def stream_range(api: Api, name: str, path: str) -> tuple[int, int, float, int, int]:
    """GET ``path`` to the end, counting events and bytes, while sampling the API's RSS."""
    pid = api.proc.pid
    before = vmrss_kib(pid)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, vmrss_kib(pid))
            time.sleep(RSS_SAMPLE_EVERY)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    events = size = 0
    tail = last = b""
    marker = b'{"id" : '
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(api.base + path, timeout=300) as resp:
            while chunk := resp.read(1 << 20):
                size += len(chunk)
                events += (tail + chunk).count(marker) - tail.count(marker)
                tail = chunk[-len(marker) :]
                last = chunk
    finally:
        done.set()
        sampler.join()
    seconds = time.perf_counter() - started
    if not last.endswith(b']},"error":null}'):
        raise RuntimeError(f"{name}: the body did not end as a complete response")
    return events, size, seconds, before, peak


async def raw_pages(url: str, query: SearchQuery) -> float:
    """Seconds psycopg takes to read every keyset page of ``query`` from PostgreSQL."""
    started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(SEARCH_Q["snapshot"])
        page = await fetch_page(conn, query, None, 0)
        while page.last is not None:
            page = await fetch_page(conn, query, page.last, 0)
        await conn.execute(SEARCH_Q["end_snapshot"])
    return time.perf_counter() - started


def small_range(url: str) -> tuple[str, datetime]:
    """An ends_at that holds about SMALL_RANGE events from the first one."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT starts_at FROM plans.plans WHERE ever_online AND ends_at IS NOT NULL"
            " ORDER BY starts_at, id OFFSET %s LIMIT 1",
            (SMALL_RANGE,),
        ).fetchone()
    if row is None:
        raise RuntimeError(f"fewer than {SMALL_RANGE:,} events loaded")
    end: datetime = row[0].astimezone(UTC).replace(microsecond=0)
    return end.strftime("%Y-%m-%dT%H:%M:%SZ"), end


def streamed_ranges(api: Api, url: str) -> list[Streamed]:
    """Every event of a ~10k-event range, then of the whole table, without limit."""
    text, end = small_range(url)
    results = []
    for name, path, query in (
        ("~10k events", f"/search?ends_at={text}", SearchQuery(ends_at=end)),
        ("every event", "/search", SearchQuery()),
    ):
        events, size, seconds, before, peak = stream_range(api, name, path)
        raw = asyncio.run(raw_pages(url, query))
        r = Streamed(name, events, size / 1e6, seconds, before, peak, raw)
        print(
            f"  {name:<12} {r.events:>9,} events {down(r.megabytes, 1):>7} MB"
            f" in {up(r.seconds, 2):>6} s ({down(r.events / r.seconds):>8} events/s;"
            f" raw pages {up(r.raw_seconds, 2)} s, API / raw {up(r.seconds / r.raw_seconds, 2)});"
            f" API RSS {r.rss_before_kib / 1024:.1f} -> peak {r.rss_peak_kib / 1024:.1f} MiB",
            flush=True,
        )
        results.append(r)
    return results


def deep_pages(api: Api, duration: int, tmp: Path, events: int) -> list[Result]:
    """limit=PAGE at offset DEEP against the same page by cursor, one client (wrk -c1): the
    cost of one search, which 64 connections would hide behind the bulkhead's 503s."""
    depth = min(DEEP, events - PAGE)
    # The cursor of the page before: its Link leads to the page the offset asks for.
    with urllib.request.urlopen(f"{api.base}/search?limit={PAGE}&offset={depth - PAGE}") as r:
        cursor_path = r.headers["link"].split(";")[0].strip("<> ")
    _, by_offset = http_get(f"{api.base}/search?limit={PAGE}&offset={depth}")
    _, by_cursor = http_get(api.base + cursor_path)
    if by_offset != by_cursor:
        raise RuntimeError("the page by cursor is not the page by offset")
    results = []
    for name, path in (
        (f"offset={depth}", f"/search?limit={PAGE}&offset={depth}"),
        (f"cursor@{depth}", cursor_path),
        ("offset=1", f"/search?limit={PAGE}&offset=1"),  # near the start, not cached
    ):
        r = run_wrk(api, name, path, duration, tmp, 0, connections=1)
        show(r)
        results.append(r)
    return results


# --- summary ----------------------------------------------------------------------------------


def summary(by: dict[str, Result], streamed: list[Streamed]) -> None:
    print("\nratios (same run) and targets:")
    small, whole = streamed
    growth = whole.rss_peak_kib / small.rss_peak_kib
    print_target(
        f"API peak RSS, every event / ~10k events <= {TARGET_STREAM_RSS_GROWTH:g} (flat)",
        growth <= TARGET_STREAM_RSS_GROWTH,
        f"{up(growth, 3)} = {whole.rss_peak_kib / 1024:.1f} / {small.rss_peak_kib / 1024:.1f} MiB"
        f" for {whole.events:,} / {small.events:,} events",
    )
    offset, cursor, near = (r for name, r in by.items() if name.startswith(("offset=", "cursor@")))
    print(
        f"  one client, p50: {offset.name} {up(offset.p50_ms, 2)} ms, {cursor.name}"
        f" {up(cursor.p50_ms, 2)} ms, {near.name} {up(near.p50_ms, 2)} ms; offset / cursor"
        f" {down(offset.p50_ms / cursor.p50_ms, 1)}x; cursor / offset=1"
        f" {up(cursor.p50_ms / near.p50_ms, 2)}x"
    )
    hot = by["hot"].ok_rps / by["trivial"].ok_rps
    print_target(
        f"hot / trivial 2xx rps >= {TARGET_HOT_RATIO}",
        hot >= TARGET_HOT_RATIO,
        f"{down(hot, 3)} = {down(by['hot'].ok_rps)} / {down(by['trivial'].ok_rps)}",
    )
    fixed = by["cold@1000"]
    print_target(
        f"cold p99 at ~1,000 rps <= {TARGET_COLD_P99_MS:g} ms, no 503",
        fixed.p99_ms <= TARGET_COLD_P99_MS and fixed.non2xx == 0,
        f"{up(fixed.p99_ms, 2)} ms at {down(fixed.rps)} rps achieved, non-2xx {fixed.non2xx}",
    )


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="pgenough api under wrk: trivial, hot, cold, cold at 1,000/s, cold during"
        " ingestion; see the module docstring."
    )
    parser.add_argument("--plans", type=int, default=None, help="plans to load (default 1M)")
    parser.add_argument("--duration", type=int, default=None, help="seconds per scenario (10)")
    parser.add_argument("--quick", action="store_true", help="100k plans, 3 s per scenario")
    parser.add_argument("--keep", action="store_true", help="do not drop the database")
    parser.add_argument(
        "--skip-ingestion", action="store_true", help="leave out the during-ingestion scenarios"
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="embedded server")
    parser.add_argument(
        "--no-alter-system",
        action="store_true",
        help="stop if the server has autovacuum off instead of turning it on for the run",
    )
    parser.add_argument(
        "--skip-curve", action="store_true", help="leave out the p99 vs fetch rate curve"
    )
    parser.add_argument(
        "--placements", help="during ingestion, only these (comma-separated: shared, pinned)"
    )
    parser.add_argument(
        "--cells",
        type=int,
        default=len(CELLS),
        choices=range(1, len(CELLS) + 1),
        help="during ingestion, the first N cells per placement (1: no pacing only; 2: and"
        " the default pacing; 3: and pacing with nice)",
    )
    parser.add_argument(
        "--plot-search",
        type=Path,
        default=None,
        metavar="PNG",
        help="draw /search p99 vs fetch rate there (e.g. docs/img/boundary-search.png)",
    )
    args = parser.parse_args(argv)
    if args.plans is None:
        args.plans = QUICK_PLANS if args.quick else DEFAULT_PLANS
    if args.duration is None:
        args.duration = 3 if args.quick else 10
    if args.plans < 1 or args.duration < 1:
        parser.error("--plans and --duration must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.api")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install -y wrk)")
    server = ServerUnderTest.find(args.data_dir)
    facts = server_facts(server.admin_url)
    wrk_version = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()
    print(
        f"pgenough api benchmark: {platform.python_implementation()}"
        f" {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()};"
        f" wrk {wrk_version[1] if len(wrk_version) > 1 else '?'} -t1 -c{CONNECTIONS};"
        f" load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"server: {server.label}; " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    print(
        f"plans {args.plans:,}; {args.duration}s per scenario; API: one process, one uvicorn"
        f" worker, defaults except PGENOUGH_API_CACHE_TTL={CACHE_TTL}",
        flush=True,
    )
    with autovacuum_on(server.admin_url, not args.no_alter_system):
        name = f"pgenough_bench_api_{uuid.uuid4().hex[:8]}"
        create_database(server.admin_url, name)
        db_url = with_database(server.admin_url, name)
        api: Api | None = None
        with tempfile.TemporaryDirectory(prefix="pgenough-bench-api-", dir="/tmp") as tmp_name:
            tmp = Path(tmp_name)
            try:
                asyncio.run(migrate_database(db_url))
                load(db_url, args.plans, tmp)
                with (tmp / "api.log").open("ab") as api_log:
                    api = Api(db_url, api_log, tmp)
                    print(f"api: {api.base} (pid {api.proc.pid})\n\nscenarios:", flush=True)
                    by: dict[str, Result] = {}
                    for rname, kind, seed, rate in (
                        ("trivial", "trivial", 0, None),
                        ("hot", "hot", 0, None),
                        ("cold", "cold", 1, None),
                        ("cold@1000", "cold", 2, FIXED_RATE),
                    ):
                        by[rname] = run_wrk(api, rname, kind, args.duration, tmp, seed, rate)
                        show(by[rname])
                    print("\nwhole ranges without limit (streamed):", flush=True)
                    streamed = streamed_ranges(api, db_url)
                    print(f"\ndeep pages (limit={PAGE}):", flush=True)
                    for r in deep_pages(api, args.duration, tmp, streamed[1].events):
                        by[r.name] = r
                    summary(by, streamed)
                    if not args.skip_ingestion:
                        print("\nduring ingestion (cold@1000 for each whole phase):", flush=True)
                        alone, cells = during_ingestion(
                            api,
                            db_url,
                            args.plans,
                            tmp,
                            args.duration,
                            frozenset(args.placements.split(",")) if args.placements else None,
                            args.cells,
                        )
                        ingestion_summary(alone, cells)
                    if not args.skip_curve:
                        print(
                            f"\n/search p99 vs fetch rate (cold@1000, {args.duration} s windows,"
                            " shared placement):",
                            flush=True,
                        )
                        points = search_curve(api, db_url, args.plans, args.duration, tmp)
                        vacuum_plans(db_url)
                        alone_now = run_wrk(
                            api, "cold@1000 alone", "cold", args.duration, tmp, 7, FIXED_RATE
                        )
                        show(alone_now)
                        if args.plot_search:
                            plot_search(args.plot_search, alone_now, points, args.plans)
            except BaseException:
                for log in sorted(tmp.glob("*.log")):
                    print(f"--- {log.name} (tail)", file=sys.stderr)
                    print(
                        "\n".join(log.read_text(errors="replace").splitlines()[-20:]),
                        file=sys.stderr,
                    )
                raise
            finally:
                if api is not None:
                    api.stop()
                if args.keep:
                    print(f"kept database {name}")
                else:
                    drop_database(server.admin_url, name)
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
