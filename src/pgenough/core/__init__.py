"""pgenough's messaging core: a work queue, pub/sub, advisory locks and periodic tasks on
PostgreSQL. It knows nothing about plans; ``docs/guides/`` and ``docs/reference.md`` are its
manual.

Here are the names most programs need: tasks, enqueueing, the worker, pub/sub, locks,
periodic tasks, the database and the errors a task raises. Everything else is in a public
submodule that declares its own ``__all__``: ``admin`` (inspecting the queue and acting on
it), ``db``, ``errors``, ``locks``, ``logcontext``, ``maintenance``, ``migrations``,
``periodic``, ``pubsub``, ``queue``, ``retry``, ``schedule``, ``service``, ``tasks`` and
``worker`` (docs/reference.md, "Where each name lives").
"""

from pgenough.core.db import database_url, open_pool, start_embedded
from pgenough.core.errors import GiveUp, PgenoughError, RetryIn, TaskFailed, TaskTimeout
from pgenough.core.locks import Lock, SyncLock, advisory_lock, advisory_xact_lock
from pgenough.core.migrations import migrate
from pgenough.core.periodic import Periodic, PeriodicTask
from pgenough.core.pubsub import Gap, Message, Subscription, publish, subscribe
from pgenough.core.queue import (
    EnqueueOptions,
    Job,
    JobRecord,
    NewJob,
    cancel_job,
    complete,
    enqueue,
    enqueue_many,
    fail,
    get_job,
)
from pgenough.core.retry import Backoff
from pgenough.core.schedule import Cron, Interval
from pgenough.core.tasks import App, BatchTask, Task, TaskContext
from pgenough.core.worker import (
    BatchHandler,
    Handler,
    ThreadHandler,
    Worker,
    WorkerConfig,
    WorkerStats,
)

__all__ = [
    "App",
    "Backoff",
    "BatchHandler",
    "BatchTask",
    "Cron",
    "EnqueueOptions",
    "Gap",
    "GiveUp",
    "Handler",
    "Interval",
    "Job",
    "JobRecord",
    "Lock",
    "Message",
    "NewJob",
    "Periodic",
    "PeriodicTask",
    "PgenoughError",
    "RetryIn",
    "Subscription",
    "SyncLock",
    "Task",
    "TaskContext",
    "TaskFailed",
    "TaskTimeout",
    "ThreadHandler",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "advisory_lock",
    "advisory_xact_lock",
    "cancel_job",
    "complete",
    "database_url",
    "enqueue",
    "enqueue_many",
    "fail",
    "get_job",
    "migrate",
    "open_pool",
    "publish",
    "start_embedded",
    "subscribe",
]
