"""pgenough's messaging core: a work queue, pub/sub, advisory locks and periodic tasks on
PostgreSQL. It knows nothing about plans; ``docs/messaging.md`` is its manual."""

from pgenough.core._sql import PLAN_EACH_TIME, named_queries
from pgenough.core.db import database_url, open_pool, start_embedded
from pgenough.core.errors import (
    DatabaseError,
    GiveUp,
    JobNotFound,
    LeaseLost,
    LockNotAcquired,
    MigrationError,
    PgenoughError,
    RetryIn,
    TaskTimeout,
)
from pgenough.core.locks import Lock, SyncLock, advisory_lock, advisory_xact_lock, lock_key
from pgenough.core.logcontext import bind_log_context, current_log_context, log_context
from pgenough.core.maintenance import (
    CleanResult,
    MaintenanceConfig,
    RescueResult,
    clean,
    rescue_expired,
)
from pgenough.core.migrations import MigrationSet, migrate, schema_version
from pgenough.core.periodic import Claim, Periodic, PeriodicTask
from pgenough.core.pubsub import Gap, Message, Subscription, publish, subscribe
from pgenough.core.queue import (
    JOB_STATES,
    Job,
    JobRecord,
    NewJob,
    QueueStats,
    cancel_job,
    complete,
    enqueue,
    enqueue_many,
    get_job,
    list_jobs,
    queue_stats,
    refresh_queue_metrics,
    retry_dead,
    retry_job,
)
from pgenough.core.retry import Backoff
from pgenough.core.schedule import Cron, Interval, Schedule, Tick
from pgenough.core.statements import AnyConnection
from pgenough.core.tasks import (
    App,
    AppNotFound,
    BatchTask,
    EnqueueOptions,
    Task,
    TaskArgumentsError,
    TaskContext,
    load_app,
)
from pgenough.core.worker import (
    BatchHandler,
    Handler,
    ThreadHandler,
    Worker,
    WorkerConfig,
    WorkerStats,
)

# Plainly sorted, as tests/test_public_api.py checks; ruff's isort-style order would put the
# one constant first.
__all__ = [  # noqa: RUF022
    "AnyConnection",
    "App",
    "AppNotFound",
    "Backoff",
    "BatchHandler",
    "BatchTask",
    "Claim",
    "CleanResult",
    "Cron",
    "DatabaseError",
    "EnqueueOptions",
    "Gap",
    "GiveUp",
    "Handler",
    "Interval",
    "JOB_STATES",
    "Job",
    "JobNotFound",
    "JobRecord",
    "LeaseLost",
    "Lock",
    "LockNotAcquired",
    "MaintenanceConfig",
    "Message",
    "MigrationError",
    "MigrationSet",
    "NewJob",
    "PLAN_EACH_TIME",
    "Periodic",
    "PeriodicTask",
    "PgenoughError",
    "QueueStats",
    "RescueResult",
    "RetryIn",
    "Schedule",
    "Subscription",
    "SyncLock",
    "Task",
    "TaskArgumentsError",
    "TaskContext",
    "TaskTimeout",
    "ThreadHandler",
    "Tick",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "advisory_lock",
    "advisory_xact_lock",
    "bind_log_context",
    "cancel_job",
    "clean",
    "complete",
    "current_log_context",
    "database_url",
    "enqueue",
    "enqueue_many",
    "get_job",
    "list_jobs",
    "load_app",
    "lock_key",
    "log_context",
    "migrate",
    "named_queries",
    "open_pool",
    "publish",
    "queue_stats",
    "refresh_queue_metrics",
    "rescue_expired",
    "retry_dead",
    "retry_job",
    "schema_version",
    "start_embedded",
    "subscribe",
]
