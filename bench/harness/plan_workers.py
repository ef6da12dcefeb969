"""The plan service's worker commands as background processes (``Phase``): the load of a
snapshot through the real fetch and process commands, the process worker of a run, the
waits for a fetch to stream and a run to be claimed, and the plans tables' vacuum."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import psycopg
from bench.harness.processes import Simulator, plans_command

from pgenough_plans.ingest.runs import RunStatus

T = TypeVar("T")
PROCESS_CONCURRENCY = 2
START_ATTEMPTS = 3


class Phase:
    """A worker command running in the background; when it ended."""

    def __init__(
        self,
        name: str,
        command: list[str],
        env: dict[str, str],
        log: IO[bytes],
        cwd: Path,
        cpus: frozenset[int] | None = None,
    ) -> None:
        self.name = name
        self.started = time.monotonic()
        self.ended: float | None = None
        self.proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=log,
            env=env,
            cwd=cwd,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus is not None else None,
        )
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
            " FROM plans.runs ORDER BY id DESC LIMIT 1"
        ).fetchone()
    if row is None:
        raise RuntimeError("no run recorded")
    return tuple(row)


def load(url: str, plans: int, logs: Path) -> None:
    """Ingest snapshot version 1 through the real commands; print what it took."""
    env = worker_env(url)
    cmd = plans_command()
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
        conn.execute("VACUUM ANALYZE plans.plans")
        counts = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE ever_online), min(starts_at)::date,"
            " max(starts_at)::date FROM plans.plans"
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


def process_phase(
    url: str,
    env: dict[str, str],
    log: IO[bytes],
    tmp: Path,
    cpus: frozenset[int] | None,
    serve: bool,
) -> Phase:
    """``pgenough worker process`` for the latest run: ``--until-idle``, or (``serve``) as a
    deployment runs it, stopped with SIGTERM once the run is processed. ``--until-idle``
    starts none of the worker's periodic duties (the plans vacuum among them)."""
    command = [plans_command(), "worker", "process", "--concurrency", str(PROCESS_CONCURRENCY)]
    if not serve:
        return Phase("process", [*command, "--until-idle"], env, log, tmp, cpus)
    phase = Phase("process", command, env, log, tmp, cpus)

    def stop_when_processed() -> None:
        while phase.ended is None and last_run(url)[1] not in (
            RunStatus.PROCESSED,
            RunStatus.FAILED,
        ):
            time.sleep(0.05)
        if phase.ended is None:
            phase.proc.send_signal(signal.SIGTERM)

    threading.Thread(target=stop_when_processed, daemon=True).start()
    return phase


class NotStarted(RuntimeError):
    """A worker exited before it did any work (e.g. PostgreSQL refused its connection)."""


def wait_streaming(url: str, fetch: Phase, timeout: float = 60.0) -> None:
    """Until the fetch's first COPY batch landed (its start-up is not ingestion)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if staged_rows(conn) > 0:
                return
            if fetch.ended is not None:
                raise NotStarted(f"the fetch exited {fetch.proc.returncode} before streaming")
            time.sleep(0.02)
    raise NotStarted(f"the fetch staged nothing within {timeout:g} s")


def retried(what: str, attempt: Callable[[], T]) -> T:
    """``attempt()``, again (with a printed note) when a worker could not even start: the
    shared PostgreSQL of a busy machine may refuse a connection for a moment."""
    for n in range(1, START_ATTEMPTS + 1):
        try:
            return attempt()
        except NotStarted as exc:
            if n == START_ATTEMPTS:
                raise
            print(f"  ({what}: {exc}; attempt {n + 1} of {START_ATTEMPTS})", flush=True)
            time.sleep(2.0)
    raise AssertionError("unreachable")


def staged_rows(conn: psycopg.Connection[Any]) -> int:
    """Rows COPYed into the running run's staging table so far (PostgreSQL's statistics,
    flushed by the fetch's backend at most once a second)."""
    row = conn.execute(
        "SELECT coalesce(sum(s.n_tup_ins), 0) FROM plans.runs r"
        " JOIN pg_stat_user_tables s ON s.schemaname = 'plans'"
        " AND s.relname = 'staging_' || r.id WHERE r.status = 'RUNNING'"
    ).fetchone()
    return int(row[0]) if row else 0


PLANS_TABLES = ("plans.plans", "plans.plan_seen", "plans.plan_failures", "plans.runs")
"""What ingestion writes (besides its staging tables, dropped after each run)."""


def vacuum_plans(url: str) -> None:
    """``VACUUM (ANALYZE)`` of the plans tables before a measured cell: each starts without
    the dead rows of the ingestions before it, with fresh statistics (autovacuum stays on)."""
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM (ANALYZE) {', '.join(PLANS_TABLES)}")
    print(f"  (VACUUM (ANALYZE) of the plans tables: {time.perf_counter() - t0:.1f} s)", flush=True)
