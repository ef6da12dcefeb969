"""The worker: runs the handlers of one or more queues in this process.

Its public face is here: the ``Worker``, its ``WorkerConfig`` (with the defaults and bounds of
every setting, in ``config``), the handler types (``handlers``) and its counts and job lines
(``outcomes``). The inside is private, a module per part:

- ``_host``: the ``Worker``, the process host: one executor per queue, and what they share
  (the listener, the periodic duties, the signal handlers);
- ``_executor``: one queue's claim loop, and its shutdown;
- ``_running``: running one job and recording its outcome; ``_batches``: a batch handler's
  jobs in one transaction;
- ``_heartbeat``: extending the leases of the jobs in flight; ``_flight``: what an executor
  holds (in flight, to acknowledge, its counts), shared by those parts;
- ``_listener``: the one LISTEN connection per process that wakes the executors.
"""

from pgenough.core.worker._host import Worker
from pgenough.core.worker.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CONCURRENCY,
    DEFAULT_LEASE,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_STATS_INTERVAL,
    DEFAULT_UNHANDLED_GRACE,
    MAX_BATCH_SIZE,
    MAX_CONCURRENCY,
    WorkerConfig,
    parse_queues,
)
from pgenough.core.worker.handlers import AnyHandler, BatchFn, BatchHandler, Handler, ThreadHandler
from pgenough.core.worker.outcomes import INTERRUPTED, JOBS_LOGGER, WorkerStats

# Plainly sorted, as tests/test_public_api.py checks.
__all__ = [  # noqa: RUF022
    "AnyHandler",
    "BatchFn",
    "BatchHandler",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_LEASE",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "DEFAULT_STATS_INTERVAL",
    "DEFAULT_UNHANDLED_GRACE",
    "Handler",
    "INTERRUPTED",
    "JOBS_LOGGER",
    "MAX_BATCH_SIZE",
    "MAX_CONCURRENCY",
    "ThreadHandler",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "parse_queues",
]
