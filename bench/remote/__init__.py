"""What latency costs: the queue's drain throughput and add-to-start latency with the workers
on the far side of a link of 0, 1, 5 and 20 ms round-trip time, each beside the raw-SQL
``SKIP LOCKED`` loop through the same link, with the round trips per job the link counted.

Run it from the repository root::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.remote
    python -m bench.remote                      # embedded server under .pgenough-bench/
    python -m bench.remote --quick              # smoke run (under a minute)
    python -m bench.remote --rtts 0,20 --batches 1,10,100 --workers 1,4,8

The link is ``tests/helpers/netproxy.py`` run as its own process (``python -m
tests.helpers.netproxy --rtt-ms R --control``): RTT/2 of delay each way, per connection and
direction, nothing else impaired; with a delay on a select(2) loop, whose timers keep
microseconds (a round trip comes out 0.2-0.5 ms over the RTT asked, measured and printed as
*measured*), at 0 ms on uvloop when installed (the least cost per message). Workers and the
latency test's enqueueing client connect through it; loading the drains' jobs, ``VACUUM`` /
``CHECKPOINT`` and the checks go direct. A proxy on the measured client's event loop would
distort what it measures; in its own process it costs a few hundredths to a tenth of a
millisecond per round trip on loopback, measured and printed first (``SELECT 1``, direct and
through the proxy at 0 ms), and CPU time on the same 2 cores as the client and the server.

What runs is ``bench.queue``'s harness, imported from ``bench/harness/`` (``bench.queue``'s
docstring says what each figure means):

- *drain jobs/s*: its harness (``DrainSpec``, ``run_python_drain``: N no-op jobs loaded,
  ``VACUUM ANALYZE`` + ``CHECKPOINT``, W spawned worker processes released together by a
  barrier, the clock to the last one's end of drain, then the table checked empty and the
  handlers' count equal to N; durable commits). Systems: ``raw`` (its ``RAW_TAKE`` loop:
  ``raw_take`` on ``raw_connect``, i.e. ``RAW_OPTIONS``; one ``DELETE ... SKIP LOCKED
  RETURNING`` per batch, at-most-once), ``ours-batched`` (``Worker``, acks in the next
  claim), ``ours-batch-tx`` (a ``BatchHandler``: each claim's jobs completed in one
  transaction), at its concurrency ``max(10, batch)`` and pools of 10; at the longest RTT
  also ours at twice the batch size of concurrency (``c=200``: what a worker has in place of
  a prefetch setting). A cell (RTT, system, workers, batch, concurrency) is drained
  ``--repeat`` times (rounds interleave the systems) and its median reported. Each drain
  lasts at least ``--min-drain`` seconds (1.5: 2 s, bench.queue's, would take the default
  run past 10 minutes): a cell's first size at an RTT comes from what it did at the ones
  before (seconds per job against the measured RTT, extrapolated), a drain still too short is
  re-sized and run again, not counted, and one far too long makes the later rounds' shorter.
- *round trips per job*: the proxy's count (turns from client bytes to server bytes, per
  connection) over the drain only, from the moment every worker waits at the barrier
  (connected, nothing claimed) to the end, divided by the jobs.
- *add-to-start latency*: one idle worker per system, listening (LISTEN/NOTIFY) through the
  link; the client enqueues one job at a time, also through the link, 10-40 ms apart, and
  measures from just before the enqueue call to the handler's first line. Ours: its latency
  worker (``Worker`` with its defaults: batch 10, concurrency 10). Raw: a sync connection
  that LISTENs on ``raw_jobs`` and on each notification runs ``raw_take`` until a take comes
  back short; its enqueue is one statement (an ``INSERT`` whose CTE calls ``pg_notify``).

Printed: the proxy's own cost, every drain as it ends (with its wall time), then the drains'
table (jobs/s, every round, round trips per job, ours/raw), each cell against RTT 0, the
latency table (p50 also in RTTs), and what the data says a user on a remote link should set.

Options: ``--rtts 0,1,5,20``; ``--batches 1,100``; ``--workers 1,4`` (processes per drain);
``--systems raw,ours-batched,ours-batch-tx``; ``--repeat 3``; ``--min-drain 1.5``;
``--latency-samples 60``; ``--no-latency``; ``--no-prefetch`` (no ``c=2x`` cells);
``--quiet-wait S`` (before each drain, wait up to S seconds, default 10, for a machine under
15% busy; figures taken without are marked NOISY); ``--json FILE``. ``--quick``: RTTs 0 and
20, one worker, one round, drains of 0.5 s, 20 latency samples, no quiet wait (49 s here).

Run time, estimated from the --quick runs' per-drain wall times on this 2-core machine (not
measured whole): the default run about 10 minutes on a quiet machine: 150 counted drains
(4 RTTs x 2 batches x 2 worker counts x 3 systems, and 2 prefetch cells at 20 ms, x 3
rounds) of 1.5-2.5 s, each with 1-2.5 s of loading, vacuum and process start-up besides,
plus about 40 s of latency and a few re-sized drains at 0 ms.
"""

from __future__ import annotations

from bench.harness.systems.base import System

RTTS = (0.0, 1.0, 5.0, 20.0)
"""Round-trip times of the link, milliseconds."""
BATCHES = (1, 100)
WORKERS = (1, 4)
SYSTEM_CHOICES: tuple[System, ...] = ("raw", "ours-batched", "ours-batch-tx")
DRAINS = 3
MIN_DRAIN = 1.5
"""Seconds a counted drain lasts at least (bench.queue's 2 s would take the default run
past 10 minutes; 3 rounds of 1.5 s or more still average out a drain's start and end)."""
LATENCY_SAMPLES = 60
FIRST_JOBS = {1: 5_000, 100: 100_000}
"""A cell's size at its first RTT, by batch (others: 1,000 per job of the batch), twice that
for more than one worker, a quarter with --quick; later RTTs size it from what it did at the
ones before."""
OVERHEAD_SAMPLES = 400
LINK_SAMPLES = 40
LatencyKind = str  # "ours" or "raw"
Shape = tuple[System, int, int, int]
"""A drain's shape: (system, worker processes, batch size, concurrency per process)."""
CellKey = tuple[float, System, int, int, int]
"""(RTT, *shape)."""
