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
``bench.api`` does), ``VACUUM ANALYZE``, then until the standby has replayed it all.

**Placements** (``sched_setaffinity``; a cluster is pinned through its postmaster and every
process it has forked, and the backends it forks later inherit it):

- ``isolated``: CPU 0: the primary, the fetch and process workers, the simulator; CPU 1: the
  standby, ``pgenough api`` with ``PGENOUGH_API_READ_URL`` = the standby (its writes, its
  cache's LISTEN and its LSN probes go to the primary, on CPU 0) and wrk.
- ``shared``: one server: the standby stopped, ``pgenough api`` reading the primary (no
  ``PGENOUGH_API_READ_URL``), every process on both CPUs wherever the kernel puts it.

**Steps**, each measured cell on freshly vacuumed plans tables (as in ``bench.api``):

1. ``isolated``: the rate: cold searches (``bench.api``'s ``cold``: random 1-30 day
   windows, random offsets, ``limit=50``) at 1,000/s alone for ``--duration`` s, then 750,
   500, 250 until one has p99 <= 50 ms and no 503: the rate the replica sustains alone; that
   run is the baseline of the ratios.
2. ``isolated``, a new snapshot of the same plans fetched and processed with the searches at
   that rate for the whole of each phase (``bench/harness/under_load.py``'s ``ingest_cell``;
   the process worker runs as deployed, its periodic duties on); meanwhile a thread samples the
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

Figures: wrk's (``bench.api``: rps, p50/p99/max, non-2xx = 503 ``TOO_BUSY``), the
ingestion's fetch s, process s and plans/s end to end (``plans.runs``), the replica's lag
over the run (max and p99 of ``replay_lag``; max bytes behind), and the searches the API sent
to the primary instead (past ``PGENOUGH_API_MAX_REPLICA_LAG``, 5 s by default).

Target (issue 24): during a 1M ingestion, ``isolated`` p99 <= 1.5x its alone p99 and no 503,
at a rate the replica sustains alone with p99 <= 50 ms. Display as in ``bench.api``: rates
truncated, latencies and ratios rounded up.
"""

from __future__ import annotations

from datetime import UTC, datetime

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
