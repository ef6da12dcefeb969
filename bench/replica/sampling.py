"""The durable primary and hot standby of ``bench.replica`` (``DurablePair``), and what it
samples on them while it measures: the standby's replay lag and what its startup process
waits on, the processes' CPU, the API's metrics, and a probe search's plan."""

from __future__ import annotations

import collections
import contextlib
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from bench.harness.api_process import Api, http_get
from bench.harness.report import up
from bench.replica import DURABLE, PROBE_EVERY, PROBE_QUERY, SAMPLE_EVERY
from tests.helpers.standby import StandbyPair

from pgenough_plans.api.search import Q as SEARCH_Q


class DurablePair(StandbyPair):
    """The test suite's primary and standby, with PostgreSQL's durable defaults
    (``standby_conf``: more lines for the standby's postgresql.conf)."""

    def __init__(self, standby_conf: str = "") -> None:
        super().__init__()
        self.standby_conf = standby_conf

    def start(self) -> None:
        super().start()
        for data in (self.standby_dir, self.primary_dir):
            self._stop(data)
        for data in (self.primary_dir, self.standby_dir):
            with (data / "postgresql.conf").open("a") as conf:
                conf.write(DURABLE)
                if data == self.standby_dir:
                    conf.write(self.standby_conf)
        self._start(self.primary_dir, self.primary_port)
        self.start_standby()

    def postmaster(self, data: Path) -> int:
        return int((data / "postmaster.pid").read_text().split()[0])


def family(pid: int) -> list[int]:
    """``pid`` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rpartition(")")[2].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, []))
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User plus system CPU time of ``pids`` so far (the ones still alive)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def startup_process(postmaster: int) -> int | None:
    """The standby's WAL replay process (``postgres: startup recovering ...``)."""
    for pid in family(postmaster):
        with contextlib.suppress(OSError):
            if b"startup" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    return None


def pin_tree(pid: int, cpus: Iterable[int] | None) -> None:
    """``pid``, its descendants and all their threads onto ``cpus`` (None: every CPU)."""
    target = set(cpus) if cpus is not None else os.sched_getaffinity(0)
    for p in family(pid):
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(tid), target)


@dataclass
class LagSamples:
    """The replica's lag through a cell, from the primary and from the API."""

    replay_lag_s: list[float] = field(default_factory=list)
    bytes_behind: list[int] = field(default_factory=list)
    api_lag_s: list[float] = field(default_factory=list)
    reads: dict[str, float] = field(default_factory=dict)
    replay_waits: collections.Counter[str] = field(default_factory=collections.Counter)
    """Samples of what the standby's replay process was doing (wait event, or CPU)."""
    probes: list[tuple[float, int, int]] = field(default_factory=list)
    """PROBE_QUERY on the standby, EXPLAIN ANALYZE'd every PROBE_EVERY samples: (execution
    ms, heap fetches, shared buffers hit or read)."""
    vacuums: tuple[int, int] = (0, 0)
    """VACUUMs of plans.plans through the cell: (the duty's or anyone's, autovacuum's)."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds used through the cell, by process: where the replica's core went."""

    def summary(self) -> str:
        def p99(xs: list[float]) -> float:
            return sorted(xs)[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)] if xs else 0.0

        lag = self.replay_lag_s
        total = max(1, sum(self.replay_waits.values()))
        api = [x for x in self.api_lag_s if math.isfinite(x)]
        lost = len(self.api_lag_s) - len(api)
        return (
            f"replay_lag max {up(max(lag, default=0.0), 3)} s, p99 {up(p99(lag), 3)} s;"
            f" bytes behind max {max(self.bytes_behind, default=0):,};"
            f" the API's measure max {up(max(api, default=0.0), 3)} s"
            + (f" ({lost} samples +Inf)" if lost else "")
            + f"; searches read {', '.join(f'{k} {v:.0f}' for k, v in sorted(self.reads.items()))}"
            + "; probe search (ms, heap fetches, buffers) first "
            + (f"{self.probes[0]}, worst {max(self.probes)}" if self.probes else "none")
            + f"; plans vacuumed {self.vacuums[0]} time(s), autovacuumed {self.vacuums[1]}"
            + "; replay was "
            + ", ".join(f"{k} {n / total:.0%}" for k, n in self.replay_waits.most_common(5))
            + f"; CPU s {', '.join(f'{k} {up(v, 1)}' for k, v in self.cpu.items())}"
        )


def api_metrics(api: Api) -> tuple[float, dict[str, float]]:
    """The API's replica lag (the largest, if it has several replicas) and reads per target."""
    _, body = http_get(api.base + "/metrics")
    lag, reads = 0.0, {}
    for line in body.decode().splitlines():
        if m := re.match(r"pgenough_api_replica_lag_seconds(?:\{[^}]*\})? (\S+)", line):
            lag = max(lag, float(m[1]))
        elif m := re.match(r"pgenough_api_replica_reads_total\{([^}]*)\} (\S+)", line):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m[1]))
            where = labels.get("target", "?")
            if labels.get("replica"):
                where += f" {labels['replica']}"
            key = f"{labels.get('reader', '?')}: {where}"
            reads[key] = reads.get(key, 0.0) + float(m[2])
    return lag, reads


def explained(conn: psycopg.Connection[Any]) -> tuple[float, int, int]:
    """PROBE_QUERY's execution time, heap fetches and shared buffers, as it runs now."""
    params = PROBE_QUERY.sql_params(None, PROBE_QUERY.offset)
    row = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + SEARCH_Q["page"], params
    ).fetchone()
    assert row is not None
    plan = row[0][0]
    fetches = 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal fetches
        fetches += int(node.get("Heap Fetches", 0))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    top = plan["Plan"]
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return (round(float(plan["Execution Time"]), 2), fetches, buffers)


def plans_vacuums(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT vacuum_count, autovacuum_count FROM pg_stat_user_tables"
            " WHERE relid = 'plans.plans'::regclass"
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


@contextlib.contextmanager
def sampling(primary_url: str, api: Api | None, pair: DurablePair) -> Iterator[LagSamples]:
    """The replica's lag, what its replay waits on, the API's view (``api``: None without
    one) and the CPU of each side, sampled through the ``with`` block."""
    samples = LagSamples()
    stop = threading.Event()
    reads0 = api_metrics(api)[1] if api is not None else {}
    standby = pair.postmaster(pair.standby_dir)
    replay = startup_process(standby)
    groups = {
        "api": lambda: [api.proc.pid] if api is not None else [],
        "standby replay": lambda: [replay] if replay is not None else [],
        "standby (all)": lambda: family(standby),
        "primary (all)": lambda: family(pair.postmaster(pair.primary_dir)),
    }
    # A group's figure is its live processes' CPU at the end less at the start: a process
    # that exits within the cell is left out (the API's and the replay's live throughout).
    before = {k: cpu_seconds(pids()) for k, pids in groups.items()}
    vacuums0 = plans_vacuums(primary_url)
    t0 = time.monotonic()

    def run() -> None:
        with (
            psycopg.connect(primary_url, autocommit=True) as conn,
            psycopg.connect(
                pair.standby_url, autocommit=True, cursor_factory=psycopg.ClientCursor
            ) as standby_conn,
        ):
            tick = 0
            while not stop.wait(SAMPLE_EVERY):
                if tick % PROBE_EVERY == 0:
                    samples.probes.append(explained(standby_conn))
                tick += 1
                waiting = standby_conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')"
                    " FROM pg_stat_activity WHERE backend_type = 'startup'"
                ).fetchone()
                if waiting is not None:
                    samples.replay_waits[str(waiting[0])] += 1
                row = conn.execute(
                    "SELECT coalesce(extract(epoch FROM replay_lag), 0),"
                    " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) FROM pg_stat_replication"
                ).fetchone()
                if row is not None:
                    samples.replay_lag_s.append(float(row[0]))
                    samples.bytes_behind.append(int(row[1] or 0))
                if api is not None:
                    with contextlib.suppress(OSError):
                        samples.api_lag_s.append(api_metrics(api)[0])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(10)
        reads1 = api_metrics(api)[1] if api is not None else {}
        samples.reads = {k: v - reads0.get(k, 0.0) for k, v in reads1.items()}
        samples.cpu = {k: cpu_seconds(pids()) - before[k] for k, pids in groups.items()}
        samples.cpu["wall"] = time.monotonic() - t0
        vacuums1 = plans_vacuums(primary_url)
        samples.vacuums = (vacuums1[0] - vacuums0[0], vacuums1[1] - vacuums0[1])
