"""Test mode: run an app's enqueued jobs in the test's own process, connection and transaction.

An application's tests enqueue jobs in transactions that are often never committed (Django's
``TestCase``, a pytest fixture that rolls back): a worker, on connections of its own, would
never see them. ``run_jobs`` runs them where they are::

    with transaction.atomic():                       # a Django TestCase's, say
        place_order(...)                             # enqueues send_receipt
        report = run_jobs(django_connection(), app)  # runs it, here, now
    assert report.completed_kinds == ["shop.send_receipt"]

Each job is claimed, run and completed (or its failure recorded) exactly as a worker does, with
the core's own statements, but on the caller's connection: the claim in the caller's
transaction, the task and its completion in a savepoint of it (a raising task's writes roll
back, the caller's transaction stays usable), the failure after it (attempts, error, retry
time or dead). Its arguments come from the stored job, through the same JSON round trip and
the same checks as on a worker. Jobs the tasks enqueue while running (chains) run too, each job
at most once per call, ``limit`` jobs in all.

An ``App(eager=True)`` (or ``PGENOUGH_EAGER=1``) does this at each enqueue of its tasks
(``enqueue_eagerly``): the job is inserted as usual, then run at once, in the caller's thread.

A task that records its own failure as its job's outcome, with ``fail(conn, job, exc)`` and
then ``raise TaskFailed from exc`` (a Django task: its result FAILED, never retried), is run
as a worker runs it: what it recorded stays (its savepoint is kept), its job is dead, its run
is reported ``dead``, and its error (the exception ``TaskFailed`` was raised from) is raised
as a failing task's is: a test never passes over it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import psycopg

from pgenough.core.errors import TaskFailed
from pgenough.core.failures import failure_outcome
from pgenough.core.queue import Job, NewJob, claim_in_process, complete_many, enqueue_job, fail_job
from pgenough.core.retry import Backoff
from pgenough.core.statements import AnyConnection, Atomic, Call, Steps, run
from pgenough.core.tasks import App

WORKER = "pgenough.testing"
"""The worker name test mode's claims record (``pgenough jobs`` shows it while one runs)."""
LEASE = 300.0
"""Seconds a test-mode claim is leased for: it ends within the call, unless the process dies."""
DEFAULT_LIMIT = 1000


@dataclass(frozen=True)
class JobRun:
    """One job that ``run_jobs`` ran: how it ended."""

    id: int
    kind: str
    queue: str
    attempt: int
    """Its attempt, this one included (1 on a first run)."""
    state: Literal["completed", "ready", "dead"]
    """``completed``; else ``ready`` (to retry at its new ``run_at``) or ``dead``."""
    error: str | None = None
    """The error recorded, as ``pgenough job ID`` shows it; None when it completed."""
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    """What the task raised (``raise_on_failure`` re-raises the first one); for a
    ``TaskFailed``, the exception it was raised from: the task's own error."""


@dataclass(frozen=True)
class RunReport:
    """What a ``run_jobs`` call ran, in order."""

    runs: list[JobRun]
    stopped_at_limit: bool = False
    """``limit`` jobs ran and another one was still ready (a chain that never ends?)."""

    @property
    def completed(self) -> list[JobRun]:
        return [r for r in self.runs if r.state == "completed"]

    @property
    def failed(self) -> list[JobRun]:
        return [r for r in self.runs if r.state != "completed"]

    @property
    def completed_kinds(self) -> list[str]:
        return [r.kind for r in self.completed]


@overload
def run_jobs(
    conn: psycopg.AsyncConnection[Any],
    app: App,
    *,
    queues: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    ids: Sequence[int] | None = None,
    limit: int = DEFAULT_LIMIT,
    include_scheduled: bool = False,
    raise_on_failure: bool = True,
) -> Coroutine[Any, Any, RunReport]: ...


@overload
def run_jobs(
    conn: psycopg.Connection[Any],
    app: App,
    *,
    queues: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    ids: Sequence[int] | None = None,
    limit: int = DEFAULT_LIMIT,
    include_scheduled: bool = False,
    raise_on_failure: bool = True,
) -> RunReport: ...


def run_jobs(
    conn: AnyConnection,
    app: App,
    *,
    queues: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    ids: Sequence[int] | None = None,
    limit: int = DEFAULT_LIMIT,
    include_scheduled: bool = False,
    raise_on_failure: bool = True,
) -> Any:
    """Run, on ``conn`` and in its transaction, every ready job (``run_at`` due; any with
    ``include_scheduled``) of ``app``'s tasks, of ``queues`` and ``kinds`` when given, and
    those they enqueue, up to ``limit`` jobs, each at most once; return what ran. With
    ``ids``, only those jobs (not the ones they enqueue). Sync on a sync connection (an
    async task on a private event loop), awaitable on an async one.

    With ``raise_on_failure`` (the default) the first task error is raised once every job
    has run, its failure recorded (so a test fails loudly; for a ``TaskFailed``, the error it
    was raised from); without, read ``report.failed``.
    Jobs of kinds no task of ``app`` has are left alone."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    wanted = list(app.tasks) if kinds is None else list(kinds)
    unknown = [k for k in wanted if k not in app.tasks]
    if unknown:
        raise ValueError(f"no task of this app is named {', '.join(map(repr, unknown))}")
    steps = _run_steps(
        app,
        kinds=wanted,
        queues=queues,
        ids=ids,
        limit=limit,
        scheduled=include_scheduled,
        raise_on_failure=raise_on_failure,
    )
    return run(conn, steps, what="run_jobs(...)", unless_awaited="no job was run")


def enqueue_eagerly(app: App, jobs: Iterable[NewJob], *, count: bool = False) -> Steps[Any]:
    """An eager app's enqueue: insert each job as usual, then run it at once as ``run_jobs``
    does (a task's error raised at the call). The id of the one job (None when its dedupe
    key was taken), or with ``count`` how many were inserted."""
    inserted = 0
    job_id: int | None = None
    for job in jobs:
        job_id = yield from enqueue_job(job)
        if job_id is None:
            continue
        inserted += 1
        yield from _run_steps(
            app,
            kinds=[job.kind],
            queues=None,
            ids=[job_id],
            limit=1,
            scheduled=True,
            raise_on_failure=True,
        )
    return inserted if count else job_id


def _run_steps(
    app: App,
    *,
    kinds: Sequence[str],
    queues: Sequence[str] | None,
    ids: Sequence[int] | None,
    limit: int,
    scheduled: bool,
    raise_on_failure: bool,
) -> Steps[RunReport]:
    rng = random.Random()
    runs: list[JobRun] = []
    seen: list[int] = []

    def claim() -> Steps[Job | None]:
        return claim_in_process(
            kinds=kinds,
            queues=queues,
            ids=ids,
            scheduled=scheduled,
            seen=seen,
            worker=WORKER,
            lease=LEASE,
        )

    stopped = False
    while True:
        if len(runs) == limit:
            # Is one more ready? Claimed in a savepoint rolled back at once: left as it was.
            try:
                yield Atomic(_peek(claim()))
            except _OneMore:
                stopped = True
            break
        job = yield from claim()
        if job is None:
            break
        seen.append(job.id)
        runs.append((yield from _run_one(app, job, rng)))
    if raise_on_failure:
        for ran in runs:
            if ran.exception is not None:
                raise ran.exception
    return RunReport(runs, stopped_at_limit=stopped)


class _OneMore(Exception):
    """Raised out of ``_peek``'s savepoint, to roll its claim back."""


def _peek(claim: Steps[Job | None]) -> Steps[None]:
    if (yield from claim) is not None:
        raise _OneMore


def _run_one(app: App, job: Job, rng: random.Random) -> Steps[JobRun]:
    task = app.tasks[job.kind]
    try:
        failed: TaskFailed | None = yield Atomic(
            _attempt(functools.partial(app.run_in_process, task), job)
        )
        if failed is not None:
            raise failed
    except Exception as exc:
        outcome = failure_outcome(exc, job, task.backoff or Backoff(), rng)
        # Nothing to do if its handler recorded it (TaskFailed after fail()): not its claim.
        state = yield from fail_job.steps(
            job,
            outcome.error,
            outcome.delay,
            give_up=outcome.give_up,
            traceback=outcome.traceback,
        )
        dead = state == "dead" or (state is None and isinstance(exc, TaskFailed))
        # A TaskFailed stands for the task's own error, the one a test wants raised.
        cause = exc.__cause__ if isinstance(exc, TaskFailed) else None
        return JobRun(
            job.id,
            job.kind,
            job.queue,
            job.attempts,
            "dead" if dead else "ready",
            outcome.error,
            cause or exc,
        )
    return JobRun(job.id, job.kind, job.queue, job.attempts, "completed")


def _attempt(call: Any, job: Job) -> Steps[TaskFailed | None]:
    """The task and its job's completion, in the savepoint ``_run_one`` opens: a task that
    completed its job itself (``complete(conn, ctx.job)``) leaves nothing to complete. A
    ``TaskFailed`` is answered, not raised, so that the savepoint keeps what its handler
    wrote with it (its own record of the failure: ``fail(conn, job, exc)``)."""
    try:
        yield Call(lambda conn: call(job, conn))
    except TaskFailed as failed:
        return failed
    yield from complete_many.steps([job])
    return None
