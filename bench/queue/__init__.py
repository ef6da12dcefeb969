"""Queue benchmark: pgenough's work queue against a raw-SQL ceiling, the PostgreSQL queues
PgQueuer, Procrastinate and graphile-worker, and the brokers NATS JetStream and RabbitMQ.

Run it from the repository root::

    pip install -e '.[bench]'        # PgQueuer+asyncpg, Procrastinate, uvloop, nats-py, aiormq,
                                     # matplotlib
    npm ci --prefix bench/graphile   # graphile-worker 0.17.3 (done for you if npm exists)
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.queue
    python -m bench.queue                          # embedded server under .pgenough-bench/
    python -m bench.queue --quick --skip-peers     # smoke run: 2,000 jobs, fewer configurations
    python -m bench.queue --systems ours,raw,graphile,nats,rabbitmq --batches 100
    python -m bench.queue --workers 1,2,4,8,16 --batches 100 --systems ours,raw,nats,rabbitmq \
        --no-latency --plot docs/img/boundary-drain.png   # issue 13 §5's curve

(Only as a module: ``bench/queue/`` is a package.) With ``DATABASE_URL`` the benchmark creates
one fresh database per PostgreSQL system on that server and drops them at the end; without it,
it starts (or reuses) the embedded server in ``.pgenough-bench/``. Every PostgreSQL system runs
on the same server with the same settings, which are printed first (``synchronous_commit`` must
be ``on``). The brokers are taken where ``NATS_URL`` (default ``nats://127.0.0.1:4222``) and
``RABBITMQ_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``) say. A system that cannot run
here (a Python package or node missing, a broker not answering) is printed as ``skipped:
<system> (<why>)`` and left out; nothing stands in for it.

Options: ``--systems`` (comma-separated: ``raw``, ``ours-batched``, ``ours-tx``,
``ours-batch-tx``, ``pgqueuer``, ``procrastinate``, ``graphile``, ``nats``, ``nats-ackall``,
``rabbitmq``, ``rabbitmq-multi``, or the groups ``ours`` = the three modes of ours, ``peers`` =
PgQueuer + Procrastinate + graphile-worker, ``brokers`` = the four broker forms, ``all``;
default all; Procrastinate takes minutes, leave it out
with e.g. ``--systems ours,raw,pgqueuer,graphile,brokers``); ``--workers 1,2,4`` (processes per
drain); ``--batches 1,100``; ``--jobs N`` (every cell's first size, default 20,000);
``--min-drain S`` (default 2); ``--repeat R`` (counted drains per cell, default 3);
``--plot PATH.png``; ``--skip-peers`` (ours and raw only); ``--quick`` (2,000 jobs, drains of
at least 0.5 s, one round, workers 1 and 4, 50 latency samples).

Run time on a quiet machine of this kind (2 cores), estimated (not measured) from the per-drain
times of the one-round runs this replaced (9 minutes for 20,000 jobs per drain, one drain per
cell): the default run (all systems, workers 1/2/4, batches 1 and 100, three counted drains of
at least 2 s per cell, plus a first too-short one per fast cell) about 30 minutes, of which
Procrastinate's drains are about 6; the sweep above about 25; ``--quick`` about 2.

What each figure means
----------------------

*drain jobs/s* - N no-op jobs are loaded with the system's own bulk
API (``enqueue_many``, i.e. COPY, for pgenough; timed and printed as the *enqueue rate*); then
``VACUUM ANALYZE`` and ``CHECKPOINT`` run so every drain starts from the same state, and W
worker processes (``multiprocessing`` with ``spawn``; each has its own connections) start,
connect, and wait on a barrier. The clock starts when the barrier opens and stops at the last
worker's end of drain (each worker reports ``time.time()`` when it has nothing left to do and
its completions are committed); the table is then checked to hold no runnable job and the
handlers' count to equal the jobs loaded. Process start-up is not measured.

*Drains of at least 2 s, median of 3* - a drain of tenths of a second measures start-up and
noise, not a rate. Each cell (system, workers, batch) starts at ``--jobs`` jobs (default
20,000); a drain shorter than ``--min-drain`` (``MIN_DRAIN_S`` = 2 s) is printed as *not
counted* and the cell grows to what ``SIZE_MARGIN`` (1.25) times that minimum takes at the
short drain's rate (at least twice as many jobs, in thousands, at most ``MAX_JOBS`` =
1,000,000), then drains again, up to ``MAX_SIZINGS`` = 4 times per round (a drain still short
after them is counted and marked SHORT). So the fast cells (batch 100 above all) load more
jobs, found by their own first quick drain, and every counted drain lasts at least 2 s. The
cell keeps its size in later rounds. ``--repeat`` rounds (default ``DRAINS`` = 3) each count
one drain per cell, the rounds interleaving the systems; the tables report per cell the jobs
loaded, the median drain rate with its drain's seconds (of an even count: the mean of the
middle two, and the slower one's seconds), and every counted drain (jobs/s and seconds).

Connections: each drain's processes together stay under what the server has free just
before it (``max_connections`` less the superuser reserve, the client connections already
open and ``CONNECTION_MARGIN`` = 10): ours and Procrastinate get ``min(10, free // W)``
connections per process (5 each at 16 workers on an otherwise idle server with
``max_connections=100``; printed when it happens). A batched worker holds one connection
(its claim loop) and, in ``until_idle`` mode, no listener, so a smaller pool costs it nothing;
``ours transactional`` runs its handlers on the pool, so at 16 workers it has 5 at once.

- ``ours batched``: ``Worker(..., WorkerConfig(batch_size=B, concurrency=max(10, B),
  maintenance=None)).run(until_idle=True)``, handler ``async def h(job): pass``; the worker
  acknowledges finished jobs in its next claim statement (one round trip and one commit per
  batch). Pool: ``open_pool(max_size=10)`` per process.
- ``ours transactional``: the same, but the handler completes its job in its own transaction,
  as an application that writes something with it would:
  ``async with pool.connection() as conn, conn.transaction(): await complete(conn, job)``.
- ``ours batch-tx`` (batch-transactional): the same ``Worker`` and ``WorkerConfig`` as ``ours
  batched``, but the kind's handler is ``BatchHandler(h)`` with ``async def h(conn, jobs):
  pass``: the worker runs each claim's jobs in one transaction on a pooled connection and
  completes them there (``complete_many``), as an application whose writes must commit
  exactly once with their jobs would, one commit per batch.
- ``raw``: the ceiling. One synchronous psycopg connection per process in autocommit, looping
  ``DELETE FROM raw_jobs WHERE id IN (SELECT id FROM raw_jobs WHERE queue = 'default' AND
  state = 'ready' AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT B FOR UPDATE
  SKIP LOCKED) RETURNING <the columns a handler sees>`` and calling a no-op function per row,
  until a DELETE returns nothing. The DELETE is sent unprepared (``prepare=False``): planned
  each time with its values and the table's size, so always on the claim index; a cached
  generic plan could be a nested-loop semi join over seq scans, O(rows²) per claim, as a
  statement psycopg prepares after 5 runs may get (``RAW_OPTIONS``). ``raw_jobs`` has
  the columns of ``pgenough.jobs`` and the same claim index ``(queue, priority DESC, run_at,
  id) WHERE state = 'ready'``. A job is deleted when it is taken: no lease, no retry,
  at-most-once - nothing a real queue can do with fewer statements.
- ``pgqueuer``: PgQueuer with its fastest documented setup (its ``tools/benchmark.py``): the
  asyncpg driver on one connection, ``uvloop``, ``PgQueuer.run(batch_size=B,
  mode=QueueExecutionMode.drain)``; default (durable, logged) tables. Batch sizes 10 and 100.
- ``procrastinate``: Procrastinate with its psycopg connector, ``run_worker_async(
  concurrency=C, wait=False, delete_jobs="successful", listen_notify=False)`` with
  ``C = PROCRASTINATE_CONCURRENCY`` and a pool of ``PROCRASTINATE_POOL_SIZE`` (concurrency 1 to
  100 and pools of 4 to 20 were tried; none was clearly faster); it fetches one job per
  statement, so it has no batch size. Only 1 and 4 workers: 20,000 jobs take it minutes.

- ``graphile``: graphile-worker 0.17.3 (Node; ``bench/graphile/``, pinned by its
  package-lock), in its recommended fast setup: ``concurrentJobs: 24``, ``localQueue: {size:
  500}``, ``completeJobBatchDelay: 0``, ``failJobBatchDelay: 0``, a no-op task, a ``pg.Pool``
  of at most 24 (it opens about 3: the local queue fetches, completions are batched). Jobs are
  loaded with its bulk API, ``graphile_worker.add_jobs(...)`` called with the statement its
  ``addJobs`` sends (timed as the enqueue rate). Each worker is a ``node
  bench/graphile/worker.js drain`` process driven from Python over stdin/stdout. *Start-up is
  outside the timing*: each process connects, runs graphile's migrations check, then warms up
  with one ``runOnce`` pass over a task name no job has (graphile fetches only the task
  identifiers it knows: pool connections open, code compiled), and prints READY; once all are
  ready the benchmark writes GO to each and starts the clock; each process then runs
  ``runOnce`` (its run-until-empty mode, the one its own perf test uses), which returns once
  no job is left and its batched completions are flushed, and prints DONE with the time. What
  stays inside the timing is what any ``runOnce`` call does first: compiling its options and
  one migrations-check query. It has no batch size of ours to match: one run per worker
  count, compared with ours at batch 100. Checked afterwards: ``_private_jobs`` empty and the
  task run N times.
- ``nats``: NATS JetStream through nats-py. Per drain a fresh stream (file storage, work-queue
  retention: an acked message is deleted, as a finished job is) and a durable pull consumer
  with explicit ack. Loading: N publishes each awaiting its publish ack, pipelined
  (``publish_async``, ``BROKER_PUBLISH_WINDOW`` = 1,000 in flight; timed as the enqueue rate).
  Each worker process sends pull requests for B messages with ``no_wait`` (the first request
  of nats-py's ``fetch``; ``fetch`` would then linger for new messages, which would only delay
  the end of a drain), handles and acks (``msg.ack()``) each message of the batch, and stops
  when a request finds nothing; then flushes its connection. Checked afterwards: the consumer
  has nothing pending and nothing ack-pending, the stream holds no message (waiting up to 5 s
  for acks to be applied), and the handlers ran N times.
- ``nats-ackall``: the same with the batch-acknowledge form, at batches above 1 only: the
  consumer has ``AckPolicy.ALL``, and a worker handles every message of a pulled batch, then
  acks only its last one, which acks every message of the consumer up to that stream
  sequence. One ack per batch instead of B; but with several workers on the consumer, one
  worker's ack also acks what another holds and has not handled yet (a crash would lose it:
  at-most-once for those). The same checks afterwards: nothing pending or ack-pending, the
  stream empty, the handlers ran N times.
- ``rabbitmq``: RabbitMQ through aiormq (the AMQP client aio-pika is built on, used directly so
  that a message costs the protocol's work and not aio-pika's wrapper objects too). Per drain a
  fresh durable classic queue; loading: N persistent messages (``delivery_mode=2``) on a channel
  with publisher confirms, 1,000 awaiting their confirm at once (timed). Each worker process
  consumes with manual ack and ``prefetch_count=B``, handles and acks each delivery; with
  nothing delivered it asks the queue (a passive declare: it also comes back after the worker's
  acks) and stops when nothing is ready and it holds nothing (waiting ``RABBITMQ_IDLE_POLL`` =
  10 ms between asks). Checked afterwards, once every worker's connection is closed (which would
  return unacked messages): no message ready, handlers ran N times.
- ``rabbitmq-multi``: the same with the batch-acknowledge form, at batches above 1 only:
  ``prefetch_count=B``, and one ``basic.ack(multiple=True)`` on the delivery tag of the last
  delivery of each batch: once B deliveries are handled (the whole prefetch window, so the
  broker sends the next B after it), or, holding fewer, once nothing more is delivered for
  ``RABBITMQ_IDLE_POLL`` (the queue's tail); the worker acks what it holds before it asks the
  queue. The same checks afterwards.
- The brokers' clients run with plain asyncio; PgQueuer gets uvloop (its documented setup), and
  ours runs on the event loop ``pgenough worker`` runs on by default (``pgenough.eventloop``:
  uvloop when it is installed, which the ``service`` extra does), as a deployment runs it.

*durability* - what an acknowledged job survives is not the same for every system. PostgreSQL
here runs ``synchronous_commit=on``, ``fsync=on``: a commit returns after its WAL is fsynced, so
an enqueued or completed job survives an OS crash or power loss. RabbitMQ (classic durable
queue, persistent messages): a publisher confirm is sent once the message is written to disk
and fsynced (RabbitMQ fsyncs in batches, every few hundred milliseconds or when idle, and
confirms after); a consumer's ``basic.ack`` has no reply in AMQP, so a worker never learns
when its ack is on disk. NATS JetStream
(file storage, defaults, ``sync_interval`` 2 minutes): the publish ack is sent once the message
is written to the file store, i.e. handed to the OS, not fsynced: it survives the server
process crashing but an OS crash or power loss can lose up to the last 2 minutes of
acknowledged messages (``sync_interval: always`` would fsync every write; not used here, as the
issue's reference figures were taken with defaults). So NATS's figures are for weaker
durability than PostgreSQL's and RabbitMQ's.

*add-to-start latency* - one worker process per system, idle and listening (LISTEN/NOTIFY),
all running at once; in each round, in a shuffled order of the systems, the benchmark process
enqueues a single job on its own autocommit connection (one statement, its own
transaction: ``enqueue(conn, ...)``, PgQueuer's ``Queries.enqueue``, Procrastinate's
``defer_async``) after a random 10-40 ms pause, and measures from just before the enqueue call
to the first line of the handler (``time.time()`` on both sides, same host). The first
``LATENCY_WARMUP`` samples are dropped; p50 and p99 of the rest are printed, with the p50 of
the enqueue call alone and of the time from its return to the handler (notification, claim,
dispatch). Ours runs with its defaults (``concurrency=10, batch_size=10``) and no maintenance,
PgQueuer with ``batch_size=10`` under uvloop, Procrastinate with the concurrency of its drain
runs.

*ratios and targets* - ratios of the cells' median rates, per (workers, batch): ``ours/raw``
for each mode, batched/PgQueuer, batch-tx/batched, batched/graphile-worker (at batch 100),
batched against each broker form (``nats``, ``nats-ackall``, ``rabbitmq``,
``rabbitmq-multi``); latency ``ours/pgqueuer`` at p50 and p99. Then issue 13's targets, on
the batched mode: at batch 100 >= 1.5x graphile-worker and >= 0.6x raw at every worker count
measured (the issue names 1, 2 and 4), ahead of NATS JetStream (``nats``, per-message acks,
as the issue measured it) at every worker count and batch size measured; at batch 1 >= 0.8x
raw; batch-transactional >= 0.5x batched at batch 100; latency p50 <= 0.75x
PgQueuer's and p99 <= PgQueuer's. Every figure of a ratio comes from the same run; on a small
noisy machine compare ratios, not absolute rates across runs.

*plot* - ``--plot PATH.png`` draws drain jobs/s against worker processes (log2 axis) at batch
100 (prefetch 100 for RabbitMQ; graphile-worker's one run per worker count), one line per
system, the median of the counted drains per point (matplotlib, Agg backend). Nothing is
written without it.

*busy* - the machine's CPU busy fraction in the half second before a measurement. Before each
one the benchmark waits (up to ``--quiet-wait`` seconds) for it to drop under ``QUIET_BUSY``:
on a shared machine another process's load would be counted against whoever runs at that
moment. A figure taken on a machine that did not quieten down is marked ``NOISY``.

``--repeat R`` runs the whole throughput matrix R times (rounds interleave the systems) and
reports, for each configuration, the median and every counted drain. ``--json FILE`` saves
everything.
"""
