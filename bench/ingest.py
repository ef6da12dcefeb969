"""Ingestion benchmark: simulator snapshots of 10k, 100k and 1M plans, fetched and processed
end to end by the real worker commands, next to two ceilings measured on the same data.

Run it from the repository root, with the project's virtualenv::

    .venv/bin/python -m bench.ingest                 # 10k, 100k, 1M on the embedded server
    .venv/bin/python -m bench.ingest --quick         # 10k, 50k: a smoke run
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.ingest

(``python -m bench.ingest`` works too.) With ``DATABASE_URL`` every size gets a fresh database
on that server; without it, on the embedded server started in ``.pgenough-bench/``. Databases
are dropped at the end of each size unless ``--keep``. Temporary files (the snapshot written
for the ceilings, the processes' logs) live in a directory under ``/tmp``, removed at the end.

Per size N, in this order:

1. A fresh database, migrated (``migrate(conn, [store.MIGRATIONS])``).
2. The snapshot ``render_snapshot(seed=1, version=1, plans=N)`` - the very bytes the
   simulator serves - is written to a temporary file (untimed; the render time is printed as
   the simulator's own ceiling, since it shares the 2 cores with everything else).
3. **parse-only** ceiling: the file is read in 64 KiB chunks and fed to a ``FeedParser``;
   only the ``feed``/``close`` calls are timed (records are built, then dropped, as the fetch
   worker drops each batch after its COPY). ``plans/s`` = plans in the document / parse time.
4. **COPY-only** ceiling: the file is parsed once more, untimed, keeping every record; the
   records go through ``StagingWriter.write`` in batches of 5,000 into a fresh staging table
   (``store.create_staging``) on an autocommit connection, as the fetch worker does; only the
   COPYs are timed. ``rows/s`` = records / COPY time.
   Steps 3 and 4 are repeated ``--repeat`` times; the median is reported (min and max too).
5. **end to end**: the simulator runs as its own process (``pgenough provider-sim --plans N
   --port 0 --seed 1``: port 0 makes the simulator bind a free port, race-free, and print it
   on its ``provider simulator:`` line); then the fetch worker as its own process (``pgenough
   worker fetch --once --provider sim=<url>?version=1``), reaped with ``os.wait4`` so that its
   peak RSS (``ru_maxrss``) and CPU time are exact; then, once the fetch has exited (a run's
   chunks only become claimable when it is sealed, and ``--until-idle`` would exit at once on
   an empty queue), the process worker (``pgenough worker process --until-idle
   --concurrency 2``). The process workers are therefore started *after* the fetch: within one
   run, processing cannot overlap fetching by design, so e2e = fetch + process.

Figures of the end-to-end step:

- ``fetch``: ``runs.staged_at - runs.started_at`` (database clock): HTTP stream + parse +
  COPY until the run is sealed STAGED.
- ``process``: ``runs.processed_at - runs.staged_at``: from STAGED to PROCESSED. It includes
  the fetch worker's exit and the process worker's start-up (Python imports, pool, migrate
  check), because the process worker is launched after the fetch; ``startup`` is that share
  (``first chunk claim - staged_at``, the claim seen by polling ``pgenough.jobs`` every 20 ms)
  and ``apply`` the rest (``processed_at - first claim``).
- ``e2e``: ``processed_at - started_at``; **e2e plans/s** = N / e2e: the headline, judged
  against the targets. ``pipeline plans/s`` = N / (fetch + apply) is what long-running
  workers woken by NOTIFY would see; ``wall`` is from spawning the fetch worker to the process
  worker's exit (both processes' start-ups included).
- ``fetch RSS``: the fetch worker's peak resident set (``ru_maxrss``, KiB on Linux),
  printed in MiB (2**20 bytes); its user+system CPU seconds are printed too, and the
  simulator's.
- Checks: the run is PROCESSED; plans_staged + plans_skipped = N; plans_staged = the records
  the parser keeps; the run's bytes = the file's size; ``count(*) FROM plans.plans`` = the
  distinct ``(base_plan_id, plan_id)`` among the valid records. A failed check exits 1.

Display: rates and ratios are truncated, memory figures and growth rounded up (never in the
flattering direction); times are to the nearest millisecond.

Target printed at the end, as docs/plan-service/benchmarks-history.md states it (issue 13 §3):
">= 40,000 plans/s end to end at 1M plans, peak fetch RSS <= 1.25x the 10k figure, a partial
snapshot still never data", each part with met / NOT met and its figure (the RSS at every size
measured besides 10k; the last part is not measured here: the plans tests check it). Then the
earlier targets (issue 10): e2e >= 25,000 plans/s at 1M; e2e >= 0.6 x the parse-only ceiling;
the fetch worker's peak RSS <= 150 MiB at 1M.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from bench.harness.machine import (
    refuse_if_busy,
)
from bench.harness.plan_workers import (
    PROCESS_CONCURRENCY,
)
from bench.harness.processes import (
    SEED,
    Simulator,
    pgenough_command,
    run_measured,
)
from bench.harness.report import (
    down,
    print_target,
    up,
)
from bench.harness.server import (
    ServerUnderTest,
    migrate_database,
    server_facts,
)

from pgenough.core.db import create_database, drop_database, with_database
from pgenough_plans.ingest import store
from pgenough_plans.ingest.feed import DEFAULT_CHUNK_SIZE, FeedParser, PlanRecord
from pgenough_plans.sim.data import render_snapshot

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = ROOT / ".pgenough-bench"
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000, 50_000)
VERSION = 1
CHUNK = DEFAULT_CHUNK_SIZE  # 64 KiB, as the simulator streams and the parser is fed
COPY_BATCH = 5_000  # FetchConfig.copy_batch
CEILING_RUN_ID = 1_000_000_000  # staging tables of the COPY ceiling: far from real run ids
CLAIM_POLL = 0.02

TARGET = (
    ">= 40,000 plans/s end to end at 1M plans, peak fetch RSS <= 1.25x the 10k figure, a "
    "partial snapshot still never data"
)
"""The ingestion target as docs/plan-service/benchmarks-history.md states it (issue 13 §3),
word for word."""
TARGET_E2E = 40_000.0
TARGET_E2E_SIZE = 1_000_000
TARGET_RSS_GROWTH = 1.25
RSS_BASE_SIZE = 10_000
EARLIER_E2E = 25_000.0
"""The earlier targets (issue 10, docs/plan-service/benchmarks-ingest.md), still printed after
it."""
TARGET_PARSE_RATIO = 0.6
TARGET_RSS_MIB = 150.0


# --- results ----------------------------------------------------------------------------------


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


@dataclass
class EndToEnd:
    run_id: int
    status: str
    plans_staged: int
    plans_skipped: int
    bytes: int
    chunks: int
    plans_written: int
    rows_failed: int
    plans_in_table: int
    fetch_s: float
    process_s: float
    startup_s: float | None
    apply_s: float | None
    e2e_s: float
    processed_at_lag_s: float
    """Poll-observed completion minus ``runs.processed_at``."""
    fetch_wall_s: float
    process_wall_s: float
    wall_s: float
    fetch_rss_kib: int
    fetch_rss_curve: list[int]
    process_rss_kib: int
    fetch_cpu_s: float
    process_cpu_s: float
    sim_cpu_s: float


@dataclass
class SizeResult:
    plans: int
    database: str
    ceilings: Ceilings
    runs: list[EndToEnd] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def median(self, pick: Callable[[EndToEnd], float]) -> float:
        return statistics.median(pick(r) for r in self.runs)

    @property
    def e2e_rate(self) -> float:
        return self.plans / self.median(lambda r: r.e2e_s)

    @property
    def rss_mib(self) -> float:
        return self.median(lambda r: r.fetch_rss_kib) / 1024


# --- processes --------------------------------------------------------------------------------


# --- database ---------------------------------------------------------------------------------


# --- ceilings ---------------------------------------------------------------------------------


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


# --- end to end -------------------------------------------------------------------------------


class ProcessWatcher:
    """Polls the database every 20 ms while the process worker runs: the first chunk claim
    (``min(jobs.claimed_at)``; jobs are deleted when done) and the moment the run is seen
    PROCESSED (``clock_timestamp()`` of that poll: ``runs.processed_at`` is ``now()``, the
    *start* of the last chunk's transaction, which comes before its commit)."""

    def __init__(self, url: str, run_id: int) -> None:
        self.first_claim: datetime | None = None
        self.processed_seen: datetime | None = None
        self.polls = 0
        self._url = url
        self._run_id = run_id
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _poll(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            self._ready.set()
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT (SELECT min(claimed_at) FROM pgenough.jobs WHERE queue = 'plans'),"
                    " (SELECT status::text FROM plans.runs WHERE id = %s), clock_timestamp()",
                    (self._run_id,),
                ).fetchone()
                self.polls += 1
                if row is not None:
                    claim, status, now = row
                    if claim is not None and (self.first_claim is None or claim < self.first_claim):
                        self.first_claim = claim
                    if status == "PROCESSED":
                        self.processed_seen = now
                        return
                self._stop.wait(CLAIM_POLL)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


RUN_COLUMNS = (
    "id, status::text, plans_staged, plans_skipped, bytes, chunks_total, plans_written,"
    " rows_failed, started_at, staged_at, processed_at, reason"
)


def _run_row(url: str) -> tuple[Any, ...] | None:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT {RUN_COLUMNS} FROM plans.runs ORDER BY id").fetchall()
    return tuple(rows[0]) if len(rows) == 1 else None


def end_to_end(
    url: str, plans: int, workdir: Path, logs: Path, timeout: float
) -> tuple[EndToEnd | None, list[str]]:
    env = {**os.environ, "DATABASE_URL": url, "PGENOUGH_LOG_LEVEL": "INFO"}
    env.pop("PGENOUGH_CONFIG", None)
    cmd = pgenough_command()
    with (
        (logs / "sim.log").open("ab") as sim_log,
        (logs / "fetch.log").open("ab") as fetch_log,
        (logs / "process.log").open("ab") as process_log,
    ):
        sim = Simulator(plans, sim_log, env, workdir)
        try:
            provider = f"sim={sim.url}?version={VERSION}"
            t0 = time.perf_counter()
            fetched = run_measured(
                [cmd, "worker", "fetch", "--once", "--provider", provider],
                env,
                workdir,
                fetch_log,
                timeout,
            )
        finally:
            sim_cpu = sim.stop()
        if fetched.code != 0:
            return None, [f"fetch worker exited {fetched.code}"]
        row = _run_row(url)
        if row is None or row[1] != "STAGED":
            return None, [f"after the fetch, the run is {row[1] if row else 'missing'}"]
        watcher = ProcessWatcher(url, int(row[0]))
        try:
            concurrency = ["--concurrency", str(PROCESS_CONCURRENCY)]
            processed = run_measured(
                [cmd, "worker", "process", "--until-idle", *concurrency],
                env,
                workdir,
                process_log,
                timeout,
            )
            wall = time.perf_counter() - t0
            deadline = time.monotonic() + 5
            while watcher.processed_seen is None and time.monotonic() < deadline:
                time.sleep(CLAIM_POLL)  # the watcher's last poll may still be on its way
        finally:
            watcher.stop()
    if processed.code != 0:
        return None, [f"process worker exited {processed.code}"]
    row = _run_row(url)
    if row is None:
        return None, ["expected exactly one run"]
    with psycopg.connect(url, autocommit=True) as conn:
        count_row = conn.execute("SELECT count(*) FROM plans.plans").fetchone()
    (run_id, status, staged, skipped, nbytes, chunks, written, failed) = row[:8]
    started_at, staged_at, processed_at, reason = row[8:]
    done = watcher.processed_seen
    if staged_at is None or processed_at is None or done is None:
        return None, [f"run {run_id} is {status} ({reason}); not timed"]
    first = watcher.first_claim
    result = EndToEnd(
        run_id=int(run_id),
        status=str(status),
        plans_staged=int(staged),
        plans_skipped=int(skipped),
        bytes=int(nbytes),
        chunks=int(chunks or 0),
        plans_written=int(written),
        rows_failed=int(failed),
        plans_in_table=int(count_row[0]) if count_row else -1,
        fetch_s=(staged_at - started_at).total_seconds(),
        process_s=(done - staged_at).total_seconds(),
        startup_s=(first - staged_at).total_seconds() if first else None,
        apply_s=(done - first).total_seconds() if first else None,
        e2e_s=(done - started_at).total_seconds(),
        processed_at_lag_s=(done - processed_at).total_seconds(),
        fetch_wall_s=fetched.wall_s,
        process_wall_s=processed.wall_s,
        wall_s=wall,
        fetch_rss_kib=fetched.maxrss_kib,
        fetch_rss_curve=_curve(fetched.rss_samples),
        process_rss_kib=processed.maxrss_kib,
        fetch_cpu_s=fetched.cpu_s,
        process_cpu_s=processed.cpu_s,
        sim_cpu_s=sim_cpu,
    )
    return result, []


def _curve(samples: list[tuple[float, int]], points: int = 10) -> list[int]:
    """VmRSS (MiB) at ``points`` evenly spaced moments of a process's life."""
    if not samples:
        return []
    step = max(1, len(samples) // points)
    picked = samples[step - 1 :: step][:points]
    if picked[-1] != samples[-1]:
        picked.append(samples[-1])
    return [round(kib / 1024) for _, kib in picked]


def verify(plans: int, ceilings: Ceilings, run: EndToEnd) -> list[str]:
    problems = []
    if run.status != "PROCESSED":
        problems.append(f"run {run.run_id} is {run.status}, not PROCESSED")
    if run.plans_staged + run.plans_skipped != plans:
        problems.append(
            f"plans_staged + plans_skipped = {run.plans_staged} + {run.plans_skipped} != {plans}"
        )
    if run.plans_staged != ceilings.records:
        problems.append(f"plans_staged {run.plans_staged} != parsed records {ceilings.records}")
    if run.bytes != ceilings.size_bytes:
        problems.append(f"run bytes {run.bytes} != snapshot file {ceilings.size_bytes}")
    if run.plans_in_table != ceilings.distinct_keys:
        problems.append(
            f"plans.plans has {run.plans_in_table} rows, expected {ceilings.distinct_keys}"
            " distinct (base_plan_id, plan_id)"
        )
    if run.rows_failed:
        problems.append(f"{run.rows_failed} row(s) failed")
    return problems


# --- one size ---------------------------------------------------------------------------------


def bench_size(
    server: ServerUnderTest, plans: int, args: argparse.Namespace, tmp: Path
) -> SizeResult | None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n== {plans:,} plans (load average {load})", flush=True)
    names: list[str] = []
    work = tmp / f"n{plans}"
    work.mkdir()
    snapshot = work / "snapshot.xml"
    try:
        name = f"pgenough_bench_ingest_{plans}_{uuid.uuid4().hex[:8]}"
        create_database(server.admin_url, name)
        names.append(name)
        url = with_database(server.admin_url, name)
        asyncio.run(migrate_database(url))
        ceilings = measure_ceilings(url, snapshot, plans, args.repeat)
        snapshot.unlink()
        result = SizeResult(plans, name, ceilings)
        for i in range(args.e2e_repeat):
            if i:  # every end-to-end repetition ingests into a fresh, empty database
                name = f"pgenough_bench_ingest_{plans}_{uuid.uuid4().hex[:8]}"
                create_database(server.admin_url, name)
                names.append(name)
                url = with_database(server.admin_url, name)
                asyncio.run(migrate_database(url))
            logs = work / f"e2e{i + 1}"
            logs.mkdir()
            run, problems = end_to_end(url, plans, logs, logs, args.timeout)
            if run is None:
                result.problems += problems
                _show_logs(logs)
                break
            problems = verify(plans, ceilings, run)
            result.problems += problems
            result.runs.append(run)
            print(
                f"  e2e #{i + 1}: fetch {run.fetch_s:.2f}s + process {run.process_s:.2f}s ="
                f" {run.e2e_s:.2f}s, {down(plans / run.e2e_s)} plans/s, fetch RSS"
                f" {up(run.fetch_rss_kib / 1024)} MiB, checks {'FAILED' if problems else 'ok'}",
                flush=True,
            )
        return result
    finally:
        snapshot.unlink(missing_ok=True)
        if args.keep:
            print(f"  kept database(s): {', '.join(names)}")
        else:
            for name in names:
                drop_database(server.admin_url, name)


def _show_logs(logs: Path) -> None:
    for log in sorted(logs.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-15:]
        print(f"  --- tail of {log.name}:")
        for line in lines:
            print(f"    {line}")


# --- report -----------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _rate(count: int, seconds: float | None) -> str:
    return "n/a" if not seconds else down(count / seconds)


def print_size(r: SizeResult) -> None:
    c = r.ceilings
    n = r.plans
    rows: list[tuple[str, str]] = [
        ("snapshot", f"{c.size_bytes:,} bytes; {c.plans_seen:,} plans, {c.records:,} valid,"
                     f" {c.skipped:,} skipped, {c.distinct_keys:,} distinct keys"),
        ("render (sim, in-process)", f"{c.render_s:.3f}s = {down(n / c.render_s)} plans/s"),
        ("parse-only", f"{c.parse.median:.3f}s = {c.parse.describe(c.plans_seen, 'plans/s')}"),
        ("COPY-only", f"{c.copy.median:.3f}s = {c.copy.describe(c.records, 'rows/s')}"),
    ]  # fmt: skip
    for i, run in enumerate(r.runs, 1):
        tag = f"e2e #{i}" if len(r.runs) > 1 else "e2e"
        rows += [
            (f"{tag}: fetch (started->staged)", f"{run.fetch_s:.3f}s = {_rate(n, run.fetch_s)}"
                                                " plans/s"),
            (f"{tag}: process (staged->processed)", f"{run.process_s:.3f}s ="
             f" startup {_s(run.startup_s)}s + apply {_s(run.apply_s)}s"
             f" ({_rate(run.plans_staged, run.apply_s)} plans/s applied; {run.chunks} chunks)"),
            (f"{tag}: e2e (started->processed)", f"{run.e2e_s:.3f}s = {_rate(n, run.e2e_s)}"
                                                 " plans/s"),
            (f"{tag}: pipeline (fetch + apply)", "n/a" if run.apply_s is None else
             f"{run.fetch_s + run.apply_s:.3f}s = {_rate(n, run.fetch_s + run.apply_s)} plans/s"),
            (f"{tag}: wall", f"{run.wall_s:.3f}s (fetch process {run.fetch_wall_s:.3f}s,"
                             f" process process {run.process_wall_s:.3f}s)"),
            (f"{tag}: fetch worker peak RSS", f"{run.fetch_rss_kib:,} KiB ="
                                              f" {up(run.fetch_rss_kib / 1024)} MiB; VmRSS curve"
                                              f" {run.fetch_rss_curve} MiB"),
            (f"{tag}: process worker peak RSS", f"{up(run.process_rss_kib / 1024)} MiB"),
            (f"{tag}: runs.processed_at", f"{run.processed_at_lag_s:.3f}s before the run was"
                                          " seen PROCESSED (now() = last chunk's tx start)"),
            (f"{tag}: CPU seconds", f"fetch worker {run.fetch_cpu_s:.2f}, process worker"
                                    f" {run.process_cpu_s:.2f}, simulator {run.sim_cpu_s:.2f}"),
            (f"{tag}: run", f"{run.status}, staged {run.plans_staged:,} + skipped"
                            f" {run.plans_skipped:,}, written {run.plans_written:,}, plans table"
                            f" {run.plans_in_table:,}"),
        ]  # fmt: skip
    if r.runs:
        rows.append(("e2e / parse-only", down(r.e2e_rate / c.parse.rate(c.plans_seen), 3)))
    rows.append(("checks", "; ".join(r.problems) if r.problems else "ok"))
    width = max(len(k) for k, _ in rows)
    print(f"\n{r.plans:,} plans (database {r.database})")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


def print_summary(results: list[SizeResult]) -> bool:
    header = (
        f"{'plans':>9} {'e2e plans/s':>12} {'e2e s':>8} {'fetch s':>8} {'process s':>9}"
        f" {'apply s':>8} {'parse plans/s':>13} {'COPY rows/s':>11} {'e2e/parse':>9}"
        f" {'RSS MiB':>8}"
    )
    print("\nSummary (medians)\n" + header)
    for r in results:
        c = r.ceilings
        if not r.runs:
            print(f"{r.plans:>9,} (no end-to-end result)")
            continue
        applies = [x.apply_s for x in r.runs if x.apply_s is not None]
        apply = f"{statistics.median(applies):.3f}" if applies else "n/a"
        print(
            f"{r.plans:>9,} {down(r.e2e_rate):>12} {r.median(lambda x: x.e2e_s):>8.3f}"
            f" {r.median(lambda x: x.fetch_s):>8.3f} {r.median(lambda x: x.process_s):>9.3f}"
            f" {apply:>8} {down(c.parse.rate(c.plans_seen)):>13}"
            f" {down(c.copy.rate(c.records)):>11}"
            f" {down(r.e2e_rate / c.parse.rate(c.plans_seen), 3):>9} {up(r.rss_mib):>8}"
        )
    by_size = {r.plans: r for r in results if r.runs}
    big = by_size.get(TARGET_E2E_SIZE)
    base = by_size.get(RSS_BASE_SIZE)
    print(f"\nTarget (docs/plan-service/benchmarks-history.md): {TARGET}")
    if big is None:
        print(f"  >= {TARGET_E2E:,.0f} plans/s end to end at 1M plans: not measured")
    else:
        print_target(
            f">= {TARGET_E2E:,.0f} plans/s end to end at 1M plans",
            big.e2e_rate >= TARGET_E2E,
            f"{down(big.e2e_rate)} plans/s",
        )
    if base is None or not any(r.runs and r.plans != RSS_BASE_SIZE for r in results):
        print(f"  peak fetch RSS <= {TARGET_RSS_GROWTH}x the 10k figure: not measured")
    else:
        for r in results:
            if r.runs and r.plans != RSS_BASE_SIZE:
                growth = r.rss_mib / base.rss_mib
                print_target(
                    f"peak fetch RSS <= {TARGET_RSS_GROWTH}x the 10k figure, at {r.plans:,}",
                    growth <= TARGET_RSS_GROWTH,
                    f"{up(growth, 3)}x: {up(r.rss_mib)} / {up(base.rss_mib)} MiB",
                )
    print(
        "  a partial snapshot still never data: not measured by this benchmark (the plans"
        " tests check it, e.g. tests/plan_service/ingest/test_pipeline.py)"
    )
    print("Earlier targets (issue 10, docs/plan-service/benchmarks-ingest.md)")
    if big is None:
        print(f"  e2e >= {EARLIER_E2E:,.0f} plans/s at {TARGET_E2E_SIZE:,}: not measured")
        print(f"  fetch RSS <= {TARGET_RSS_MIB:.0f} MiB at {TARGET_E2E_SIZE:,}: not measured")
    else:
        print_target(
            f"e2e >= {EARLIER_E2E:,.0f} plans/s at {TARGET_E2E_SIZE:,}",
            big.e2e_rate >= EARLIER_E2E,
            f"{down(big.e2e_rate)} plans/s",
        )
        print_target(
            f"fetch RSS <= {TARGET_RSS_MIB:.0f} MiB at {TARGET_E2E_SIZE:,}",
            big.rss_mib <= TARGET_RSS_MIB,
            f"{up(big.rss_mib)} MiB",
        )
    for r in results:
        if r.runs:
            ratio = r.e2e_rate / r.ceilings.parse.rate(r.ceilings.plans_seen)
            print_target(
                f"e2e >= {TARGET_PARSE_RATIO} x parse-only at {r.plans:,}",
                ratio >= TARGET_PARSE_RATIO,
                down(ratio, 3),
            )
    return all(not r.problems and r.runs for r in results)


# --- main -------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="End-to-end ingestion benchmark (fetch + process) with parse and COPY"
        " ceilings; see the module docstring."
    )
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="comma-separated snapshot sizes in plans (default: %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="sizes 10000,50000 (smoke run)")
    parser.add_argument("--keep", action="store_true", help="do not drop the databases")
    parser.add_argument(
        "--repeat", type=int, default=3, help="repetitions of each ceiling (median; default 3)"
    )
    parser.add_argument(
        "--e2e-repeat",
        type=int,
        default=1,
        help="end-to-end repetitions per size, each on a fresh database (median; default 1)",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds allowed to each worker process"
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="embedded server")
    args = parser.parse_args(argv)
    raw = ",".join(str(s) for s in QUICK_SIZES) if args.quick else args.sizes
    try:
        args.size_list = [int(s.replace("_", "")) for s in raw.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes: expected comma-separated integers, got {raw!r}")
    if not args.size_list or min(args.size_list) < 1 or args.repeat < 1 or args.e2e_repeat < 1:
        parser.error("sizes, --repeat and --e2e-repeat must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.ingest")
    server = ServerUnderTest.find(args.data_dir)
    facts = server_facts(server.admin_url)
    print(
        f"pgenough ingest benchmark: {platform.python_implementation()}"
        f" {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}"
    )
    print(f"server: {server.label}; " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    print(
        f"sizes {args.size_list}; ceilings x{args.repeat} (median), end to end"
        f" x{args.e2e_repeat}; process workers start after the fetch, concurrency"
        f" {PROCESS_CONCURRENCY}"
    )
    results: list[SizeResult] = []
    with tempfile.TemporaryDirectory(prefix="pgenough-bench-ingest-", dir="/tmp") as tmp:
        for plans in args.size_list:
            result = bench_size(server, plans, args, Path(tmp))
            if result is not None:
                results.append(result)
                print_size(result)
    ok = print_summary(results)
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    if not ok:
        print("\nSOME CHECKS FAILED")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
