"""What an operator or a dashboard uses to look at the queue and act on it: a job and its
failed attempts, jobs and counts by state, the queue's history, the live workers and the
periodic tasks; retry, discard and cancel; pause and resume a queue, limit it across the
fleet.

``pgenough status``, ``pgenough jobs``, ``pgenough job`` and the dashboard are built on these.
Each read and action takes the caller's connection, sync or async, first (``await
list_jobs(conn, state="dead")``), so an action joins the caller's transaction. The code lives
beside what it reads (``queue.py``, ``history.py``, ``registry.py``, ``periodic.py``,
``job_states.py``, ``pauses.py``, ``limits.py``); this module gathers its public names.
"""

from pgenough.core.history import QueuePoint, queue_history, queue_trend
from pgenough.core.job_states import JOB_STATES, JobState, parse_job_state
from pgenough.core.limits import (
    QueueLimit,
    check_limits,
    clear_queue_limit,
    queue_limits,
    set_queue_limit,
)
from pgenough.core.pauses import QueuePause, pause_queue, paused_queues, resume_queue
from pgenough.core.periodic import PeriodicInfo, list_periodic
from pgenough.core.queue import (
    AttemptError,
    JobFailures,
    JobRecord,
    QueueStats,
    cancel_job,
    discard_dead,
    discard_job,
    discard_jobs,
    get_job,
    job_failures,
    job_failures_by_queue,
    jobs_by_payload,
    list_jobs,
    queue_stats,
    refresh_queue_metrics,
    retry_dead,
    retry_job,
    retry_jobs,
)
from pgenough.core.registry import RunningJob, WorkerInfo, list_workers

# Plainly sorted, as tests/test_public_api.py checks; ruff's isort-style order would put the
# one constant first.
__all__ = [  # noqa: RUF022
    "AttemptError",
    "JOB_STATES",
    "JobFailures",
    "JobRecord",
    "JobState",
    "PeriodicInfo",
    "QueueLimit",
    "QueuePause",
    "QueuePoint",
    "QueueStats",
    "RunningJob",
    "WorkerInfo",
    "cancel_job",
    "check_limits",
    "clear_queue_limit",
    "discard_dead",
    "discard_job",
    "discard_jobs",
    "get_job",
    "job_failures",
    "job_failures_by_queue",
    "jobs_by_payload",
    "list_jobs",
    "list_periodic",
    "list_workers",
    "parse_job_state",
    "pause_queue",
    "paused_queues",
    "queue_history",
    "queue_limits",
    "queue_stats",
    "queue_trend",
    "refresh_queue_metrics",
    "resume_queue",
    "retry_dead",
    "retry_job",
    "retry_jobs",
    "set_queue_limit",
]
