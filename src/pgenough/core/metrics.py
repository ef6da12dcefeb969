"""Prometheus metrics of the messaging core (prometheus-client's default registry).

Counters are per process and counted where the event happens; the depth gauges are refreshed
by each worker from one aggregate query (``queue.queue_stats``), and by the API when it is
scraped (``queue.refresh_queue_metrics``), so every replica exports the same picture of the
shared table: aggregate them with ``max``, not ``sum``.

Connection pools opened by ``db.open_pool`` are read at scrape time by ``PoolCollector``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from psycopg_pool import AsyncConnectionPool

from pgenough.core.job_states import QUEUE_DEPTHS, JobState

if TYPE_CHECKING:
    from pgenough.core.queue import QueueStats

JOBS_ENQUEUED = Counter(
    "pgenough_jobs_enqueued", "Jobs enqueued (counted when the insert runs).", ["queue"]
)
JOBS_CLAIMED = Counter("pgenough_jobs_claimed", "Jobs claimed by a worker.", ["queue"])
JOBS_COMPLETED = Counter("pgenough_jobs_completed", "Jobs whose handler succeeded.", ["queue"])
JOBS_FAILED = Counter("pgenough_jobs_failed", "Handler attempts that raised.", ["queue"])
JOBS_RETRIED = Counter(
    "pgenough_jobs_retried", "Failed attempts scheduled to run again after a backoff.", ["queue"]
)
JOBS_DEAD = Counter(
    "pgenough_jobs_dead", "Jobs dead-lettered (attempts spent, or the handler gave up).", ["queue"]
)
JOBS_RECLAIMED = Counter(
    "pgenough_jobs_reclaimed",
    "Claims whose lease expired (the worker died or hung) and were taken back.",
    ["queue"],
)
JOBS_TIMED_OUT = Counter(
    "pgenough_jobs_timed_out",
    "Attempts that ran past their task's timeout (a plain function's thread runs on to its end).",
    ["queue"],
)
JOB_DURATION = Histogram(
    "pgenough_job_duration_seconds",
    "Handler run time.",
    ["queue"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300),
)
JOBS_VACUUMS = Counter(
    "pgenough_jobs_vacuums",
    "VACUUMs of the jobs table by the vacuum duty (once across workers per interval, when due).",
)
QUEUE_DEPTH = Gauge("pgenough_queue_depth", "Jobs in the queue by state.", ["queue", "state"])
QUEUE_OLDEST_READY_AGE = Gauge(
    "pgenough_queue_oldest_ready_age_seconds",
    "How long the oldest runnable job has waited.",
    ["queue"],
)
QUEUE_LIMIT = Gauge(
    "pgenough_queue_limit",
    "The queue's fleet-wide limit (at most this many of its jobs run at once); 0 for none.",
    ["queue"],
)
QUEUE_RATE = Gauge(
    "pgenough_queue_rate_limit",
    "The queue's rate limit, in job starts per second across the fleet; 0 for none.",
    ["queue"],
)
QUEUE_PAUSED = Gauge(
    "pgenough_queue_paused",
    "1 while the queue is paused (no worker claims its jobs), else 0.",
    ["queue"],
)
PUBSUB_PUBLISHED = Counter("pgenough_pubsub_published", "Messages published.", ["channel"])
PUBSUB_RECEIVED = Counter(
    "pgenough_pubsub_received", "Messages delivered to subscribers.", ["channel"]
)
PUBSUB_GAPS = Counter(
    "pgenough_pubsub_gaps", "Subscriber reconnects, each a window where messages may be lost."
)
PERIODIC_RUNS = Counter("pgenough_periodic_runs", "Periodic task runs by this replica.", ["task"])
PERIODIC_CLAIMS = Counter(
    "pgenough_periodic_claims",
    "Attempts by this replica to claim a period of a periodic task (won or not).",
    ["task"],
)
PERIODIC_ERRORS = Counter("pgenough_periodic_errors", "Periodic task runs that raised.", ["task"])


class QueueMetrics:
    """The labelled children of one queue's job metrics, resolved once: a ``labels()`` lookup
    costs about three times the increment it precedes, and a worker makes several per job."""

    def __init__(self, queue: str) -> None:
        self.claimed = JOBS_CLAIMED.labels(queue)
        self.completed = JOBS_COMPLETED.labels(queue)
        self.failed = JOBS_FAILED.labels(queue)
        self.retried = JOBS_RETRIED.labels(queue)
        self.dead = JOBS_DEAD.labels(queue)
        self.timed_out = JOBS_TIMED_OUT.labels(queue)
        self.duration = JOB_DURATION.labels(queue)


QUEUE_STATES = tuple(d for d in QUEUE_DEPTHS if d != JobState.CANCELLED)
"""The depth gauge's ``state`` labels: ``QueueStats``'s counts but the cancelled (jobs no
one waits for, removed by the cleaner)."""
_seen_queues: set[str] = set()


def set_queue_stats(stats: Iterable[QueueStats]) -> None:
    """Set the depth gauges from one ``queue_stats`` result. A queue that emptied has no row
    any more: its gauges drop to 0 rather than freezing at their last value."""
    present = set()
    for s in stats:
        present.add(s.queue)
        for state in QUEUE_STATES:
            QUEUE_DEPTH.labels(s.queue, state).set(getattr(s, state))
        QUEUE_OLDEST_READY_AGE.labels(s.queue).set(s.oldest_ready_age)
        QUEUE_PAUSED.labels(s.queue).set(1 if s.paused else 0)
        QUEUE_LIMIT.labels(s.queue).set(s.max_running or 0)
        rate = s.rate_count / s.rate_interval if s.rate_count and s.rate_interval else 0
        QUEUE_RATE.labels(s.queue).set(rate)
    for queue in _seen_queues - present:
        for state in QUEUE_STATES:
            QUEUE_DEPTH.labels(queue, state).set(0)
        QUEUE_OLDEST_READY_AGE.labels(queue).set(0)
        QUEUE_PAUSED.labels(queue).set(0)
        QUEUE_LIMIT.labels(queue).set(0)
        QUEUE_RATE.labels(queue).set(0)
    _seen_queues.update(present)


# -- connection pools -------------------------------------------------------------------------

_POOLS: weakref.WeakSet[AsyncConnectionPool] = weakref.WeakSet()

# (metric, help, get_stats() key); the keys missing from get_stats() are counters still at 0.
_POOL_GAUGES = (
    ("pgenough_db_pool_max", "Most connections the pool may open (max_size).", "pool_max"),
    ("pgenough_db_pool_size", "Connections the pool holds, in use or idle.", "pool_size"),
    ("pgenough_db_pool_connections_idle", "Connections idle in the pool.", "pool_available"),
    (
        "pgenough_db_pool_requests_waiting",
        "Callers queued for a connection right now.",
        "requests_waiting",
    ),
)
_POOL_COUNTERS = (
    ("pgenough_db_pool_requests", "Connections requested from the pool.", "requests_num"),
    (
        "pgenough_db_pool_requests_queued",
        "Requests that had to wait because no connection was idle.",
        "requests_queued",
    ),
    (
        "pgenough_db_pool_requests_errors",
        "Requests that failed (pool timeout, pool closed).",
        "requests_errors",
    ),
    (
        "pgenough_db_pool_connections_lost",
        "Connections found broken and discarded.",
        "connections_lost",
    ),
)


def track_pool(pool: AsyncConnectionPool) -> None:
    """Export ``pool``'s usage under its name while it is open (held weakly: a pool that is
    garbage-collected disappears with it)."""
    _POOLS.add(pool)


class PoolCollector:
    """Reads every tracked pool at scrape time. ``get_stats()`` only reads; ``pop_stats()``
    would reset the pool's counters, turning them into per-scrape deltas that break ``rate()``
    as soon as two scrapers (or a human) read them. Pools sharing a name are summed, so a
    label set is never exported twice."""

    def describe(self) -> Iterator[Metric]:
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        totals: dict[str, dict[str, int]] = {}
        for pool in list(_POOLS):
            if pool.closed:
                continue
            into = totals.setdefault(pool.name, {})
            for key, value in pool.get_stats().items():
                into[key] = into.get(key, 0) + value
        return self._families(totals)

    @staticmethod
    def _families(totals: dict[str, dict[str, int]]) -> Iterator[Metric]:
        for metric, text, key in _POOL_GAUGES:
            gauge = GaugeMetricFamily(metric, text, labels=["pool"])
            for name, stats in sorted(totals.items()):
                gauge.add_metric([name], stats.get(key, 0))
            yield gauge
        in_use = GaugeMetricFamily(
            "pgenough_db_pool_connections_in_use",
            "Connections lent out to callers.",
            labels=["pool"],
        )
        for name, stats in sorted(totals.items()):
            in_use.add_metric([name], stats.get("pool_size", 0) - stats.get("pool_available", 0))
        yield in_use
        for metric, text, key in _POOL_COUNTERS:
            counter = CounterMetricFamily(metric, text, labels=["pool"])
            for name, stats in sorted(totals.items()):
                counter.add_metric([name], stats.get(key, 0))
            yield counter
        wait = CounterMetricFamily(
            "pgenough_db_pool_requests_wait_seconds",
            "Time callers spent waiting for a connection.",
            labels=["pool"],
        )
        for name, stats in sorted(totals.items()):
            wait.add_metric([name], stats.get("requests_wait_ms", 0) / 1000)
        yield wait


REGISTRY.register(PoolCollector())
