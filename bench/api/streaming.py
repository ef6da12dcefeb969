"""``bench.api``'s streamed ranges and deep pages: the API's RSS while it streams a whole
range, and an offset page against the cursor's at the same depth."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from bench.api import DEEP, RSS_SAMPLE_EVERY, SMALL_RANGE
from bench.harness.api_process import Api, http_get
from bench.harness.report import down, up
from bench.harness.wrk import PAGE, Result, run_wrk, show

from pgenough_plans.api.search import Q as SEARCH_Q
from pgenough_plans.api.search import SearchQuery, fetch_page


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
