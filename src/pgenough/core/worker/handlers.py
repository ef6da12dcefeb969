"""What a worker runs: the handler types a ``Worker`` maps each job kind to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import psycopg

from pgenough.core.queue import Job
from pgenough.core.retry import Backoff

Handler: TypeAlias = Callable[[Job], Awaitable[None]]
"""An async function of the claimed job: the plain handler (a task's, once wrapped)."""
BatchFn: TypeAlias = Callable[[psycopg.AsyncConnection[Any], Sequence[Job]], Awaitable[None]]


@dataclass(frozen=True)
class BatchHandler:
    """A handler of many jobs at once, in one transaction: batch-transactional completion.

    ``fn(conn, jobs)`` runs in a transaction open on ``conn`` (a pooled connection); when it
    returns, the worker completes every one of ``jobs`` in that same transaction and
    commits, so their effects and their completions commit together, exactly once. Its
    effects should be database writes on ``conn``: when a batch is retried (a job raised
    and the batch is bisected, or a claim was lost and the rest runs again) the rolled-back
    writes vanish, but a mail sent or an HTTP call made happens again.

    ``check(job)``, when given, runs on each job before its batch does: raising there fails
    that job alone (``GiveUp`` dead-letters it), and the batch runs without it. ``backoff``
    is the retry policy of a job that fails alone (None: the queue's).
    """

    fn: BatchFn
    backoff: Backoff | None = None
    check: Callable[[Job], object] | None = None


@dataclass(frozen=True)
class ThreadHandler:
    """A blocking handler: ``fn(job)`` runs in a thread of its queue's own pool, which has
    ``concurrency`` threads, so a blocking call (an ORM, an HTTP client) stalls no other job
    and every job the claim admits starts at once.

    Python cannot interrupt a thread, and a job is never run twice at the same time: so the
    job of a running ``fn`` stays claimed, its lease renewed by the heartbeat, until ``fn``
    returns, whatever happens meanwhile. Past ``timeout`` seconds (counted from the moment
    ``fn`` starts) the worker logs it, and when ``fn`` returns the attempt fails with
    ``TaskTimeout`` and is retried like any failure. On shutdown the worker waits for it
    past ``shutdown_timeout``; if the process is killed instead, the lease expiry hands the
    job on. ``backoff`` is its retry policy (None: the queue's).
    """

    fn: Callable[[Job], object]
    timeout: float | None = None
    backoff: Backoff | None = None


AnyHandler: TypeAlias = Handler | BatchHandler | ThreadHandler
