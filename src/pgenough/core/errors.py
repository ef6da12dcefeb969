"""Errors raised by the messaging core.

One root, a few branches that callers actually catch::

    PgenoughError
    ├── DatabaseError            the server is unreachable or a statement failed
    ├── MigrationError           the schema could not be brought up to date
    │   └── SchemaMissing        a call found no pgenough schema: run `pgenough migrate`
    ├── LockNotAcquired          advisory_lock(..., wait=False) found the lock taken
    ├── LeaseLost                the job is no longer ours: its lease expired and it was
    │                            reclaimed, or an operator cancelled it
    ├── JobNotFound              an operator action named a job that is not in that state
    ├── TaskTimeout              an attempt ran past its task's timeout (retried)
    └── JobOutcome               raised by a handler to choose what happens to its job
        ├── RetryIn(seconds)     run again after this delay (counts as an attempt)
        ├── GiveUp               dead-letter now, whatever the attempts left
        └── TaskFailed           the job is finished and its task failed: dead now, as
                                 the handler recorded it (``fail(conn, job, exc)``)

psycopg exceptions are translated once, at the boundary (``translate_db_errors``), and
chained with ``from``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg


class PgenoughError(Exception):
    """Root of every error pgenough raises on purpose."""


class DatabaseError(PgenoughError):
    """The database could not be reached or refused a statement."""


class MigrationError(PgenoughError):
    """The schema could not be migrated."""


class SchemaMissing(MigrationError):
    """A call met a database without pgenough's tables (never migrated, or migrated for
    another database): run ``pgenough migrate``, or ``manage.py migrate`` with
    ``pgenough.contrib.django`` installed. The failed statement aborted the caller's
    transaction, if one was open: it must be rolled back."""


class LockNotAcquired(PgenoughError):
    """A named advisory lock is held by someone else."""

    def __init__(self, name: str) -> None:
        super().__init__(f"advisory lock {name!r} is held by another session")
        self.name = name


class LeaseLost(PgenoughError):
    """The job's lease was lost: completing it now would complete someone else's claim."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} is no longer claimed by this worker")
        self.job_id = job_id


class JobCancelled(PgenoughError):
    """The job was cancelled while its handler ran (``TaskContext.raise_if_cancelled``): it is
    already ``cancelled``, never retried; the worker records nothing more of it."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} was cancelled")
        self.job_id = job_id


class JobNotFound(PgenoughError):
    """No job with that id is in a state the operation applies to."""

    def __init__(self, job_id: int, action: str) -> None:
        super().__init__(f"job {job_id}: nothing to {action} (unknown id or wrong state)")
        self.job_id = job_id


class TaskTimeout(PgenoughError):
    """An attempt ran past its task's ``timeout`` (the attempt fails and is retried)."""


class JobOutcome(PgenoughError):
    """Raised by a handler to choose its job's fate."""


class RetryIn(JobOutcome):
    """Run the job again after ``seconds``; counts as an attempt."""

    def __init__(self, seconds: float, reason: str = "retry requested") -> None:
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        super().__init__(f"{reason} (retry in {seconds:g}s)")
        self.seconds = seconds
        self.reason = reason


class GiveUp(JobOutcome):
    """Dead-letter the job now; an operator can still retry it."""


class TaskFailed(JobOutcome):
    """The job is finished and its task failed: what a handler raises once it has recorded
    that itself, with ``fail(conn, job, exc)`` in the transaction holding its own writes (the
    Django backend: the task's FAILED result), so that both commit together. Raise it *from*
    the task's exception::

        with transaction:                      # the handler's own
            record_my_outcome(...)
            fail(conn, job, exc)               # dead, exc's error and traceback recorded
        raise TaskFailed from exc

    The worker then records nothing more (the job is no longer its claim: the statement finds
    nothing to do); it counts the attempt as failed and dead-lettered, and logs it with the
    traceback. Raised without ``fail`` first, the worker dead-letters the job itself, after
    the handler's transaction, as for ``GiveUp``, with the error of the exception it was
    raised from (or its own message, when it has one). Test mode keeps what the handler
    wrote and does not re-raise it: the handler has dealt with the failure."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """What a log line or a run's reason quotes of ``exc``: its message's first line (a
    driver's message may run to several, with hints and the query), or its type when empty."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]


@contextmanager
def translate_db_errors(what: str) -> Iterator[None]:
    """Map connection-level psycopg failures to ``DatabaseError``.

    Statement errors that callers may handle themselves (unique violations and the like)
    pass through untouched.
    """
    try:
        yield
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"{what}: {exc}".strip()) from exc


__all__ = [
    "DatabaseError",
    "GiveUp",
    "JobCancelled",
    "JobNotFound",
    "JobOutcome",
    "LeaseLost",
    "LockNotAcquired",
    "MigrationError",
    "PgenoughError",
    "RetryIn",
    "SchemaMissing",
    "TaskFailed",
    "TaskTimeout",
    "first_line",
]
