"""Queue in steady state, its sustained capacity, and a held xmin horizon (issues 13 §6, 20).

Run it from the repository root::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.steady
    python -m bench.steady                 # embedded server under .pgenough-bench/
    python -m bench.steady --quick         # smoke run: 30 s steady, 20 s sustain, a 24 s hold
    python -m bench.steady --plot-steady docs/img/queue-steady.png \
        --plot-held docs/img/queue-held-xmin.png   # the docs' images (nothing is drawn without)

Burn-down figures flatter every queue: a backlog drained once never meets its own dead rows.
This benchmark runs pgenough's batched worker (``ours``, its maintenance duties on as deployed: the
vacuum duty among them) and the raw SKIP LOCKED loop of
``bench.queue`` (``raw``; its DELETE prepared but planned each time, on the claim index:
``bench.harness.systems.raw.RAW_OPTIONS``) one after the other, each in its own fresh database, with
autovacuum ON (as users run it). If the server has it off, the benchmark turns it on with
``ALTER SYSTEM SET autovacuum = on`` and a reload, and resets it at the end (the per-table
``autovacuum_enabled`` storage parameter does nothing while the launcher is off);
``--no-alter-system`` refuses and stops instead. The default run is both systems, every part.

Run time with the defaults, estimated (not measured): per system the capacity drain, two
steady phases of 90 s, three to six sustain phases of 120 s and a held run of 220 s, each
phase with its start-up and up to ``DRAIN_GRACE`` (60 s) for the workers to catch up after
its schedule; about 25 minutes for both systems when every phase keeps up, up to about 55
when the search runs six phases and every phase uses its catch-up. ``--quick``: 10-15 minutes.

Per system, in one run (each phase after a ``VACUUM ANALYZE``, from an empty queue):

1. *capacity*: a backlog of ``--jobs`` no-op jobs is drained by W worker processes
   (``bench.harness.drain.run_drain``: the same workers and settings as ``bench.queue``, batch B):
   the *burn-down capacity* every rate below is a fraction of. As in ``bench.queue``, a
   drain shorter than 2 s (``MIN_DRAIN_S``) is not counted: the backlog grows
   (``bench.harness.drain.grown``: 2.5 s at the short drain's rate, at least twice as many jobs) and
   is drained again.
2. *steady 50% / 90%*: a producer process enqueues at a fixed rate (50% and 90% of that
   capacity) in paced small batches, one every ``TICK`` seconds (``enqueue_many`` for ours,
   a COPY for raw, one transaction each), as an application would, while W workers drain,
   for ``--phase`` seconds each. Each job's payload carries the producer's ``time.time()``;
   the handler's first line takes its own: end-to-end latency, enqueue to handler start.
   The table's figures are over the phase after its first ``SETTLE`` (5) seconds; *done/enq
   whole* is the jobs started over the jobs enqueued from the producer's start to the end of
   its schedule (the whole phase).
3. *sustained capacity*: the highest producer rate held for ``--sustain`` seconds (default
   120; ``--quick`` 20) with a bounded backlog. A phase at rate R (a steady phase of that
   length) *holds* when, over the phase after its first 5 s, done/s >= 0.99x enqueued/s AND
   the backlog at the end of the producer's schedule is at most 1 s of enqueues (enqueued/s
   x ``BOUNDED_BACKLOG_S``). The search starts at ``SUSTAIN_START`` = 0.8x the burn-down
   capacity; while phases hold it steps up by 0.1x, and the last that held is the answer
   once one does not; if 0.8x does not hold it steps down by 0.1x until one does. At most
   ``--sustain-phases`` (6) phases: a search that was still rising is reported as *or more*.
   It is reported in jobs/s and as a ratio to the burn-down capacity.
4. *held xmin*: one run with this rate schedule: ``base`` (50% of capacity) for 20 s; a ramp
   of six equal steps over ``--hold`` seconds at 30/50/70/85/100/115% of capacity (past it:
   a burn-down underestimates what steady workers sustain); ``base`` for 40 s; the same ramp
   while another connection holds a snapshot (``BEGIN ISOLATION LEVEL REPEATABLE READ;
   SELECT 1``) open in the same database; release; ``base`` for 40 s.
   The ramps with and without the hold are identical, so their figures compare step by
   step. A step *holds* when the backlog grows by less than 5% of what it enqueued; the
   *sustainable rate* is the highest step rate before the first step that does not.
   *Recovery* is the time from the end of a ramp until the backlog is back under its
   threshold (twice the largest backlog of the first base segment, at least 200 jobs) and
   the claim p50 in 1 s bins under twice the first base segment's, for 5 s in a row.

Targets (issue 20), printed last, one row each with the measured figure and met / NOT met: at
50% and 90% of the burn-down capacity done/s >= 0.99x enqueued/s for the whole phase (done/enq
whole); e2e p99 <= 50 ms at 50% and <= 250 ms at 90% (the table's e2e p99); sustained capacity
>= 0.8x burn-down; held xmin (``--hold`` s, base 50%): claim p50 during the hold <= 2x its
baseline (the same ramp without the hold), sustainable rate during the hold >= 0.8x the one
without, recovery after the release <= 30 s. A target whose phase failed is NOT met; one left
out by ``--no-steady`` / ``--no-sustain`` / ``--no-hold`` is ``not run``.

Claim latency: the raw loop times its ``DELETE ... RETURNING`` round trip; for ours the
benchmark wraps the worker's claim method (``Executor._claim``: the claim statement and
its acknowledgements, one round trip) with a timer in the worker process; nothing in the
product changes. A sampler reads, every ``SAMPLE`` seconds, the jobs table's total size
(``pg_total_relation_size``), its heap, claim index and primary key sizes, ``n_live_tup``,
``n_dead_tup`` and the autovacuum and autoanalyze counts (``autovacuum_count``,
``autoanalyze_count`` of ``pg_stat_user_tables``: an autoanalyze also replaces the statistics
the claim is planned with), printed in each series (cumulative) and, per phase, in the size
table (during the phase). The backlog at time t is the jobs enqueued (the producer's log)
minus the handlers started by t.

A run is never lost: a phase whose worker or producer raised, died (killed, say) or left no
record, or whose sampler or snapshot holder failed, is stopped as soon as it is seen, printed
as ``FAILED <phase>: <reason> -- carrying on`` with every reason found (a worker's traceback
too), its leftover jobs deleted, and the run goes on with the next phase (a system whose
capacity drain failed runs no load phase; a sustained-capacity search stops at its failed
phase). Every phase measured is printed and, with ``--json``, written, the failures listed
at the end, and the exit status is then 1. Each phase prints its worker pids.

It prints every figure and table; images only when asked: ``--plot-steady PATH.png`` (the
steady phases: backlog, n_dead_tup, table and claim index size over time) and ``--plot-held
PATH.png`` (the held-xmin runs: claim p50, jobs/s, backlog, n_dead_tup); the docs' images are
``docs/img/queue-steady.png`` and ``docs/img/queue-held-xmin.png``.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

Flag: TypeAlias = Any
"""``ctx.RawValue(ctypes.c_bool)``: the stop flag every worker process of a phase reads."""
SteadySystem: TypeAlias = Literal["ours", "raw"]
SYSTEMS: tuple[SteadySystem, ...] = ("ours", "raw")
DRAIN_SYSTEM = {"ours": "ours-batched", "raw": "raw"}
TABLE = {"ours": "pgenough.jobs", "raw": "public.raw_jobs"}
CLAIM_INDEX = {"ours": "pgenough.jobs_claim_idx", "raw": "public.raw_jobs_claim_idx"}
PKEY = {"ours": "pgenough.jobs_pkey", "raw": "public.raw_jobs_pkey"}
TICK = 0.01
"""Seconds between the producer's enqueues (each a small batch in one transaction)."""
SAMPLE = 2.0
"""Seconds between table-size and dead-tuple samples."""
STOP_POLL = 0.05
"""How often an ours worker process looks at the stop flag (seconds)."""
RAW_IDLE_SLEEP = 0.002
"""The raw loop has no LISTEN: it polls this often when a claim comes back empty."""
RAMP = (0.3, 0.5, 0.7, 0.85, 1.0, 1.15)
"""Step rates of the ramps, as fractions of the measured drain capacity."""
BASE = 0.5
GROWTH = 0.05
"""A ramp step does not hold when the backlog grows by more than this share of its jobs."""
RECOVERED = 5
"""Consecutive 1 s bins under the thresholds that count as recovered."""
DRAIN_GRACE = 60.0
"""After a phase's schedule, how long the workers may take to catch up before stopping."""
SETTLE = 5.0
"""Seconds at a phase's start left out of its figures (workers and producer settling)."""
KEEP_UP = 0.99
"""done/s at least this share of enqueued/s: the workers keep up."""
BOUNDED_BACKLOG_S = 1.0
"""A sustain phase's final backlog is bounded when at most this many seconds of enqueues."""
SUSTAIN_START = 0.8
"""The sustained-capacity search's first rate, as a fraction of the burn-down capacity..."""
SUSTAIN_STEP = 0.1
"""... and its step: up while a phase holds, down from the start while one does not."""
SUSTAIN_PHASES = 6
"""The most phases of the search (``--sustain-phases``)."""
SUSTAIN_TARGET = 0.8
"""Issue 20: sustained capacity at least this share of the burn-down capacity."""
SETTINGS = (
    "server_version",
    "synchronous_commit",
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "shared_buffers",
)
