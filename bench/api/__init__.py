"""HTTP API benchmark: ``pgenough api`` serving ``GET /search`` from 1M plans, under ``wrk``.

Run it from the repository root, with the project's virtualenv and ``wrk`` installed
(``apt-get install -y wrk``)::

    .venv/bin/python -m bench.api              # 1M plans, 10 s per scenario, embedded server
    .venv/bin/python -m bench.api --quick      # 100k plans, 3 s per scenario: a smoke run
    .venv/bin/python -m bench.api --plot-search docs/img/boundary-search.png  # curve drawn
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.api
    # during ingestion only the shared placement, unpaced and paced; no curve:
    .venv/bin/python -m bench.api --skip-curve --placements shared --cells 2

(``make bench-api`` runs the third line: everything, the curve drawn. A full run at 1M plans:
about 13-15 min on a quiet 2-core machine, estimated; 21 min at 200k plans under load.)
Run it as a module (``bench/api/`` is a package; as a script, ``bench/`` would come first on
``sys.path``, where ``bench/queue/`` shadows the standard library's ``queue`` and psycopg fails
to import). With
``DATABASE_URL`` a fresh database is created on that server; without it, on the embedded
server started in ``.pgenough-bench/``. It is dropped at the end unless ``--keep``.

Setup (untimed, except the load, whose time is printed):

1. A fresh database, migrated.
2. **Load**: ``--plans`` plans (default 1,000,000) through the real ingestion path: the
   simulator as its own process (``pgenough provider-sim --plans N --port 0 --seed 1``), then
   ``pgenough worker fetch --once --provider sim=<url>?version=1``, then ``pgenough worker
   process --until-idle --concurrency 2`` (as ``bench.ingest`` does, with the helpers they share in
   ``bench/harness/``). The simulator's plans start on days spread over 2021-2022; ~90% are
   ever online. Then ``VACUUM ANALYZE plans.plans``. Autovacuum is on for the whole run,
   as users run it: on a server that has it off (the PostgreSQL 15 server here runs with
   ``autovacuum=off``) the benchmark turns it on with ``ALTER SYSTEM SET autovacuum = on``
   and a reload and resets it at the end, as ``bench.steady`` does (``--no-alter-system``
   stops instead).
3. ``pgenough api --port P`` as its own process (one uvicorn worker, ``DATABASE_URL`` in its
   environment, every other setting at its default except ``PGENOUGH_API_CACHE_TTL=60`` so
   that the hot scenario's cached first pages outlive it). Ready when ``/health/ready``
   answers 200.

Scenarios (each ``--duration`` seconds; load generator ``wrk -t1 -c64 --latency
--timeout 5s`` with a Lua script that builds every request; a Lua ``done`` hook prints
wrk's exact figures as JSON):

Every ``/search`` the wrk scenarios send has ``limit=50``: the page size these scenarios have
always measured (``/search``'s default before it answered every event without ``limit``).

- ``trivial``: ``GET /health/live`` (a constant body, no database): the framework ceiling.
- ``hot``: five fixed first-page ranges (offset 0, 1-30 day windows), cycled; each is
  requested once before the clock starts, so every timed request is a cache hit (steady
  state; the cache has no single-flight, so a cold start under 64 connections sends up to 8
  identical searches to PostgreSQL and answers the rest 503 until the first one lands).
- ``cold``: random windows: ``starts_at`` a random second in 2021-01-01..2022-12-31,
  ``ends_at`` 1-30 days (a random number of seconds) later, ``offset`` random in 0..1000;
  the cache cannot hit (checked with ``/metrics``: cache hits during the scenario).
- ``cold@1000``: the same requests at a fixed rate of 1,000 requests/s. wrk has no rate
  option (wrk2 is not in Debian), so the Lua ``delay()`` hook (called between a response and
  its connection's next request) reserves the next free 1 ms slot on one schedule shared by
  the 64 connections (a monotonic clock read through LuaJIT's FFI) and waits for it; the
  first request of each connection is sent at once. The achieved rate is printed: it falls
  short only when all 64 connections are waiting for answers. Latency is measured from each
  request's send (no coordinated-omission correction: a request is late only if all 64
  connections were busy, which the achieved rate shows).
Then the whole ranges and deep pages below, and then **during ingestion** (issue 13 §4), per
**placement**:

- ``shared``: as a single small box runs it, every process wherever the kernel puts it on
  the two cores;
- ``pinned``: as a deployment would place it: the API process (every thread, with
  ``os.sched_setaffinity``) and wrk on the first CPU, the fetch and process workers and the
  simulator on the second (``sched_setaffinity`` in the child before ``exec``, inherited by
  its threads), PostgreSQL free on both (it serves both sides, so it cannot be placed with
  either). Skipped, with a note, on fewer than 2 CPUs.

For each: ``cold@1000 alone [placement]`` (the baseline of its ratios, measured placed), then
a new snapshot (``?version=k`` of the same ``--plans`` plans) fetched and then processed into
the same database, three times (*cells*): without pacing
(``PGENOUGH_INGEST_PACING_MAX_PAUSE=0`` in the workers' environment), with the product's
default pacing (the API publishes its bulkhead's pressure, the workers pause between chunks:
``src/pgenough/plans/pacing.py``), and with that pacing and ``PGENOUGH_INGEST_NICE=10`` (the
workers lower their own priority; the bench renices the simulator likewise, since it stands
for a provider on another machine). wrk runs
``cold@1000`` for the *whole* of each phase: started once the fetch's first COPY batch landed
(or the process's first chunk is claimed) and stopped with SIGINT when the phase's process
exits (wrk still reports everything), so the p99 and 503 share cover the phase and the
phase's own time is measured under that load: fetch s and process s (``plans.runs``), and
plans/s end to end = plans / (fetch s + process s).

Order and state: every ingestion rewrites the plans, so a cell measured after others would
meet their dead rows. Each measured cell (each ``alone`` baseline, each ingestion cell, each
curve point and the curve's ``alone``) therefore starts on a freshly vacuumed database:
``VACUUM (ANALYZE)`` of ``plans.plans``, ``plan_seen``, ``plan_failures`` and ``runs``
just before it (its time printed; autovacuum stays on). The ``alone``
baselines of every placement run first; then the cells run cell by cell, the placements
taking turns at going first (rotated: no pacing shared then pinned, default pacing pinned
then shared, pacing with nice shared then pinned), so neither placement always follows the
other's ingestion or always meets the machine first.

Then the **curve** (``--skip-curve`` leaves it out; ``--plot-search PNG`` draws it):
``/search`` p99 and 503 share at 1,000 cold/s against the fetch's rate, shared placement.
Each point: a fetch of a fresh snapshot under ``cold@1000`` for ``--duration`` s, then
stopped with SIGTERM (its run ends FAILED, its staging dropped); its rate is the rows COPYed
into staging during the window (``pg_stat_user_tables.n_tup_ins``, flushed by the backend
at most once a second). Two series: a *fixed throttle* (the bench publishes a pressure of 1
itself, so every COPY batch is followed by a pause of exactly ``max_pause``: 0, 0.05, 0.1,
0.25, 0.5 s; the API's own reports cannot change it) and the *pacing* (the API's pressure
alone sets each pause, bounded by ``max_pause``: 0.1, 0.25, 0.5, 1 s). Black: the same
requests with no ingestion, measured right after.

Then, without wrk:

- **whole ranges without limit**: one client reads ``/search?ends_at=E`` (E: the start of the
  10,001st event, so about 10,000 events) and then ``/search`` (every event of the table) to
  the end, counting events and bytes, while a thread samples the API process's ``VmRSS``
  every 10 ms: its RSS before and its peak, per range. Baseline in the same run: the same
  keyset pages read by psycopg straight from PostgreSQL (``raw pages``), so ``API / raw`` is
  what HTTP and the API add. Target: peak RSS for every event / for 10k <= 1.25 (flat).
- **deep pages** (``wrk -c1``: one client, closed loop, one fixed path each, so each figure
  is the cost of one search rather than the bulkhead's 503s): ``limit=50&offset=100000``
  against the same page by cursor (the ``after=`` of the Link of the page at offset 99,950;
  checked to be the same bytes), and ``offset=1`` (near the start, not cached) for scale.
  With ``--quick`` the depth is the number of events minus 50.

Figures per scenario:

- ``rps``: all responses / wrk's duration; ``2xx rps``: responses with status < 400.
- ``p50``, ``p99``, ``max``: wrk's latency distribution (all responses, 503s included), ms.
- ``non-2xx``: responses with status >= 400 (here: 503 ``TOO_BUSY`` when the bulkhead of
  ``PGENOUGH_API_MAX_CONCURRENT_SEARCHES`` = 8 searches is full); ``sock err``: connect,
  read, write errors and timeouts; ``cache h/m``: cache hits / misses during the scenario.

Ratios and targets: hot / trivial rps >= 0.7; cold@1000 p99 <= 50 ms; during ingestion, per
placement and pacing: no 503 at 1,000/s and p99 / alone p99 (same placement) <= 2, during the
fetch and during the process (the worse is judged); each with the ingestion's plans/s against
the unpaced one's.

Display: rates and ratios better-is-higher are truncated, latencies and ratios
better-is-lower rounded up (never in the flattering direction).
"""

from __future__ import annotations

from pgenough_plans.ingest.defaults import DEFAULT_PACING_MAX_PAUSE

DEFAULT_PLANS = 1_000_000
QUICK_PLANS = 100_000
DEEP = 100_000  # the offset the cursor is compared at
SMALL_RANGE = 10_000  # events in the smaller streamed range
RSS_SAMPLE_EVERY = 0.01
TARGET_STREAM_RSS_GROWTH = 1.25
TARGET_HOT_RATIO = 0.7
TARGET_COLD_P99_MS = 50.0
TARGET_INGEST_RATIO = 2.0
THROTTLED = "fixed throttle"
PACED = "pacing"
NICE = 10
CELLS = ((0.0, 0), (DEFAULT_PACING_MAX_PAUSE, 0), (DEFAULT_PACING_MAX_PAUSE, NICE))
"""The ingestion cells of each placement, (max_pause, nice): none, the product's default
pacing, and that pacing with the workers (and the simulator) at niceness NICE."""
CURVE = (
    (THROTTLED, (0.0, 0.05, 0.1, 0.25, 0.5)),
    (PACED, (0.1, 0.25, 0.5, 1.0)),
)
"""The curve's fetches: a fixed pause per COPY batch, and the pacing at several bounds."""
