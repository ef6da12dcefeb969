"""``bench.ingest`` end to end: the real fetch and process commands against the simulator,
watched for RSS and CPU (``ProcessWatcher``), their run read back (``EndToEnd``)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from bench.harness.plan_workers import PROCESS_CONCURRENCY
from bench.harness.processes import Reaped, Simulator, plans_command, run_measured
from bench.ingest import CLAIM_POLL, VERSION


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


@dataclass(frozen=True)
class Processing:
    """How the run is processed: ``workers`` processes of ``concurrency`` chunk tasks each."""

    workers: int = 1
    concurrency: int = PROCESS_CONCURRENCY


def _process(
    command: list[str], env: dict[str, str], workdir: Path, log: Path, timeout: float, n: int
) -> Reaped:
    """``n`` process workers at once, each under the measuring launcher: the longest wall
    time, the largest peak RSS, the CPU seconds summed, the first failure's exit code."""
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = []
        for i in range(n):
            out = log if n == 1 else log.with_name(f"{log.stem}-{i + 1}{log.suffix}")
            futures.append(pool.submit(_one_process, command, env, workdir, out, timeout))
        reaped = [f.result() for f in futures]
    return Reaped(
        code=next((r.code for r in reaped if r.code), 0),
        wall_s=max(r.wall_s for r in reaped),
        maxrss_kib=max(r.maxrss_kib for r in reaped),
        cpu_s=sum(r.cpu_s for r in reaped),
    )


def _one_process(
    command: list[str], env: dict[str, str], workdir: Path, log: Path, timeout: float
) -> Reaped:
    with log.open("ab") as out:
        return run_measured(command, env, workdir, out, timeout)


def end_to_end(
    url: str,
    plans: int,
    workdir: Path,
    logs: Path,
    timeout: float,
    processing: Processing = Processing(),
) -> tuple[EndToEnd | None, list[str]]:
    env = {**os.environ, "DATABASE_URL": url, "PGENOUGH_LOG_LEVEL": "INFO"}
    env.pop("PGENOUGH_CONFIG", None)
    cmd = plans_command()
    with (
        (logs / "sim.log").open("ab") as sim_log,
        (logs / "fetch.log").open("ab") as fetch_log,
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
            concurrency = ["--concurrency", str(processing.concurrency)]
            processed = _process(
                [cmd, "worker", "process", "--until-idle", *concurrency],
                env,
                workdir,
                logs / "process.log",
                timeout,
                processing.workers,
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
