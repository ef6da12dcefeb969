"""Read isolation with a streaming replica: ``/search`` during a 1M ingestion, the API on a hot
standby on one core and the primary with the ingestion on the other, against everything on one
shared server, in one run (issue 24).

Run it from the repository root, with the project's virtualenv, ``wrk`` (``apt-get install -y
wrk``) and the PostgreSQL 15 binaries (``/usr/lib/postgresql/15/bin``: ``initdb``,
``pg_basebackup``); as root the servers run as the ``postgres`` user::

    .venv/bin/python -m bench.replica                   # 1M plans, 10 s per baseline
    .venv/bin/python -m bench.replica --quick           # 100k plans, 3 s: a smoke run

(``make bench-replica`` runs the first line. About 20 min on a quiet 2-core machine at 1M.)

**Servers.** A primary and a hot standby of PostgreSQL 15 made for the run
(``tests/helpers/standby.py``: ``initdb``, ``pg_basebackup -R -X stream``), then set to
PostgreSQL's durable defaults (``fsync``, ``synchronous_commit``, ``full_page_writes`` on;
the test pair turns them off) and restarted; replication is asynchronous, autovacuum on.
Both are removed at the end.

**Load**: ``--plans`` plans through the real ingestion path into the primary (as
``bench/api.py`` does), ``VACUUM ANALYZE``, then until the standby has replayed it all.

**Placements** (``sched_setaffinity``; a cluster is pinned through its postmaster and every
process it has forked, and the backends it forks later inherit it):

- ``isolated``: CPU 0: the primary, the fetch and process workers, the simulator; CPU 1: the
  standby, ``pgenough api`` with ``PGENOUGH_API_READ_URL`` = the standby (its writes, its
  cache's LISTEN and its LSN probes go to the primary, on CPU 0) and wrk.
- ``shared``: one server: the standby stopped, ``pgenough api`` reading the primary (no
  ``PGENOUGH_API_READ_URL``), every process on both CPUs wherever the kernel puts it.

**Steps**, each measured cell on freshly vacuumed plans tables (as in ``bench/api.py``):

1. ``isolated``: the rate: cold searches (``bench/api.py``'s ``cold``: random 1-30 day
   windows, random offsets, ``limit=50``) at 1,000/s alone for ``--duration`` s, then 750,
   500, 250 until one has p99 <= 50 ms and no 503: the rate the replica sustains alone; that
   run is the baseline of the ratios.
2. ``isolated``, a new snapshot of the same plans fetched and processed with the searches at
   that rate for the whole of each phase (``bench/api.py``'s ``ingest_cell``; the process
   worker runs as deployed, its periodic duties on); meanwhile a thread samples the
   primary's ``pg_stat_replication`` (``replay_lag``, and the bytes not yet replayed) and
   the API's ``/metrics`` (its own lag measure, reads per target) every 0.25 s. Then the
   same at the next lower rate of the list, with its own alone baseline: the rate step 1
   chose keeps the replica's core nearly busy with searches alone, the next one leaves it
   room for the replay.
3. The WAL streaming cost: a snapshot ingested with no searches, on CPU 0, the standby
   streaming; then the standby stopped and the next likewise: ingestion with a replica
   against without one, in the same placement.
4. ``shared``: at each of the two rates, the searches alone, then a snapshot ingested under
   them.

Figures: wrk's (``bench/api.py``: rps, p50/p99/max, non-2xx = 503 ``TOO_BUSY``), the
ingestion's fetch s, process s and plans/s end to end (``plans.runs``), the replica's lag
over the run (max and p99 of ``replay_lag``; max bytes behind), and the searches the API sent
to the primary instead (past ``PGENOUGH_API_MAX_REPLICA_LAG``, 5 s by default).

Target (issue 24): during a 1M ingestion, ``isolated`` p99 <= 1.5x its alone p99 and no 503,
at a rate the replica sustains alone with p99 <= 50 ms. Display as in ``bench/api.py``: rates
truncated, latencies and ratios rounded up.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from bench.harness.api_process import Api, http_get
from bench.harness.machine import (
    refuse_if_busy,
)
from bench.harness.plan_workers import (
    last_run,
    load,
    process_phase,
    vacuum_plans,
    worker_env,
)
from bench.harness.processes import (
    Simulator,
    pgenough_command,
)
from bench.harness.report import (
    down,
    up,
)
from bench.harness.server import (
    migrate_database,
    server_facts,
)
from bench.harness.under_load import (
    Cell,
    Placement,
    ingest_cell,
)
from bench.harness.wrk import (
    Result,
    run_wrk,
    show,
)
from tests.helpers.standby import BIN, StandbyPair, missing

from pgenough_plans.api.search import Q as SEARCH_Q
from pgenough_plans.api.search import SearchQuery

DEFAULT_PLANS = 1_000_000
QUICK_PLANS = 100_000
RATES = (1_000, 750, 500, 250)
TARGET_P99_MS = 50.0
TARGET_RATIO = 1.5
STANDBY_FACTS = ("hot_standby_feedback", "max_standby_streaming_delay")
SAMPLE_EVERY = 0.25
PROBE_EVERY = 8
PROBE_QUERY = SearchQuery(
    starts_at=datetime(2021, 6, 1, tzinfo=UTC), ends_at=datetime(2021, 6, 15, tzinfo=UTC),
    limit=50, offset=1000,
)  # fmt: skip
"""A cold search as wrk sends them (a deep offset: its skipped plans are read too)."""
DURABLE = "fsync = on\nsynchronous_commit = on\nfull_page_writes = on\n"
"""PostgreSQL's defaults, which the test pair turns off for speed: measured as deployed."""


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


def sustained_rate(
    api: Api, pair: DurablePair, placement: Placement, duration: int, tmp: Path
) -> tuple[Result, LagSamples]:
    """The first of RATES the API answers alone with p99 <= TARGET_P99_MS and no 503, and
    what was sampled through it."""
    r: Result | None = None
    for i, rate in enumerate(RATES):
        vacuum_plans(pair.primary_url)
        with sampling(pair.primary_url, api, pair) as samples:
            r = run_wrk(
                api, f"cold@{rate} alone [{placement.name}]", "cold", duration, tmp, 6 + i, rate,
                cpus=placement.api,
            )  # fmt: skip
        show(r)
        if r.p99_ms <= TARGET_P99_MS and r.non2xx == 0 and r.socket_errors == 0:
            r.note = f"  [rate {rate}]"
            return r, samples
    assert r is not None
    r.note = f"  [rate {RATES[-1]}: not sustained]"
    return r, samples


def rate_of(r: Result) -> int:
    m = re.search(r"cold@(\d+)", r.name)
    assert m is not None
    return int(m[1])


def ingest_only(url: str, plans: int, version: int, cpus: frozenset[int] | None, tmp: Path) -> Cell:
    """Snapshot ``version`` fetched and processed with no searches, on ``cpus``."""
    env = worker_env(url)
    cmd = pgenough_command()

    def placed() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    with (tmp / "ingest-only.log").open("ab") as log:
        sim = Simulator(plans, log, env, tmp)
        try:
            pin_tree(sim.proc.pid, cpus)
            provider = f"sim={sim.url}?version={version}"
            subprocess.run([cmd, "worker", "fetch", "--once", "--provider", provider],
                           stdout=log, stderr=log, env=env, cwd=tmp, check=True,
                           preexec_fn=placed)  # fmt: skip
        finally:
            sim.stop()
        if process_phase(url, env, log, tmp, cpus, serve=True).join(1800) != 0:
            raise RuntimeError(f"process of version {version} failed")
    run = last_run(url)
    if run[1] != "PROCESSED":
        raise RuntimeError(f"run {run[0]} of version {version} is {run[1]}: {run[4]}")
    none = Result("-", 0, 1.0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return Cell("-", 0.0, 0, none, none, float(run[5]), float(run[6]), int(run[2]))


def verdict(what: str, met: bool, measured: str) -> bool:
    print(f"  [{'met' if met else 'NOT MET'}] {what}: {measured}", flush=True)
    return met


def judge(label: str, alone: Result, cell: Cell) -> None:
    worst = max(cell.fetch.p99_ms, cell.process.p99_ms)
    refused = cell.fetch.non2xx + cell.process.non2xx
    errors = cell.fetch.socket_errors + cell.process.socket_errors
    verdict(
        f"{label}: p99 <= {TARGET_RATIO:g}x alone and no 503 at {rate_of(alone)}/s through a"
        " whole ingestion",
        worst <= TARGET_RATIO * alone.p99_ms and refused == 0 and errors == 0,
        f"alone p99 {up(alone.p99_ms, 2)} ms; during fetch {up(cell.fetch.p99_ms, 2)} ms"
        f" ({up(cell.fetch.p99_ms / alone.p99_ms, 2)}x), process {up(cell.process.p99_ms, 2)} ms"
        f" ({up(cell.process.p99_ms / alone.p99_ms, 2)}x); 503s {refused}; socket errors"
        f" {errors}; ingestion {down(cell.rate)} plans/s",
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--plans", type=int, default=None, help="plans to load (default 1M)")
    parser.add_argument("--duration", type=int, default=None, help="seconds per baseline (10)")
    parser.add_argument("--quick", action="store_true", help="100k plans, 3 s baselines")
    parser.add_argument(
        "--max-replica-lag",
        type=float,
        default=None,
        help="PGENOUGH_API_MAX_REPLICA_LAG of the isolated API (default: the product's, 5 s)",
    )
    parser.add_argument(
        "--hot-standby-feedback",
        action="store_true",
        help="hot_standby_feedback = on on the standby (default: off, PostgreSQL's)",
    )
    parser.add_argument(
        "--isolated-only",
        action="store_true",
        help="the isolated placement only (no WAL-cost and shared steps)",
    )
    args = parser.parse_args(argv)
    if args.plans is None:
        args.plans = QUICK_PLANS if args.quick else DEFAULT_PLANS
    if args.duration is None:
        args.duration = 3 if args.quick else 10
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    refuse_if_busy("bench.replica")
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install -y wrk)")
    if (why := missing()) is not None:
        raise SystemExit(f"no primary and standby can be made here: {why}")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit(f"the isolated placement needs 2 CPUs; this process may use {cpus}")
    primary_cpus, replica_cpus = frozenset(cpus[:1]), frozenset(cpus[1:2])
    isolated = Placement("isolated", api=replica_cpus, ingest=primary_cpus)
    shared = Placement("shared")
    print(
        f"pgenough replica benchmark: {platform.python_implementation()}"
        f" {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; PostgreSQL"
        f" from {BIN}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    pair = DurablePair("hot_standby_feedback = on\n" if args.hot_standby_feedback else "")
    api: Api | None = None
    with tempfile.TemporaryDirectory(prefix="pgenough-bench-replica-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        try:
            pair.start()
            primary, standby = pair.primary_url, pair.standby_url
            facts = server_facts(primary)
            print("primary: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
            standby_facts = server_facts(standby, STANDBY_FACTS)
            print("standby: " + ", ".join(f"{k}={v}" for k, v in standby_facts.items()))
            print(f"plans {args.plans:,}; {args.duration} s per baseline", flush=True)
            asyncio.run(migrate_database(primary))
            load(primary, args.plans, tmp)
            vacuum_plans(primary)
            pair.wait_replayed(timeout=600)
            # Pinned after the load: the load is set-up, not measured.
            pin_tree(pair.postmaster(pair.primary_dir), primary_cpus)
            pin_tree(pair.postmaster(pair.standby_dir), replica_cpus)
            api_log = (tmp / "api.log").open("ab")
            api_env = {"PGENOUGH_API_READ_URL": standby}
            if args.max_replica_lag is not None:
                api_env["PGENOUGH_API_MAX_REPLICA_LAG"] = f"{args.max_replica_lag:g}"
            api = Api(primary, api_log, tmp, env=api_env)
            print(f"\nisolated: api {api.base} reading the standby\n", flush=True)
            alone_iso, alone_samples = sustained_rate(api, pair, isolated, args.duration, tmp)
            print(f"  replica through it: {alone_samples.summary()}", flush=True)
            # The sustained rate keeps the replica's core nearly busy with searches alone;
            # the next lower rate leaves it room for the replay. Both are measured.
            rates = [rate_of(alone_iso)]
            if rates[0] != RATES[-1]:
                rates.append(RATES[RATES.index(rates[0]) + 1])
            version = 2
            isolated_cells: dict[int, tuple[Result, Cell, LagSamples]] = {}
            for rate in rates:
                if rate == rates[0]:
                    alone = alone_iso
                else:
                    vacuum_plans(primary)
                    pair.wait_replayed(timeout=600)
                    alone = run_wrk(api, f"cold@{rate} alone [isolated]", "cold", args.duration,
                                    tmp, 20 + version, rate, cpus=isolated.api)  # fmt: skip
                    show(alone)
                vacuum_plans(primary)
                pair.wait_replayed(timeout=600)
                with sampling(primary, api, pair) as lag:
                    cell = ingest_cell(
                        api, primary, args.plans, version, isolated, 0.0, 0, tmp, rate,
                        serve=True,
                    )  # fmt: skip
                version += 1
                print(f"  replica over the ingestion at {rate}/s: {lag.summary()}", flush=True)
                isolated_cells[rate] = (alone, cell, lag)
            api.stop()
            api = None
            if args.isolated_only:
                for rate in rates:
                    alone, cell, lag = isolated_cells[rate]
                    print(f"\nsummary at {rate}/s:")
                    judge("isolated (replica)", alone, cell)
                    print(f"  replica over the isolated ingestion: {lag.summary()}")
                return

            print("\nthe WAL streaming cost (no searches; ingestion on CPU 0):", flush=True)
            vacuum_plans(primary)
            pair.wait_replayed(timeout=600)
            with sampling(primary, None, pair) as lag_alone:
                with_replica = ingest_only(primary, args.plans, version, primary_cpus, tmp)
            print(f"  v{version} with the standby streaming: {down(with_replica.rate)} plans/s"
                  f" (fetch {up(with_replica.fetch_s, 1)} s, process"
                  f" {up(with_replica.process_s, 1)} s)", flush=True)  # fmt: skip
            print(f"  replica over it: {lag_alone.summary()}", flush=True)
            pair.stop_standby()
            vacuum_plans(primary)
            without = ingest_only(primary, args.plans, version + 1, primary_cpus, tmp)
            print(f"  v{version + 1} with no standby:           {down(without.rate)} plans/s"
                  f" (fetch {up(without.fetch_s, 1)} s, process {up(without.process_s, 1)} s)"
                  f" -> with / without {down(with_replica.rate / without.rate, 2)}x",
                  flush=True)  # fmt: skip
            version += 2

            print("\nshared: one server, api reading the primary, no pinning\n", flush=True)
            pin_tree(pair.postmaster(pair.primary_dir), None)
            api = Api(primary, api_log, tmp)
            shared_cells: dict[int, tuple[Result, Cell]] = {}
            for rate in rates:
                vacuum_plans(primary)
                alone_shared = run_wrk(api, f"cold@{rate} alone [shared]", "cold",
                                       args.duration, tmp, 30 + version, rate)  # fmt: skip
                show(alone_shared)
                cell_shared = ingest_cell(
                    api, primary, args.plans, version, shared, 0.0, 0, tmp, rate, serve=True
                )
                version += 1
                shared_cells[rate] = (alone_shared, cell_shared)

            for rate in rates:
                alone, cell, lag = isolated_cells[rate]
                alone_shared, cell_shared = shared_cells[rate]
                chosen = "the rate step 1 chose" if rate == rates[0] else "the next lower rate"
                print(f"\nsummary at {rate}/s ({chosen}):")
                judge("isolated (replica)", alone, cell)
                judge("shared (one server)", alone_shared, cell_shared)
                print(
                    f"  isolated alone p99 {up(alone.p99_ms, 2)} ms against shared alone"
                    f" {up(alone_shared.p99_ms, 2)} ms; ingestion under searches: isolated"
                    f" {down(cell.rate)} plans/s, shared {down(cell_shared.rate)} plans/s"
                    f" ({down(cell.rate / cell_shared.rate, 2)}x)"
                )
                print(f"  replica over the isolated ingestion: {lag.summary()}")
            print(f"\n  replica over the ingestion with no searches: {lag_alone.summary()}")
        except BaseException:
            for log in sorted(tmp.glob("*.log")):
                print(f"--- {log.name} (tail)", file=sys.stderr)
                print("\n".join(log.read_text(errors="replace").splitlines()[-20:]),
                      file=sys.stderr)  # fmt: skip
            raise
        finally:
            if api is not None:
                api.stop()
            pair.close()
    print("load average at the end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
