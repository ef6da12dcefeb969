"""``bench.boundary connections``: W ``pgenough worker run`` processes, direct and through
PgBouncer in transaction mode; the server connections they hold, the jobs they drain, what
the pooler breaks, and its report."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from bench._boundary_tasks import noop
from bench.boundary import TOO_MANY
from bench.boundary.fanout import CHANNEL
from bench.harness.api_process import free_port
from bench.harness.machine import fmt_busy, wait_quiet
from bench.harness.report import table
from bench.harness.server import ROOT, Server
from bench.harness.systems.ours import setup_ours
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgenough.core import Gap, publish, subscribe

TASKS_APP = "bench._boundary_tasks:app"
SAMPLE_S = 0.01
START_TIMEOUT = 120.0
DRAIN_TIMEOUT = 60.0
STOP_TIMEOUT = 60.0
STARTED_MARK = "task(s); queues"
"""What ``pgenough worker run`` logs once its pool is open and migrated (cli.worker_run)."""


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
            setup_ours(direct)
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
