"""Prometheus metrics of the messaging core (prometheus-client's default registry).

Counters are per process and counted where the event happens; the depth gauges are refreshed
by each worker from one aggregate query (``queue.queue_stats``), so every replica exports the
same picture of the shared table: aggregate them with ``max``, not ``sum``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
JOB_DURATION = Histogram(
    "pgenough_job_duration_seconds",
    "Handler run time.",
    ["queue"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300),
)
QUEUE_DEPTH = Gauge("pgenough_queue_depth", "Jobs in the queue by state.", ["queue", "state"])
QUEUE_OLDEST_READY_AGE = Gauge(
    "pgenough_queue_oldest_ready_age_seconds",
    "How long the oldest runnable job has waited.",
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
PERIODIC_ERRORS = Counter("pgenough_periodic_errors", "Periodic task runs that raised.", ["task"])
