"""The work queue: jobs, enqueue, completion, and the operator's retry and cancel.

Every operation takes the caller's connection, sync or async (``statements.py``), so it
joins whatever transaction is open on it: a job exists iff the transaction that enqueued it
commits, and a handler that completes its job in the transaction holding its own writes has
exactly-once database effects.
This module runs every statement on ``pgenough.jobs`` (``sql/queue.sql``): the producer's
and the operator's calls, the worker's claims, heartbeats and failure bookkeeping (async functions
that the worker (``worker._executor``) calls), the maintenance duties' batches (``maintenance.py``
runs them under its timeouts) and the read models other layers need (``job_failures``,
``jobs_by_payload``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, LiteralString, NamedTuple

import orjson
from psycopg.abc import Buffer
from psycopg.types.json import Jsonb, JsonbLoader

from pgenough.core import metrics
from pgenough.core._sql import PLAN_EACH_TIME, load
from pgenough.core.cancellation import CANCEL_CHANNEL
from pgenough.core.errors import JobNotFound, LeaseLost
from pgenough.core.failures import ERRORS_KEPT, TRACEBACKS_KEPT, describe, format_traceback
from pgenough.core.job_states import QUEUE_DEPTHS, JobState, depth_state, parse_job_state
from pgenough.core.locks import lock_key
from pgenough.core.statements import AsyncConn, Atomic, Copy, Query, Steps, dual, record_rows

_Q = load("queue")

DEFAULT_QUEUE = "default"
JOBS_CHANNEL = "pgenough_jobs"
"""Notified with a queue's name when it gets runnable work (workers listen here)."""
DEFAULT_JOB_MAX_ATTEMPTS = 20
"""Attempts a job gets unless its enqueue says otherwise (not the plan service's HTTP
attempts per fetch)."""
DEFAULT_MAX_ATTEMPTS = DEFAULT_JOB_MAX_ATTEMPTS
"""Deprecated: ``DEFAULT_JOB_MAX_ATTEMPTS``'s old name."""


@dataclass(frozen=True)
class Job:
    """A claimed job, as its handler sees it."""

    id: int
    queue: str
    kind: str
    payload: Any
    priority: int
    attempts: int
    """Attempts so far, this one included (1 on the first run)."""
    max_attempts: int
    run_at: datetime
    created_at: datetime
    """When it was enqueued. A claim is the job's id, its attempt and this: after a failover
    with asynchronous replication the new primary hands out again the ids of jobs it never
    received, and a handler still running such a job must not complete the one that took
    its id."""


@dataclass(frozen=True)
class EnqueueOptions:
    """How a job is enqueued, whatever enqueues it (``enqueue``'s keywords, a task's
    declaration and ``Task.using``, a ``NewJob``): the one list of the options."""

    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = DEFAULT_JOB_MAX_ATTEMPTS
    run_at: datetime | timedelta | None = None
    """When it may first run: a time, a delay from the database's now, or now."""
    dedupe_key: str | None = None


@dataclass(frozen=True)
class NewJob:
    """A job to enqueue in bulk with ``enqueue_many``: a kind, a payload and the fields of
    ``EnqueueOptions`` (tests/core/test_queue.py checks they stay the same)."""

    kind: str
    payload: Any = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    run_at: datetime | timedelta | None = None
    """When it may first run: a time, a delay from the database's now, or now."""
    max_attempts: int = DEFAULT_JOB_MAX_ATTEMPTS
    dedupe_key: str | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if not self.kind:
            raise ValueError("kind must not be empty")

    @classmethod
    def with_options(cls, kind: str, payload: Any, options: EnqueueOptions) -> NewJob:
        """The job of ``kind`` and ``payload`` enqueued with ``options``."""
        return cls(
            kind,
            payload,
            queue=options.queue,
            priority=options.priority,
            run_at=options.run_at,
            max_attempts=options.max_attempts,
            dedupe_key=options.dedupe_key,
        )


@dataclass(frozen=True)
class AttemptError:
    """One failed attempt of a job, as ``jobs.errors`` keeps it (the newest
    ``failures.ERRORS_KEPT``, oldest first)."""

    attempt: int | None
    """The attempt that failed (1 for the first run)."""
    at: datetime | None
    """When its failure was recorded."""
    worker: str | None
    """The worker that ran it (None: unknown, e.g. a claim taken back by the rescuer)."""
    error: str
    """Its one-line error (``Type: message``, "gave up: ...", "lease expired: ...")."""
    traceback: str | None = None
    """Its formatted traceback, bounded (``failures.TRACEBACK_LIMIT``), on the newest
    ``failures.TRACEBACKS_KEPT`` entries that had one; None for older entries and for
    failures without a Python exception (an expired lease, a job no task handles) or chosen
    on purpose with nothing to show (``RetryIn``)."""

    @classmethod
    def from_entry(cls, entry: Any) -> AttemptError:
        """An element of ``jobs.errors`` (a JSON object; one written by hand may lack keys)."""
        if isinstance(entry, AttemptError):
            return entry
        if not isinstance(entry, dict):
            return cls(None, None, None, str(entry))
        attempt = entry.get("attempt")
        traceback = entry.get("traceback")
        return cls(
            attempt=attempt if isinstance(attempt, int) else None,
            at=_instant(entry.get("at")),
            worker=None if entry.get("worker") is None else str(entry["worker"]),
            error=str(entry.get("error") or ""),
            traceback=traceback if isinstance(traceback, str) else None,
        )


def _instant(value: object) -> datetime | None:
    """A jsonb timestamp (``to_jsonb(now())``: ISO 8601), None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class JobRecord:
    """Everything the jobs table knows about one job (for operators and tests)."""

    id: int
    queue: str
    kind: str
    payload: Any
    priority: int
    state: JobState
    """A ``JobState`` (a ``str``: it compares, hashes and serializes as its value)."""
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    claimed_at: datetime | None
    lease_until: datetime | None
    worker: str | None
    finished_at: datetime | None
    dedupe_key: str | None
    last_error: str | None
    errors: list[AttemptError] = field(default_factory=list)
    """Its failed attempts, oldest first (the newest ``failures.ERRORS_KEPT``)."""

    def __post_init__(self) -> None:
        # Rows bring the enum's text (the statements select state::text) and the errors'
        # JSON objects.
        if not isinstance(self.state, JobState):
            object.__setattr__(self, "state", JobState(self.state))
        errors = self.errors if isinstance(self.errors, list) else []
        object.__setattr__(self, "errors", [AttemptError.from_entry(e) for e in errors])


@dataclass(frozen=True)
class QueueStats:
    queue: str
    ready: int
    scheduled: int
    running: int
    dead: int
    cancelled: int
    oldest_ready_age: float
    """Seconds the oldest runnable job has been waiting; 0 when none is."""
    paused: bool = False
    """No worker claims its jobs until it is resumed (``pauses.py``)."""
    max_running: int | None = None
    """Its fleet-wide limit: at most this many of its jobs run at once (``limits.py``)."""
    rate_count: int | None = None
    """Its rate: at most this many of its jobs start in any ``rate_interval`` seconds."""
    rate_interval: float | None = None

    def by_state(self) -> dict[JobState, int]:
        """The counts per job state (the scheduled among the ready, as ``list_jobs``
        lists them)."""
        totals = dict.fromkeys(JobState, 0)
        for depth in QUEUE_DEPTHS:
            totals[depth_state(depth)] += getattr(self, depth)
        return totals


@dual
def enqueue(
    kind: str,
    payload: Any = None,
    *,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    run_at: datetime | timedelta | None = None,
    max_attempts: int = DEFAULT_JOB_MAX_ATTEMPTS,
    dedupe_key: str | None = None,
) -> Steps[int | None]:
    """Enqueue one job in the transaction open on ``conn``; return its id.

    Returns None when ``dedupe_key`` matches a job of the same queue that is still ready or
    running. Idle workers of the queue are woken when the transaction commits.
    """
    options = EnqueueOptions(queue, priority, max_attempts, run_at, dedupe_key)
    return (yield from enqueue_job(NewJob.with_options(kind, payload, options)))


def enqueue_job(job: NewJob) -> Steps[int | None]:
    """The steps of ``enqueue`` for a built job (what ``Task.enqueue`` runs)."""
    result = yield Query(
        _Q["enqueue"],
        {
            "channel": JOBS_CHANNEL,
            "queue": job.queue,
            "kind": job.kind,
            "payload": Jsonb(job.payload),
            "priority": job.priority,
            "run_at": job.run_at if isinstance(job.run_at, datetime) else None,
            "delay": job.run_at if isinstance(job.run_at, timedelta) else None,
            "max_attempts": job.max_attempts,
            "dedupe_key": job.dedupe_key,
        },
    )
    if not result.rows:
        return None
    metrics.JOBS_ENQUEUED.labels(job.queue).inc()
    return int(result.rows[0][0])


@dual
def enqueue_many(jobs: Iterable[NewJob]) -> Steps[int]:
    """Enqueue many jobs with COPY in the transaction open on ``conn``.

    Returns how many were inserted: jobs whose dedupe key is taken by a live job, or by an
    earlier job of the same call, are skipped.
    """
    batch = list(jobs)
    if not batch:
        return 0
    inserted: dict[str, int] = yield Atomic(_insert_many(batch))
    for queue, n in inserted.items():
        metrics.JOBS_ENQUEUED.labels(queue).inc(n)
    return sum(inserted.values())


def _insert_many(batch: list[NewJob]) -> Steps[dict[str, int]]:
    now: datetime = (yield Query(_Q["db_now"])).rows[0][0]
    inserted: dict[str, int] = {}
    if any(j.dedupe_key is not None for j in batch):
        yield Query(_Q["create_enqueue_staging"])
        yield Query(_Q["truncate_enqueue_staging"])
        yield Copy(
            _Q["copy_enqueue_staging"], ((n, *_copy_row(job, now)) for n, job in enumerate(batch))
        )
        for (queue,) in (yield Query(_Q["insert_from_staging"])).rows:
            inserted[queue] = inserted.get(queue, 0) + 1
    else:
        yield Copy(_Q["copy_jobs"], (_copy_row(job, now) for job in batch))
        for job in batch:
            inserted[job.queue] = inserted.get(job.queue, 0) + 1
    for queue in sorted(inserted):
        yield Query(_Q["notify_queue"], {"channel": JOBS_CHANNEL, "queue": queue})
    return inserted


def _copy_row(job: NewJob, now: datetime) -> tuple[Any, ...]:
    run_at = now + job.run_at if isinstance(job.run_at, timedelta) else job.run_at or now
    return (
        job.queue,
        job.kind,
        json.dumps(job.payload),
        job.priority,
        run_at,
        job.max_attempts,
        job.dedupe_key,
    )


@dual
def complete(job: Job) -> Steps[None]:
    """Complete ``job`` in the transaction open on ``conn``.

    Call it in the same transaction as the handler's own writes: they then commit together,
    exactly once. Raises ``LeaseLost`` (roll back!) when the job is no longer this claim -
    its lease expired and it was reclaimed, or an operator cancelled it.
    """
    result = yield Query(_Q["complete"], claim_of(job), prepare=PLAN_EACH_TIME)
    if not result.rows:
        raise LeaseLost(job.id)


@dual
def complete_many(jobs: Sequence[Job]) -> Steps[set[int]]:
    """Complete ``jobs`` in the transaction open on ``conn``, in one statement; return the
    ids of those that were still this claim. Fewer ids than jobs means some were reclaimed
    or cancelled meanwhile: roll back, or their effects would commit twice."""
    result = yield Query(_Q["complete_many"], claims_of(jobs), prepare=PLAN_EACH_TIME)
    return {row[0] for row in result.rows}


@dual
def fail(job: Job, exc: BaseException) -> Steps[None]:
    """Dead-letter ``job`` in the transaction open on ``conn``: its attempt failed with
    ``exc``, recorded as a worker records a failure (the one-line error in ``last_error``,
    and with the traceback in ``errors``), and it is not retried.

    ``complete``'s counterpart, for a handler that finishes its job as failed together with
    its own writes (the Django backend writes a task's FAILED result so); the handler then
    raises ``TaskFailed`` from ``exc`` for the worker to count and log it. Raises
    ``LeaseLost`` (roll back!) when the job is no longer this claim."""
    state = yield from fail_job.steps(
        job, describe(exc), 0.0, give_up=True, traceback=format_traceback(exc)
    )
    if state is None:
        raise LeaseLost(job.id)


@dual
def retry_job(job_id: int) -> Steps[None]:
    """Make a dead, cancelled or waiting job runnable now (one more attempt if spent)."""
    result = yield Query(_Q["retry_job"], {"id": job_id}, prepare=PLAN_EACH_TIME)
    if not result.rows:
        raise JobNotFound(job_id, "retry")


@dual
def retry_jobs(job_ids: Iterable[int]) -> Steps[int]:
    """``retry_job`` for several jobs at once, in one statement: those of ``job_ids`` that are
    dead, cancelled or waiting run again now (one more attempt if spent); return how many.
    The others (running, or gone) are left as they are."""
    ids = {"ids": int_array(job_ids)}
    result = yield Query(_Q["retry_jobs"], ids, prepare=PLAN_EACH_TIME)
    return len(result.rows)


@dual
def retry_dead(
    queue: str | None = None, *, kind: str | None = None, text: str | None = None
) -> Steps[int]:
    """Make every dead job of ``queue`` (all queues when None) runnable now; return how many.
    ``kind`` and ``text`` narrow it as they narrow ``list_jobs``."""
    params = {"queue": queue, "kind": kind, "text": text}
    result = yield Query(_Q["retry_dead"], params, prepare=PLAN_EACH_TIME)
    return len(result.rows)


@dual
def discard_job(job_id: int) -> Steps[None]:
    """Cancel a ready, running or dead job; it stays visible until the cleaner removes it.
    A running job's handler is told on commit (``cancellation.py``): an async one is
    cancelled at its next await, a plain function sees ``ctx.cancelled``."""
    params = {"ids": int_array([job_id]), "channel": CANCEL_CHANNEL}
    result = yield Query(_Q["discard_jobs"], params, prepare=PLAN_EACH_TIME)
    if not result.rows:
        raise JobNotFound(job_id, "cancel")


@dual
def discard_jobs(job_ids: Iterable[int]) -> Steps[int]:
    """``discard_job`` for several jobs at once, in one statement: those of ``job_ids`` that
    are ready, running or dead are cancelled; return how many."""
    params = {"ids": int_array(job_ids), "channel": CANCEL_CHANNEL}
    result = yield Query(_Q["discard_jobs"], params, prepare=PLAN_EACH_TIME)
    return len(result.rows)


@dual
def discard_dead(
    queue: str | None = None, *, kind: str | None = None, text: str | None = None
) -> Steps[int]:
    """Cancel every dead job of ``queue`` (all queues when None), narrowed by ``kind`` and
    ``text`` as ``list_jobs`` is; return how many. They stay visible as ``cancelled`` until
    the cleaner removes them."""
    params = {"queue": queue, "kind": kind, "text": text}
    result = yield Query(_Q["discard_dead"], params, prepare=PLAN_EACH_TIME)
    return len(result.rows)


cancel_job = discard_job
"""Deprecated: ``discard_job``'s old name (docs/guides/failures.md, "Renamed names")."""


@dual
def get_job(job_id: int) -> Steps[JobRecord | None]:
    """The job's row, or None when it does not exist (completed jobs are deleted)."""
    result = yield Query(_Q["get_job"], {"id": job_id}, record=JobRecord, prepare=PLAN_EACH_TIME)
    return result.rows[0] if result.rows else None


@dual
def list_jobs(
    *,
    state: str | None = None,
    queue: str | None = None,
    kind: str | None = None,
    text: str | None = None,
    failing: bool = False,
    limit: int = 100,
    before: int | None = None,
) -> Steps[list[JobRecord]]:
    """Jobs newest first: of one ``state`` (ready, running, dead, cancelled) or all, of one
    ``queue`` or all, of one ``kind`` (the task's name) or all; ``text``: only those whose
    payload, as JSON text, holds it (case-insensitive; the payload as PostgreSQL writes
    ``jsonb``: ``{"key": "value"}``, a space after each colon and comma; a scan, bounded by
    the session's ``statement_timeout``); ``failing`` keeps those whose last attempt raised -
    dead, or waiting to retry. Page with ``before``: the smallest id of the previous page."""
    if state is not None:
        state = parse_job_state(state)
    if limit < 1:
        raise ValueError("limit must be >= 1")
    params = {
        "state": state,
        "queue": queue,
        "kind": kind,
        "text": text,
        "failing": failing,
        "limit": limit,
        "before": before,
    }
    result = yield Query(_Q["list_jobs"], params, record=JobRecord, prepare=PLAN_EACH_TIME)
    jobs: list[JobRecord] = result.rows
    return jobs


@dual
def queue_stats() -> Steps[list[QueueStats]]:
    """Per-queue depth by state and the age of the oldest runnable job."""
    result = yield Query(_Q["stats"], record=QueueStats)
    stats: list[QueueStats] = result.rows
    return stats


@dataclass(frozen=True)
class JobFailures:
    dead: int
    """Jobs dead-lettered in the window."""
    attempts_failed: int
    """Failed attempts recorded in the window on jobs still kept (retrying or dead)."""


@dual
def job_failures(window: float) -> Steps[JobFailures]:
    """What went wrong with jobs in the last ``window`` seconds."""
    result = yield Query(_Q["job_failures_since"], {"window": window}, record=JobFailures)
    failures: JobFailures = result.rows[0]  # an aggregate: always one row
    return failures


@dual
def job_failures_by_queue(window: float) -> Steps[dict[str, JobFailures]]:
    """``job_failures`` per queue, for the queues that have failing or dead jobs."""
    result = yield Query(_Q["job_failures_by_queue"], {"window": window})
    return {queue: JobFailures(int(dead), int(failed)) for queue, dead, failed in result.rows}


@dual
def jobs_by_payload(*, queue: str, kind: str, key: str, value: object) -> Steps[list[JobRecord]]:
    """The jobs of ``queue`` and ``kind`` whose payload's ``key`` is ``value`` (compared as
    text: 7 finds ``{"run_id": 7}``), oldest first."""
    params = {"queue": queue, "kind": kind, "key": key, "value": str(value)}
    result = yield Query(_Q["jobs_by_payload"], params, record=JobRecord, prepare=PLAN_EACH_TIME)
    jobs: list[JobRecord] = result.rows
    return jobs


@dual
def refresh_queue_metrics() -> Steps[list[QueueStats]]:
    """``queue_stats`` into the depth gauges (workers call it every ``stats_interval``, the
    API each time it is scraped)."""
    stats = yield from queue_stats.steps()
    metrics.set_queue_stats(stats)
    return stats


# -- the worker's side: async, on the worker's own connections ----------------------------------

_JOB_ROWS = record_rows(Job)


async def hold_for_claims(conn: AsyncConn) -> None:
    """Set up the session of a connection a claim loop keeps (see
    ``worker._executor.Executor._hold`` for why): its claims planned at each execution and
    never with a Sort."""
    await conn.execute(_Q["plan_each_claim"])


async def unhold_for_claims(conn: AsyncConn) -> None:
    """Undo ``hold_for_claims``, before the connection goes back to the pool."""
    await conn.execute(_Q["plan_as_usual"])


async def cancelled_among(conn: AsyncConn, ids: Sequence[int]) -> list[int]:
    """Which of ``ids`` (jobs in flight whose lease could not be extended) were cancelled."""
    cur = await conn.execute(_Q["cancelled_among"], {"ids": int_array(ids)}, prepare=PLAN_EACH_TIME)
    return [row[0] for row in await cur.fetchall()]


class Claimed(NamedTuple):
    """What a claim took, and whether its queue has a fleet-wide limit (``limits.py``): a
    limited queue is claimed with ``claim_limited``, the plain claim takes nothing of it."""

    jobs: list[Job]
    limited: bool
    next_start_in: float | None = None
    """Seconds until the queue's rate allows another start, when it held jobs back."""


LIMITED_ID: Final = -1
"""The id of the plain claim's last row when the queue has a limit (no job has it)."""
UNLIMITED_ID: Final = -2
"""The id of the limited claim's last row when the queue has no limit any more."""
RATE_HELD_ID: Final = -3
"""The id of the limited claim's last row when the queue's rate held jobs back: its ``run_at``
is when the next start is allowed, its ``created_at`` the database's clock then."""


async def claim(
    conn: AsyncConn,
    *,
    queue: str,
    worker: str,
    lease: float,
    limit: int,
    done: Sequence[Job],
    after: tuple[int, datetime, int] | None = None,
) -> Claimed:
    """Acknowledge ``done`` (those still this claim) and claim up to ``limit`` ready jobs of
    ``queue`` for ``worker``, in one statement: past the position ``after`` (priority,
    run_at, id) within that priority when given, else from the start of the claim index.
    A paused queue gives nothing; a limited one nothing, and says so (``Claimed.limited``).

    On a connection that prepares, the session must be held (``hold_for_claims``); on one
    that does not, the planner setting is made for this transaction only."""
    params = _claim_params(queue, worker, lease, limit, done)
    if after is None:
        query = _Q["claim"]
    else:
        query = _Q["claim_after"]
        params.update(priority=after[0], after_run_at=after[1], after_id=after[2])
    jobs = await _claim_rows(conn, query, params)
    if jobs and jobs[-1].id == LIMITED_ID:
        return Claimed(jobs[:-1], True)
    return Claimed(jobs, False)


async def claim_limited(
    conn: AsyncConn, *, queue: str, worker: str, lease: float, limit: int, done: Sequence[Job]
) -> Claimed:
    """``claim`` for a queue with a fleet-wide limit, in one statement: acknowledge ``done``,
    take the queue's limit lock, count its running jobs and claim at most what its limit
    leaves (``limits.py``). ``Claimed.limited`` is False once the limit was lifted (then
    nothing was claimed)."""
    params = _claim_params(queue, worker, lease, limit, done)
    params["key"] = limit_lock_key(queue)
    jobs = await _claim_rows(conn, _Q["claim_limited"], params)
    if jobs and jobs[-1].id == UNLIMITED_ID:
        return Claimed(jobs[:-1], False)
    if jobs and jobs[-1].id == RATE_HELD_ID:
        held = jobs.pop()
        return Claimed(jobs, True, max(0.0, (held.run_at - held.created_at).total_seconds()))
    return Claimed(jobs, True)


def _claim_params(
    queue: str, worker: str, lease: float, limit: int, done: Sequence[Job]
) -> dict[str, Any]:
    return {
        **claims_of(done, prefix="done_"),
        "queue": queue,
        "limit": limit,
        "lease": lease,
        "worker": worker,
    }


async def _claim_rows(conn: AsyncConn, query: LiteralString, params: dict[str, Any]) -> list[Job]:
    """A claim statement's rows, planned as a claim must be: on a prepared connection the
    session is held for it (``hold_for_claims``); on an unprepared one, perhaps behind a
    transaction pooler whose server connections are shared, the planner setting lasts this
    transaction only (three round trips more than the claim itself)."""
    cur = conn.cursor(row_factory=_JOB_ROWS)
    if conn.prepare_threshold is not None:
        return await (await cur.execute(query, params)).fetchall()
    async with conn.transaction():
        await conn.execute(_Q["claim_without_sort"])
        return await (await cur.execute(query, params)).fetchall()


def limit_lock_key(queue: str) -> int:
    """The advisory-lock key the limited claims of ``queue`` take (``locks.lock_key``'s
    namespace: a name no user lock should take)."""
    return lock_key(f"pgenough.limit:{queue}")


@dual
def fail_job(
    job: Job, error: str, delay: float, *, give_up: bool, traceback: str | None = None
) -> Steps[str | None]:
    """Record a failed attempt of ``job``: ready again after ``delay`` seconds, or dead when
    its attempts are spent or ``give_up``; ``error`` (and ``traceback``, when given) in a new
    entry of ``errors``, older entries past ``TRACEBACKS_KEPT`` tracebacks losing theirs.
    Returns the job's new state, None when the job was no longer this claim. (A worker's
    executor, test mode on the caller's connection and ``fail`` record failures with it.)"""
    params = {
        **claim_of(job),
        "error": error,
        "traceback": traceback,
        "delay": delay,
        "give_up": give_up,
        "errors_kept": ERRORS_KEPT,
        "tracebacks_kept": TRACEBACKS_KEPT,
    }
    result = yield Query(_Q["fail"], params, prepare=PLAN_EACH_TIME)
    return None if not result.rows else str(result.rows[0][0])


async def record_failure(
    conn: AsyncConn,
    job: Job,
    error: str,
    delay: float,
    *,
    give_up: bool,
    traceback: str | None = None,
) -> str | None:
    """``fail_job`` on a worker's connection."""
    return await fail_job(conn, job, error, delay, give_up=give_up, traceback=traceback)


async def defer_unhandled(
    conn: AsyncConn, job: Job, error: str, *, delay: float, grace: float
) -> str | None:
    """Hand back a claimed ``job`` whose kind this worker has no handler for: ready after
    ``delay`` seconds without its attempt counted, or dead once it was enqueued ``grace``
    seconds ago. Its new state; None when it was no longer this claim."""
    params = {
        **claim_of(job),
        "error": error,
        "delay": delay,
        "grace": grace,
        "errors_kept": ERRORS_KEPT,
    }
    cur = await conn.execute(_Q["defer_unhandled"], params, prepare=PLAN_EACH_TIME)
    row = await cur.fetchone()
    return None if row is None else str(row[0])


def claim_in_process(
    *,
    kinds: Sequence[str],
    queues: Sequence[str] | None,
    ids: Sequence[int] | None,
    scheduled: bool,
    seen: Sequence[int],
    worker: str,
    lease: float,
) -> Steps[Job | None]:
    """Test mode's claim of one job on the caller's connection (``testing.run_jobs``)."""
    params = {
        "kinds": list(kinds),
        "queues": None if queues is None else list(queues),
        "ids": None if ids is None else int_array(ids),
        "scheduled": scheduled,
        "seen": int_array(seen),
        "worker": worker,
        "lease": lease,
    }
    result = yield Query(_Q["claim_in_process"], params, record=Job, prepare=PLAN_EACH_TIME)
    return result.rows[0] if result.rows else None


async def extend_leases(
    conn: AsyncConn, ids: Sequence[int], *, worker: str, lease: float
) -> set[int]:
    """Extend the leases of ``worker``'s jobs ``ids`` to ``lease`` seconds from now; return
    the ids extended (a job being completed or lost is skipped)."""
    cur = await conn.execute(
        _Q["heartbeat"],
        {"ids": int_array(ids), "lease": lease, "worker": worker},
        prepare=PLAN_EACH_TIME,
    )
    return {row[0] for row in await cur.fetchall()}


async def release_claims(conn: AsyncConn, jobs: Sequence[Job], *, worker: str, error: str) -> int:
    """Make ``worker``'s claims of ``jobs`` runnable again at once, their attempt counted and
    ``error`` recorded; return how many were still its claims."""
    cur = await conn.execute(
        _Q["release"],
        {"ids": int_array(j.id for j in jobs), "worker": worker, "error": error},
        prepare=PLAN_EACH_TIME,
    )
    return cur.rowcount


# -- the maintenance duties' statements (maintenance.py runs them under its timeouts) ------------


@dataclass(frozen=True)
class Requeued:
    """A claim taken back by ``requeue_stuck_batch``."""

    id: int
    queue: str
    state: str
    """Its new state: ready (to retry) or dead (attempts spent)."""


def requeue_stuck_batch(limit: int) -> Query:
    """Take back up to ``limit`` expired claims; a ``Requeued`` row each."""
    return Query(
        _Q["requeue_stuck"],
        {"limit": limit, "errors_kept": ERRORS_KEPT},
        record=Requeued,
        prepare=PLAN_EACH_TIME,
    )


def delete_finished_batch(retention: float, limit: int) -> Query:
    """Delete up to ``limit`` dead and cancelled jobs finished ``retention`` seconds ago."""
    return Query(
        _Q["delete_finished"], {"retention": retention, "limit": limit}, prepare=PLAN_EACH_TIME
    )


def dead_rows() -> Steps[int]:
    """The jobs table's dead rows, as the statistics collector last counted them."""
    rows = (yield Query(_Q["jobs_dead_rows"])).rows
    return int(rows[0][0]) if rows else 0


def vacuum() -> Steps[None]:
    """VACUUM the jobs table (in autocommit mode); one already running is not waited for."""
    yield Query(_Q["vacuum_jobs"])


_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def load_json(data: Buffer) -> Any:
    """Decode a ``jsonb`` value as ``json.loads`` would, faster (docs/benchmarks/history.md,
    "Issue 13 §2: the worker's client cost").

    orjson gives the same values as ``json.loads`` except for integers past 64 bits (jsonb's
    numeric allows them; orjson turns them into floats): text with a run of 19 digits or
    more, which is all of those, goes to ``json.loads``, as does what orjson rejects (nesting
    deeper than its limit), so no payload decodes differently or fails where it did not."""
    if _LONG_DIGITS.search(data) is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(bytes(data))


class PayloadLoader(JsonbLoader):
    """psycopg's text ``jsonb`` loader with ``load_json``: register it on the cursor that
    claims jobs (decoding payloads is a good part of a worker's client CPU per job)."""

    def load(self, data: Buffer) -> Any:
        return load_json(data)


def int_array(ids: Iterable[int]) -> str:
    """``ids`` as a PostgreSQL array literal, for a ``%(...)s::bigint[]`` (or ``integer[]``)
    parameter. psycopg sends a ``str`` untyped, so the statement's cast applies; dumping a
    list instead walks it in Python, at a cost that shows per claim (two per claim, a
    hundred ids each at batch 100; docs/benchmarks/history.md, "Issue 13 §2: the worker's
    client cost")."""
    return "{" + ",".join(map(str, ids)) + "}"


def claim_of(job: Job) -> dict[str, Any]:
    """The parameters that name this claim of ``job``: its id, its attempt and its enqueue
    time (``Job.created_at`` says why), for the statements that finish or hand back a claim."""
    return {"id": job.id, "attempts": job.attempts, "created_at": job.created_at}


def claims_of(jobs: Sequence[Job], prefix: str = "") -> dict[str, str]:
    """``claim_of`` for many jobs at once: three arrays (``ids``, ``attempts``, ``created``,
    each name after ``prefix``) for the statements that unnest them."""
    return {
        f"{prefix}ids": int_array(j.id for j in jobs),
        f"{prefix}attempts": int_array(j.attempts for j in jobs),
        f"{prefix}created": timestamp_array(j.created_at for j in jobs),
    }


def timestamp_array(values: Iterable[datetime]) -> str:
    """``values`` (aware) as a PostgreSQL array literal, for a ``%(...)s::timestamptz[]``
    parameter, as ``int_array`` does for ids."""
    return "{" + ",".join(f'"{value.isoformat()}"' for value in values) + "}"


__all__ = [
    "EnqueueOptions",
    "Job",
    "NewJob",
    "complete",
    "enqueue",
    "enqueue_many",
    "fail",
]
