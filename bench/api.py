"""HTTP API benchmark: ``pgenough api`` serving ``GET /search`` from 1M plans, under ``wrk``.

Run it from the repository root, with the project's virtualenv and ``wrk`` installed
(``apt-get install -y wrk``)::

    .venv/bin/python -m bench.api              # 1M plans, 10 s per scenario, embedded server
    .venv/bin/python -m bench.api --quick      # 100k plans, 3 s per scenario: a smoke run
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.api

(``make bench-api`` runs the first line.) Run it as a module: ``python bench/api.py`` puts
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
   ever online. Then ``VACUUM ANALYZE pgenough.plans`` (the PostgreSQL 15 server here runs
   with ``autovacuum=off``).
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
- ``cold during fetch``, ``cold@1000 during fetch``: the same, while a new snapshot
  (``?version=2`` of the same ``--plans`` plans) is fetched into the same database
  (simulator + fetch worker: parse and COPY into staging).
- ``cold@1000 during process``: the same at 1,000/s while the process worker applies that
  snapshot to ``pgenough.plans`` (started once its first chunk is claimed). Each
  ingestion scenario prints how much of its window the phase actually covered.

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

Ratios and targets: hot / trivial rps >= 0.7; cold@1000 p99 <= 50 ms; cold p99 during
ingestion / alone <= 2 (each ingestion scenario against its alone counterpart; the worst
one is judged).

Display: rates and ratios better-is-higher are truncated, latencies and ratios
better-is-lower rounded up (never in the flattering direction).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
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
from pathlib import Path
from typing import IO, Any

import psycopg
from bench.ingest import (
    Server,
    Simulator,
    down,
    migrate_database,
    pgenough_command,
    server_facts,
    up,
)

from pgenough.api.search import Q as SEARCH_Q
from pgenough.api.search import SearchQuery, fetch_page
from pgenough.core.db import create_database, drop_database, start_embedded, with_database

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = ROOT / ".pgenough-bench"
DEFAULT_PLANS = 1_000_000
QUICK_PLANS = 100_000
CONNECTIONS = 64
FIXED_RATE = 1_000
PAGE = 50  # the page every wrk scenario asks for (/search's default before it sent everything)
DEEP = 100_000  # the offset the cursor is compared at
SMALL_RANGE = 10_000  # events in the smaller streamed range
RSS_SAMPLE_EVERY = 0.01
TARGET_STREAM_RSS_GROWTH = 1.25
PROCESS_CONCURRENCY = 2
CACHE_TTL = "60"
READY_TIMEOUT = 90.0

TARGET_HOT_RATIO = 0.7
TARGET_COLD_P99_MS = 50.0
TARGET_INGEST_RATIO = 2.0

HOT_RANGES = (
    ("2021-03-01T00:00:00Z", "2021-03-08T00:00:00Z"),
    ("2021-06-01T00:00:00Z", "2021-07-01T00:00:00Z"),
    ("2021-09-15T12:00:00Z", "2021-09-16T12:00:00Z"),
    ("2022-01-10T00:00:00Z", "2022-01-24T00:00:00Z"),
    ("2022-07-01T00:00:00Z", "2022-07-31T00:00:00Z"),
)

LUA_DONE = r"""
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50_us":%.0f,"p99_us":%.0f,"max_us":%.0f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""

LUA_FIXED = r"""
local paths = {@PATHS@}
local reqs = {}
local i = 0
function init(args)
  for k, p in ipairs(paths) do reqs[k] = wrk.format("GET", p) end
end
function request()
  i = i % #reqs + 1
  return reqs[i]
end
"""

LUA_COLD = r"""
local first = 1609459200  -- 2021-01-01T00:00:00Z
local span = 730 * 86400
function init(args)
  math.randomseed(tonumber(args[1]) or 1)
end
function request()
  local s = first + math.random(0, span - 1)
  local e = s + math.random(86400, 30 * 86400)
  local path = string.format("/search?starts_at=%s&ends_at=%s&limit=50&offset=%d",
    os.date("!%Y-%m-%dT%H:%M:%SZ", s), os.date("!%Y-%m-%dT%H:%M:%SZ", e),
    math.random(0, 1000))
  return wrk.format("GET", path)
end
"""

LUA_PACE = r"""
-- A fixed rate for all connections: every delay() (called between a response and the
-- connection's next request) reserves the next free 1/RATE-second slot on a shared schedule
-- (CLOCK_MONOTONIC through LuaJIT's FFI) and waits for it.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk, bench_timespec *tp);
]]
local ts = ffi.new("bench_timespec")
local interval = 1000 / @RATE@
local next_at = 0
function delay()
  ffi.C.clock_gettime(1, ts)
  local now = tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  if next_at < now then next_at = now end
  next_at = next_at + interval
  return math.floor(next_at - now)
end
"""


# --- results ----------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    requests: int
    duration_s: float
    non2xx: int
    socket_errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    cache_hits: float
    cache_misses: float
    note: str = ""

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s

    @property
    def ok_rps(self) -> float:
        return (self.requests - self.non2xx) / self.duration_s


# --- the API process and wrk ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Api:
    """``pgenough api --port P`` as its own process."""

    def __init__(self, url: str, log: IO[bytes], cwd: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "DATABASE_URL": url, "PGENOUGH_API_CACHE_TTL": CACHE_TTL}
        env.pop("PGENOUGH_CONFIG", None)
        command = [pgenough_command(), "api", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=cwd)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgenough api exited {self.proc.returncode} before ready")
            with contextlib.suppress(OSError):
                if http_get(self.base + "/health/ready", 1.0)[0] == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError("pgenough api was not ready in time")

    def cache_counts(self) -> tuple[float, float]:
        _, body = http_get(self.base + "/metrics")
        found = {"hits": 0.0, "misses": 0.0}
        for line in body.decode().splitlines():
            m = re.match(r"pgenough_api_cache_(hits|misses)_total (\S+)", line)
            if m:
                found[m[1]] = float(m[2])
        return found["hits"], found["misses"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def hot_path(start: str, end: str) -> str:
    return f"/search?starts_at={start}&ends_at={end}&limit={PAGE}"


def lua_script(kind: str, rate: int | None) -> str:
    if kind == "trivial":
        body = LUA_FIXED.replace("@PATHS@", '"/health/live"')
    elif kind == "hot":
        paths = ", ".join(f'"{hot_path(s, e)}"' for s, e in HOT_RANGES)
        body = LUA_FIXED.replace("@PATHS@", paths)
    elif kind.startswith("/"):  # one fixed path
        body = LUA_FIXED.replace("@PATHS@", json.dumps(kind))
    else:
        body = LUA_COLD
    if rate is not None:
        body += LUA_PACE.replace("@RATE@", str(rate))
    return body + LUA_DONE


def run_wrk(
    api: Api,
    name: str,
    kind: str,
    duration: int,
    tmp: Path,
    seed: int,
    rate: int | None = None,
    connections: int = CONNECTIONS,
) -> Result:
    script = tmp / f"{re.sub(r'[^A-Za-z0-9@=.-]', '_', name)}-{seed}.lua"
    script.write_text(lua_script(kind, rate))
    if kind == "hot":  # steady state: each range cached before the clock starts
        for start, end in HOT_RANGES:
            http_get(api.base + hot_path(start, end))
    hits0, misses0 = api.cache_counts()
    command = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "--timeout", "5s"]
    out = subprocess.run(
        [*command, "-s", str(script), api.base, "--", str(seed)],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 60,
    ).stdout
    hits1, misses1 = api.cache_counts()
    line = next((x for x in out.splitlines() if x.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    data: dict[str, Any] = json.loads(line.removeprefix("WRKJSON "))
    return Result(
        name=name,
        requests=int(data["requests"]),
        duration_s=int(data["duration_us"]) / 1e6,
        non2xx=int(data["status"]),
        socket_errors=sum(int(data[k]) for k in ("connect", "read", "write", "timeout")),
        p50_ms=float(data["p50_us"]) / 1000,
        p99_ms=float(data["p99_us"]) / 1000,
        max_ms=float(data["max_us"]) / 1000,
        cache_hits=hits1 - hits0,
        cache_misses=misses1 - misses0,
    )


def show(r: Result) -> None:
    print(
        f"  {r.name:<26} rps {down(r.rps):>7}  2xx rps {down(r.ok_rps):>7}"
        f"  p50 {up(r.p50_ms, 2):>7} ms  p99 {up(r.p99_ms, 2):>8} ms  max {up(r.max_ms, 2):>8} ms"
        f"  non-2xx {r.non2xx:>6}  sock err {r.socket_errors}"
        f"  cache h/m {r.cache_hits:.0f}/{r.cache_misses:.0f}{r.note}",
        flush=True,
    )


# --- loading and ingesting --------------------------------------------------------------------


class Phase:
    """A worker command running in the background; when it ended."""

    def __init__(
        self, name: str, command: list[str], env: dict[str, str], log: IO[bytes], cwd: Path
    ) -> None:
        self.name = name
        self.started = time.monotonic()
        self.ended: float | None = None
        self.proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=cwd)
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()

    def join(self, timeout: float) -> int:
        self._thread.join(timeout)
        if self.proc.returncode is None:
            self.proc.kill()
            self._thread.join()
        return int(self.proc.returncode)

    def covered(self, start: float, end: float) -> str:
        """How much of [start, end] this phase was running."""
        stop = end if self.ended is None else min(end, self.ended)
        share = max(0.0, stop - max(start, self.started)) / (end - start)
        return f"  [{self.name} running {share:.0%} of the window]"


def worker_env(url: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("PGENOUGH_CONFIG", None)
    return env


def last_run(url: str) -> tuple[Any, ...]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT id, status::text, plans_staged, plans_written, reason,"
            " extract(epoch FROM staged_at - started_at),"
            " extract(epoch FROM processed_at - staged_at)"
            " FROM pgenough.runs ORDER BY id DESC LIMIT 1"
        ).fetchone()
    if row is None:
        raise RuntimeError("no run recorded")
    return tuple(row)


def load(url: str, plans: int, logs: Path) -> None:
    """Ingest snapshot version 1 through the real commands; print what it took."""
    env = worker_env(url)
    cmd = pgenough_command()
    t0 = time.perf_counter()
    with (logs / "load.log").open("ab") as log:
        sim = Simulator(plans, log, env, logs)
        try:
            provider = f"sim={sim.url}?version=1"
            subprocess.run(
                [cmd, "worker", "fetch", "--once", "--provider", provider],
                stdout=log,
                stderr=log,
                env=env,
                cwd=logs,
                check=True,
            )
        finally:
            sim.stop()
        subprocess.run(
            [cmd, "worker", "process", "--until-idle", "--concurrency", str(PROCESS_CONCURRENCY)],
            stdout=log,
            stderr=log,
            env=env,
            cwd=logs,
            check=True,
        )
    took = time.perf_counter() - t0
    run = last_run(url)
    if run[1] != "PROCESSED":
        raise RuntimeError(f"load run {run[0]} is {run[1]}: {run[4]}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgenough.plans")
        counts = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE ever_online), min(starts_at)::date,"
            " max(starts_at)::date FROM pgenough.plans"
        ).fetchone()
    assert counts is not None
    print(
        f"load: ingestion of simulator snapshot v1 ({plans:,} plans): {took:.1f}s wall"
        f" (fetch {float(run[5]):.1f}s, process {float(run[6]):.1f}s); plans in table"
        f" {counts[0]:,}, ever online {counts[1]:,} ({counts[1] / counts[0]:.1%}), starts"
        f" {counts[2]}..{counts[3]}; then VACUUM ANALYZE",
        flush=True,
    )


def wait_first_claim(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pgenough.jobs WHERE queue = 'plans'"
                " AND claimed_at IS NOT NULL"
            ).fetchone()
            status = last_run(url)[1]
            if (row and row[0]) or status == "PROCESSED":
                return
            time.sleep(0.02)


def during_ingestion(
    api: Api, url: str, plans: int, duration: int, tmp: Path, logs: Path
) -> list[Result]:
    """Snapshot version 2 fetched, then processed, while the cold scenarios run."""
    env = worker_env(url)
    cmd = pgenough_command()
    results: list[Result] = []
    with (logs / "ingest2.log").open("ab") as log:
        sim = Simulator(plans, log, env, logs)
        try:
            fetch = Phase(
                "fetch",
                [cmd, "worker", "fetch", "--once", "--provider", f"sim={sim.url}?version=2"],
                env,
                log,
                logs,
            )
            time.sleep(1.0)  # past the fetch worker's start-up, into the stream
            for name, rate, seed in (
                ("cold during fetch", None, 3),
                ("cold@1000 during fetch", FIXED_RATE, 4),
            ):
                start = time.monotonic()
                r = run_wrk(api, name, "cold", duration, tmp, seed, rate)
                r.note = fetch.covered(start, time.monotonic())
                show(r)
                results.append(r)
            code = fetch.join(1800)
        finally:
            sim.stop()
        if code != 0:
            raise RuntimeError(f"fetch of version 2 exited {code}")
        process = Phase(
            "process",
            [cmd, "worker", "process", "--until-idle", "--concurrency", str(PROCESS_CONCURRENCY)],
            env,
            log,
            logs,
        )
        wait_first_claim(url, 60)
        start = time.monotonic()
        r = run_wrk(api, "cold@1000 during process", "cold", duration, tmp, 5, FIXED_RATE)
        r.note = process.covered(start, time.monotonic())
        show(r)
        results.append(r)
        if process.join(1800) != 0:
            raise RuntimeError("process of version 2 failed")
    run = last_run(url)
    print(
        f"  ingestion of v2: run {run[0]} {run[1]}, fetch {float(run[5]):.1f}s, process"
        f" {float(run[6] or 0):.1f}s, plans staged {run[2]:,}, written {run[3]:,}",
        flush=True,
    )
    return results


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
            "SELECT starts_at FROM pgenough.plans WHERE ever_online AND ends_at IS NOT NULL"
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


def verdict(what: str, met: bool, measured: str) -> bool:
    print(f"  {what}: {'met' if met else 'NOT met'} ({measured})")
    return met


def summary(by: dict[str, Result], streamed: list[Streamed]) -> None:
    print("\nratios (same run) and targets:")
    small, whole = streamed
    growth = whole.rss_peak_kib / small.rss_peak_kib
    verdict(
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
    verdict(
        f"hot / trivial 2xx rps >= {TARGET_HOT_RATIO}",
        hot >= TARGET_HOT_RATIO,
        f"{down(hot, 3)} = {down(by['hot'].ok_rps)} / {down(by['trivial'].ok_rps)}",
    )
    fixed = by["cold@1000"]
    verdict(
        f"cold p99 at ~1,000 rps <= {TARGET_COLD_P99_MS:g} ms, no 503",
        fixed.p99_ms <= TARGET_COLD_P99_MS and fixed.non2xx == 0,
        f"{up(fixed.p99_ms, 2)} ms at {down(fixed.rps)} rps achieved, non-2xx {fixed.non2xx}",
    )
    worst = 0.0
    parts = []
    for name, alone in (
        ("cold during fetch", "cold"),
        ("cold@1000 during fetch", "cold@1000"),
        ("cold@1000 during process", "cold@1000"),
    ):
        if name in by:
            ratio = by[name].p99_ms / by[alone].p99_ms
            worst = max(worst, ratio)
            parts.append(f"{name} / {alone}: {up(ratio, 3)}")
    if parts:
        verdict(
            f"cold p99 during ingestion / alone <= {TARGET_INGEST_RATIO:g} (worst)",
            worst <= TARGET_INGEST_RATIO,
            "; ".join(parts),
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
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install -y wrk)")
    url = os.environ.get("DATABASE_URL")
    if url:
        server = Server(with_database(url, "postgres"), "DATABASE_URL")
    else:
        embedded = start_embedded(args.data_dir, database="postgres")
        server = Server(embedded.admin_url, f"embedded ({embedded.pgdata})")
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
                if not args.skip_ingestion:
                    for r in during_ingestion(api, db_url, args.plans, args.duration, tmp, tmp):
                        by[r.name] = r
                summary(by, streamed)
        except BaseException:
            for log in sorted(tmp.glob("*.log")):
                print(f"--- {log.name} (tail)", file=sys.stderr)
                print(
                    "\n".join(log.read_text(errors="replace").splitlines()[-20:]), file=sys.stderr
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
