"""Broker-boundary benchmark: pub/sub fan-out, and PostgreSQL connections vs workers (a pooler).

Run it from the repository root::

    pip install -e '.[bench]'                        # matplotlib, nats-py
    apt-get install -y pgbouncer                     # optional: the pooler half of `connections`
    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.boundary
    python -m bench.boundary fanout                  # one sub-benchmark (fanout | connections)
    python -m bench.boundary --quick                 # smoke run: fewer points, fewer messages

With ``DATABASE_URL`` it creates a fresh database per sub-benchmark (and per mode) on that
server and drops it at the end; without it, it starts (or reuses) the embedded server in
``.pgenough-bench/``. The server's settings are printed first. Each sub-benchmark prints a
table and, when asked, renders a PNG (matplotlib, Agg): ``--plot-fanout PATH.png``,
``--plot-connections PATH.png`` (the docs' are ``docs/img/boundary-fanout.png`` and
``docs/img/boundary-connections.png``; nothing is drawn without them); ``--json FILE`` saves
everything, and ``--replot FILE`` with those options draws the images again from it.

fanout (``--plot-fanout``; the docs' ``docs/img/boundary-fanout.png``)
-----------------------------------------------------------------------

One publisher, S subscribers (S = 1, 2, 4, 8, 16, 32, 64), every subscriber on its own
connection, as users would deploy them. The subscribers are spread over ``min(S, 4)`` processes
(``multiprocessing`` spawn), each an asyncio loop holding its share of the connections; all of
them subscribe, then wait on a barrier. The publisher (the benchmark process) then publishes
``--messages`` (default 2,000) 64-byte JSON messages, one after the other, as fast as it can;
each carries its sequence number and ``time.time()`` at publish.

- ``pgenough``: ``publish(conn, channel, payload)`` on an autocommit connection, so each message
  is its own transaction (how ``publish`` inside an application's transaction behaves); each
  subscriber is ``async with subscribe(url, channel) as sub: async for item in sub``.
- ``notify``: the baseline, plain psycopg: ``SELECT pg_notify(%s, %s)`` in autocommit; each
  subscriber an ``AsyncConnection`` that ran ``LISTEN`` and reads ``conn.notifies()``.
- ``nats``: NATS core (no JetStream, at most once): ``nc.publish`` per message and one
  ``flush`` at the end; each subscriber its own ``nats.connect`` with a callback subscription.

*delivered msgs/s* = messages received by all subscribers together / (last receipt - first
publish). *latency* = receipt ``time.time()`` - the message's timestamp, p50 and p99 over every
delivery. *publish msgs/s* = messages / the publisher's own time, at each S; ``S = 0`` is the
publisher alone. Every subscriber must get every message exactly once: losses and duplicates are
counted and printed (a subscriber stops after the last message or ``IDLE_S`` seconds without
one), never hidden.

connections (``--plot-connections``; the docs' ``docs/img/boundary-connections.png``)
------------------------------------------------------------------------------------

W = 1, 2, 4, 8, 16 worker processes, each the command a user deploys: ``python -m pgenough
worker run bench._boundary_tasks:app`` (a no-op task on queue ``boundary``, default settings:
concurrency 10, pool ``max(pool_max_size, concurrency + 5)``, one listener, maintenance on).
Once every worker has logged its start, the idle server connections of the database are counted
in ``pg_stat_activity``; then ``--jobs`` (default 5,000) jobs are enqueued in one COPY and the
benchmark samples, every ``SAMPLE_S`` seconds, the jobs left and the server connections (of the
database, and of every client backend against ``max_connections``). *drain jobs/s* = jobs /
(last job gone - first job claimed); *wake* = first claim - the enqueue's commit. Then SIGTERM;
each worker's exit code and error lines are reported.

The same again through PgBouncer (if installed): the benchmark writes a ``pgbouncer.ini`` in a
temporary directory (``pool_mode = transaction``, ``default_pool_size = --pool-size``, default
8), starts it on a free port, points the workers' ``DATABASE_URL`` at it, and stops it at the
end. Enqueueing and sampling stay on direct connections. Three session-state checks run
through it too: a ``subscribe()`` listening through PgBouncer while 20 messages are published
directly; the same session-level advisory lock tried by two pooled connections; and psycopg's
automatic prepared statements (a query run more than ``prepare_threshold`` times).

*busy* - the machine's CPU busy fraction just before a measurement, after waiting up to
``--quiet-wait`` seconds for it to drop under ``QUIET_BUSY`` (as in ``bench.queue``).
"""

from __future__ import annotations

TOO_MANY = "too many clients"
"""PostgreSQL's refusal past max_connections: a measured outcome, reported as such."""
