"""``bench.ingest``'s ceilings on the same data: the snapshot rendered, parsed alone, and
COPYed alone into a staging table, each repeated (``Spread``)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from bench.harness.processes import SEED
from bench.harness.report import down
from bench.ingest import CEILING_RUN_ID, CHUNK, COPY_BATCH, VERSION

from pgenough_plans.ingest import store
from pgenough_plans.ingest.feed import FeedParser, PlanRecord
from pgenough_plans.sim.data import render_snapshot


@dataclass(frozen=True)
class Spread:
    """Repeated timings of one thing: median, min and max (seconds)."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def rate(self, count: int) -> float:
        return count / self.median

    def describe(self, count: int, unit: str) -> str:
        rates = sorted(count / s for s in self.samples)
        extra = f" (min {down(rates[0])}, max {down(rates[-1])}; n={len(rates)})"
        return f"{down(self.rate(count))} {unit}{extra if len(rates) > 1 else ''}"


@dataclass
class Ceilings:
    render_s: float
    size_bytes: int
    plans_seen: int
    records: int
    skipped: int
    distinct_keys: int
    parse: Spread
    copy: Spread


def write_snapshot(path: Path, plans: int) -> tuple[float, int]:
    started = time.perf_counter()
    size = 0
    with path.open("wb") as out:
        for chunk in render_snapshot(SEED, VERSION, plans):
            out.write(chunk)
            size += len(chunk)
    return time.perf_counter() - started, size


def parse_only(path: Path) -> tuple[float, int]:
    """Seconds spent in ``FeedParser(copy_text=True)`` (the fetch worker's mode: each plan
    made a line of COPY text) on the file (64 KiB chunks); plans seen."""
    parser = FeedParser(copy_text=True)
    spent = 0.0
    with path.open("rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            t0 = time.perf_counter()
            parser.feed_copy(chunk)
            spent += time.perf_counter() - t0
    t0 = time.perf_counter()
    parser.close_copy()
    spent += time.perf_counter() - t0
    return spent, parser.plans_seen


def parse_all(path: Path) -> tuple[list[PlanRecord], FeedParser]:
    parser = FeedParser()
    records: list[PlanRecord] = []
    with path.open("rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            records += parser.feed(chunk)
    records += parser.close()
    return records, parser


def copy_lines(path: Path) -> list[str]:
    """The file's plans as the fetch worker stages them: lines of COPY text."""
    parser = FeedParser(copy_text=True)
    lines: list[str] = []
    with path.open("rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            lines += parser.feed_copy(chunk)
    lines += parser.close_copy()
    return lines


async def copy_only(url: str, lines: Sequence[str], run_id: int) -> float:
    """Seconds spent in ``StagingWriter.write_copy`` (the fetch worker's COPY of lines of
    text), batches of 5,000, into a fresh table."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await store.create_staging(conn, run_id, "bench")
        writer = store.StagingWriter(run_id)
        spent = 0.0
        written = 0
        for offset in range(0, len(lines), COPY_BATCH):
            batch = lines[offset : offset + COPY_BATCH]
            t0 = time.perf_counter()
            written += await writer.write_copy(conn, batch)
            spent += time.perf_counter() - t0
        await store.drop_staging(conn, run_id)
    if written != len(lines):
        raise RuntimeError(f"COPY ceiling wrote {written} of {len(lines)} lines")
    return spent


def measure_ceilings(url: str, path: Path, plans: int, repeat: int) -> Ceilings:
    render_s, size = write_snapshot(path, plans)
    print(f"  snapshot written: {size:,} bytes in {render_s:.2f}s (render, untimed)", flush=True)
    parse_samples = []
    seen = 0
    for i in range(repeat):
        spent, seen = parse_only(path)
        parse_samples.append(spent)
        print(f"  parse-only #{i + 1}: {spent:.3f}s, {down(seen / spent)} plans/s", flush=True)
    records, parser = parse_all(path)
    keys = len({(r.base_plan_id, r.plan_id) for r in records})
    kept = len(records)
    del records  # ~1 KiB each: not needed next to their lines
    lines = copy_lines(path)
    if len(lines) != kept:
        raise RuntimeError(f"COPY text mode kept {len(lines)} plans, records mode {kept}")
    copy_samples = []
    for i in range(repeat):
        spent = asyncio.run(copy_only(url, lines, CEILING_RUN_ID + i))
        copy_samples.append(spent)
        rate = kept / spent
        print(f"  COPY-only #{i + 1}: {spent:.3f}s, {down(rate)} rows/s", flush=True)
    return Ceilings(
        render_s=render_s,
        size_bytes=size,
        plans_seen=seen,
        records=kept,
        skipped=parser.skipped,
        distinct_keys=keys,
        parse=Spread(tuple(parse_samples)),
        copy=Spread(tuple(copy_samples)),
    )
