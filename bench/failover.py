"""Failover under load (issue 25): N failovers with asynchronous replication and N with a
synchronous standby, each measured for what it loses and how long nothing commits.

Run it from the repository root, with the project's virtualenv and the PostgreSQL 15 binaries
(``/usr/lib/postgresql/15/bin``: ``initdb``, ``pg_basebackup``, ``pg_waldump``); as root the
servers run as the ``postgres`` user::

    .venv/bin/python -m bench.failover             # 5 failovers per mode and link delay
    .venv/bin/python -m bench.failover --quick     # 1 per mode, at one delay: a smoke run

(``make bench-failover`` runs the first line: 20 failovers, about 5 min on a quiet 2-core
machine; ``--quick``, 2 failovers, about 20 s.)

**Each failover** on servers of its own (``tests/helpers/standby.py``): a PostgreSQL 15
primary and one hot standby, ``synchronous_commit = on`` (a commit is acknowledged once its
WAL is written: ``fsync`` stays off, which the standby's walsender does not wait for), and in
``sync`` mode ``synchronous_standby_names = '*'`` (acknowledged once the standby has flushed
it). The standby streams through a link of our own that delays each chunk by
``--wal-delay-ms`` one way (0: none), as a network between two hosts does. ``--workers``
``pgenough worker run tests.helpers.failoverapp:app`` processes and a producer thread, all on
the multi-host URL (``host=P,S ... target_session_attrs=read-write``), run ``--before``
seconds: the producer enqueues ``--rate`` jobs a second, each job's effect is written in the
transaction that completes it (``tests/helpers/failover.py``). Then **the primary's host is
lost**: the replication link is cut, what is in flight on it dropped, and the primary stopped
with ``pg_ctl stop -m immediate`` (a process crash alone loses nothing in flight: the kernel
still delivers what the walsender had sent). The standby is promoted (after ``--detect``
seconds, a failover manager's detection time: 0 by default, so the figures are the product's
own), the load goes on ``--after`` seconds, the producer stops and the workers drain.

**Figures per failover**: on the client side, acknowledged enqueues lost (their number is
neither done nor waiting on the new primary), acknowledged completions lost (the job ran
again), the in-doubt ones (the connection broke during their COMMIT: neither), the loss window
(ms from the newest acknowledged enqueue the new primary kept to the newest acknowledged one),
the unavailability (ms from the first failed enqueue to the first acknowledged one after it)
and the workers' resumption (first acknowledged completion after the promotion); on the
server side, from ``pg_waldump`` of the old primary's WAL past what the standby had received:
the bytes and the commits not replicated, and the ms between the last replicated commit and
the last one written. Per mode and delay: median and max.

Expectation: ``sync`` loses nothing acknowledged (asserted: the run fails otherwise); ``async``
loses about what was written during the last ``--wal-delay-ms`` (plus the walsender's own
lag): the commits in flight on the link when the host was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from bench.harness.machine import refuse_if_busy
from tests.helpers import failoverapp
from tests.helpers.failover import OK, Figures, Producer, measure, project_env
from tests.helpers.procs import WORKER_STARTED, Proc
from tests.helpers.standby import BIN, SERVER_USER, StandbyPair, missing, wait_for

from pgenough.core import migrate

SPEC = "tests.helpers.failoverapp:app"
COMMIT = re.compile(r"desc: COMMIT (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) ")
LSN_OF = re.compile(r"lsn: ([0-9A-F]+/[0-9A-F]+)")
DRAIN = 60.0


class DelayLink:
    """A TCP port on 127.0.0.1 in front of a unix socket that delivers each chunk, in order,
    ``delay`` seconds after it was read, both ways; ``cut`` drops every connection with what
    is in flight on it and refuses new ones (the far host is gone)."""

    def __init__(self, socket_path: str, delay: float) -> None:
        self.socket_path = socket_path
        self.delay = delay
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self.socket_path)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # cut: what the pipes held is dropped
        finally:
            self._writers -= {writer, up_writer}

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def pump() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await reader.read(65536):
                    queue.put_nowait((self.loop.time() + self.delay, data))
            queue.put_nowait(None)

        pumping = asyncio.ensure_future(pump())
        try:
            with contextlib.suppress(ConnectionError, OSError):
                while (item := await queue.get()) is not None:
                    due, data = item
                    if due > self.loop.time():
                        await asyncio.sleep(due - self.loop.time())
                    writer.write(data)
                    await writer.drain()
            writer.close()
        finally:
            pumping.cancel()

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()  # what is queued on it is dropped
        self._writers.clear()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()  # the pipes, with what they hold for delivery

    def cut(self) -> None:
        asyncio.run_coroutine_threadsafe(self._cut(), self.loop).result(10)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.cut()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@dataclass
class WalTail:
    """What the old primary wrote past what the standby had received."""

    bytes: int = 0
    commits: int = 0
    window_ms: float = 0.0
    """From the last commit the standby had to the last one the primary wrote."""


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", SERVER_USER, "--", *command] if os.geteuid() == 0 else command


def wal_tail(pair: StandbyPair, received: str, last_replicated: datetime | None) -> WalTail:
    """``pg_waldump`` of the old primary's WAL from ``received`` (the standby's receive
    position when the primary was lost) to its end."""
    result = subprocess.run(
        _as_server_user(
            [str(BIN / "pg_waldump"), "-p", str(pair.primary_dir / "pg_wal"), "-s", received]
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    tail = WalTail()
    lsns = [m.group(1) for m in LSN_OF.finditer(result.stdout)]
    if lsns:
        tail.bytes = max(0, _lsn(lsns[-1]) - _lsn(received))
    commits = [datetime.fromisoformat(m.group(1)) for m in COMMIT.finditer(result.stdout)]
    tail.commits = len(commits)
    if commits and last_replicated is not None:
        newest = commits[-1].replace(tzinfo=last_replicated.tzinfo)
        tail.window_ms = max(0.0, (newest - last_replicated).total_seconds() * 1000)
    return tail


def _lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def _one(url: str, query: str) -> Any:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def _through_link(pair: StandbyPair, link: DelayLink) -> None:
    """Stream the standby's WAL through ``link``."""
    conninfo = f"host=127.0.0.1 port={link.port} user=postgres application_name=standby"
    with psycopg.connect(pair.standby_url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET primary_conninfo = '{conninfo}'")
        conn.execute("SELECT pg_reload_conf()")
    streaming = (
        "SELECT count(*) FROM pg_stat_wal_receiver"
        f" WHERE status = 'streaming' AND sender_port = {link.port}"
    )
    wait_for(lambda: _one(pair.standby_url, streaming) == 1, "the standby streams via the link")


@dataclass
class Run:
    mode: str
    delay_ms: float
    figures: Figures
    tail: WalTail
    commit_ms: float
    """The producer's median enqueue (INSERT and COMMIT) before the loss."""
    rate: float
    """Enqueues acknowledged a second before the loss."""


def failover(args: argparse.Namespace, mode: str, delay_ms: float, workdir: Path) -> Run:
    pair = StandbyPair(synchronous_commit=True, synchronous=mode == "sync")
    link: DelayLink | None = None
    procs: list[Proc] = []
    producer: Producer | None = None
    try:
        pair.start()
        link = DelayLink(f"{pair.root}/.s.PGSQL.{pair.primary_port}", delay_ms / 1000)
        link.start()
        _through_link(pair, link)
        if mode == "sync":
            pair.wait_synchronous()
        url = pair.failover_url()
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn)
            conn.execute(failoverapp.EFFECTS_TABLE)
        env = project_env(
            url,
            PGENOUGH_WORKER_LEASE="5",
            PGENOUGH_RESCUE_INTERVAL="1",
            PGENOUGH_WORKER_POLL_INTERVAL="0.5",
            PGENOUGH_LOG_LEVEL="WARNING",
        )
        tag = f"{mode}-{delay_ms:g}-{time.time_ns()}"
        files = [workdir / f"acks-{tag}-{i}" for i in range(args.workers)]
        for path in files:
            worker_env = {**env, "PGENOUGH_LOG_LEVEL": "INFO", failoverapp.ACK_FILE: str(path)}
            procs.append(
                Proc.pgenough(
                    worker_env, "worker", "run", SPEC, "--concurrency", str(args.concurrency)
                )
            )
        for proc in procs:
            proc.expect(lambda line: bool(WORKER_STARTED.search(line)), timeout=60)
        producer = Producer(url, args.rate, hold=args.hold)
        producer.start()
        loaded_at = time.time()
        time.sleep(args.before)  # load, before the loss

        stopped_at = time.time()
        link.cut()
        pair.kill_primary()  # pg_ctl stop -m immediate's SIGQUIT, within a millisecond
        received = _one(pair.standby_url, "SELECT pg_last_wal_receive_lsn()::text")
        if args.detect:
            time.sleep(args.detect)
        pair.promote()
        promoted_at = time.time()
        new = pair.standby_url
        last_replicated = _one(new, "SELECT pg_last_xact_replay_timestamp()")
        time.sleep(args.after)  # load, after the promotion
        producer.stop()
        deadline = time.monotonic() + DRAIN
        while _one(new, "SELECT count(*) FROM pgenough.jobs"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the workers did not drain within {DRAIN:g} s")
            time.sleep(0.2)
        figures = measure(mode, producer, files, new, stopped_at, promoted_at)
        tail = wal_tail(pair, received, last_replicated)
        if any(proc.popen.poll() is not None for proc in procs):
            raise RuntimeError("a worker exited during the failover")
        before = [a for a in producer.attempts if a.outcome == OK and a.at <= stopped_at]
        commit_ms = 1000 * statistics.median(a.took for a in before) if before else math.nan
        rate = len(before) / max(1e-9, stopped_at - loaded_at)
        return Run(mode, delay_ms, figures, tail, commit_ms, rate)
    finally:
        if producer is not None and producer.is_alive():
            producer.stop()
        for proc in procs:
            proc.kill()
        if link is not None:
            link.close()
        pair.close()


def line(run: Run) -> str:
    f, t = run.figures, run.tail
    return (
        f"{run.mode:5} {run.delay_ms:4g} ms | {run.rate:4.0f} enqueues/s, commit"
        f" {run.commit_ms:4.1f} ms | acknowledged {f.acknowledged:5}: enqueues lost"
        f" {len(f.enqueues_lost):3}, completions lost {len(f.completions_lost):3}, in doubt"
        f" {f.enqueues_in_doubt}+{f.completions_in_doubt} | loss window {f.loss_window_ms:6.1f} ms"
        f" | WAL not replicated {t.bytes:7} B, {t.commits:3} commits, {t.window_ms:6.1f} ms |"
        f" unavailable {f.unavailable_ms:5.0f} ms (stop to promoted"
        f" {1000 * (f.promoted_at - f.stopped_at):4.0f} ms), workers back"
        f" {f.workers_resumed_ms:5.0f} ms after | duplicates {f.duplicates}"
    )


def _stat(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} / {max(values):.1f}"


def report(runs: list[Run]) -> str:
    out = ["", "median / max per mode and link delay:"]
    out.append(
        "mode  delay | commit ms | enqueues lost | completions lost | in doubt |"
        " loss window ms | WAL B not replicated | commits not replicated |"
        " WAL ms not replicated | unavailable ms | workers back ms"
    )
    groups: dict[tuple[str, float], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.mode, run.delay_ms), []).append(run)
    for (mode, delay), group in groups.items():
        fs = [r.figures for r in group]
        ts = [r.tail for r in group]
        out.append(
            f"{mode:5} {delay:4g} ms (n={len(group)}) | {_stat([r.commit_ms for r in group])}"
            f" | {_stat([len(f.enqueues_lost) for f in fs])}"
            f" | {_stat([len(f.completions_lost) for f in fs])}"
            f" | {_stat([f.enqueues_in_doubt + f.completions_in_doubt for f in fs])}"
            f" | {_stat([f.loss_window_ms for f in fs])}"
            f" | {_stat([t.bytes for t in ts])} | {_stat([t.commits for t in ts])}"
            f" | {_stat([t.window_ms for t in ts])}"
            f" | {_stat([f.unavailable_ms for f in fs])}"
            f" | {_stat([f.workers_resumed_ms for f in fs])}"
        )
    return "\n".join(out)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--failovers", type=int, default=5, help="per mode and link delay")
    parser.add_argument("--modes", default="async,sync")
    parser.add_argument(
        "--wal-delay-ms", default="0,5", help="one-way delays of the replication link, ms"
    )
    parser.add_argument("--rate", type=float, default=200.0, help="enqueues a second")
    parser.add_argument("--hold", type=float, default=0.005, help="s each job's transaction")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--before", type=float, default=5.0, help="s of load before the loss")
    parser.add_argument("--after", type=float, default=5.0, help="s of load after promotion")
    parser.add_argument("--detect", type=float, default=0.0, help="s from the loss to promote")
    parser.add_argument("--quick", action="store_true", help="1 failover per mode at 5 ms, 2 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.failovers, args.wal_delay_ms, args.before, args.after = 1, "5", 2.0, 2.0
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.failover")
    reason = missing()
    if reason is not None:
        sys.exit(f"bench.failover: {reason}")
    modes = [m for m in args.modes.split(",") if m]
    delays = [float(d) for d in str(args.wal_delay_ms).split(",") if d]
    started = time.monotonic()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="pgenough-failover-") as tmp:
        for delay in delays:
            for mode in modes:
                for _ in range(args.failovers):
                    run = failover(args, mode, delay, Path(tmp))
                    print(line(run), flush=True)
                    runs.append(run)
    print(report(runs))
    print(f"\n{len(runs)} failovers in {time.monotonic() - started:.0f} s")
    lost = [
        r
        for r in runs
        if r.mode == "sync" and (r.figures.enqueues_lost or r.figures.completions_lost)
    ]
    broken = [
        r
        for r in runs
        if r.figures.duplicates or r.figures.undone or r.figures.lost_after_promotion
    ]
    if lost or broken:
        sys.exit(
            f"bench.failover: {len(lost)} sync failover(s) lost acknowledged commits,"
            f" {len(broken)} did a job twice, left one undone or lost one enqueued after the"
            " promotion"
        )


if __name__ == "__main__":
    main()
