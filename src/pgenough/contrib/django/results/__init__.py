"""The results of Django tasks, in ``pgenough.django_task_results``.

pgenough deletes a job once it is completed, and Django's ``get_result`` must still answer
after that: so each Django task enqueued through the backend gets a row here, in the
transaction that enqueues its job, with the job's id as its own. The worker marks it RUNNING
when an attempt starts, and writes its outcome in the transaction that completes the job.
Finished rows are deleted after the backend's ``RESULT_RETENTION`` (``prune``).

This module is the table's statements on a sync psycopg connection (Django's), and nothing
of Django: ``backend.py`` maps the rows to Django's ``TaskResult``. Its ``migrations/`` are
the ``django_tasks`` track that ``manage.py migrate`` applies (``schema.MIGRATIONS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, LiteralString

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb, JsonbLoader

from pgenough.core.db import named_queries
from pgenough.core.migrations import MigrationSet

TRACK = MigrationSet("django_tasks", __name__)
"""The results table's migration track."""

_Q = named_queries(__name__, "results")

PRUNE_BATCH = 1000
"""Rows one pruning statement deletes at most; ``prune`` repeats until fewer come back."""

Outcome = Literal["SUCCESSFUL", "FAILED"]


@dataclass(frozen=True)
class ResultRow:
    """One row of ``pgenough.django_task_results``, as the statements select it."""

    id: int
    backend: str
    task_path: str
    queue: str
    priority: int
    run_after: datetime | None
    args: list[Any]
    kwargs: dict[str, Any]
    status: str
    enqueued_at: datetime
    started_at: datetime | None
    last_attempted_at: datetime | None
    finished_at: datetime | None
    return_value: Any
    errors: list[dict[str, str]]
    worker_ids: list[str]


def _rows(conn: psycopg.Connection[Any], name: LiteralString, params: dict[str, Any]) -> list[Any]:
    # Django's connection loads jsonb as text; this cursor's adapters are its own copy.
    with conn.cursor(row_factory=class_row(ResultRow)) as cur:
        cur.adapters.register_loader("jsonb", JsonbLoader)
        cur.execute(_Q[name], params)
        return cur.fetchall() if cur.description else []


def insert(
    conn: psycopg.Connection[Any],
    *,
    job_id: int,
    backend: str,
    task_path: str,
    queue: str,
    priority: int,
    run_after: datetime | None,
    args: list[Any],
    kwargs: dict[str, Any],
) -> ResultRow:
    """The READY result of job ``job_id``, in the transaction open on ``conn``."""
    rows = _rows(
        conn,
        "insert_result",
        {
            "id": job_id,
            "backend": backend,
            "task_path": task_path,
            "queue": queue,
            "priority": priority,
            "run_after": run_after,
            "args": Jsonb(args),
            "kwargs": Jsonb(kwargs),
        },
    )
    row: ResultRow = rows[0]
    return row


def get(conn: psycopg.Connection[Any], result_id: int) -> ResultRow | None:
    rows = _rows(conn, "get_result", {"id": result_id})
    return rows[0] if rows else None


def start_attempt(conn: psycopg.Connection[Any], result_id: int, worker: str) -> ResultRow | None:
    """Mark the result RUNNING for a new attempt by ``worker`` (the job's claimant when it
    is known); None when there is no such result still to run."""
    rows = _rows(conn, "start_attempt", {"id": result_id, "worker": worker})
    return rows[0] if rows else None


def finish(
    conn: psycopg.Connection[Any],
    result_id: int,
    status: Outcome,
    *,
    return_value: Any = None,
    error: dict[str, str] | None = None,
) -> bool:
    """Record the attempt's outcome; False when the result is not RUNNING (any more)."""
    with conn.cursor() as cur:
        cur.execute(
            _Q["finish_result"],
            {
                "id": result_id,
                "status": status,
                "return_value": Jsonb(return_value) if status == "SUCCESSFUL" else None,
                "errors": Jsonb([error] if error else []),
            },
        )
        return cur.rowcount == 1


def requeue(conn: psycopg.Connection[Any], result_id: int, error: dict[str, str]) -> None:
    """READY again after a failed attempt that will be retried, ``error`` recorded."""
    with conn.cursor() as cur:
        cur.execute(_Q["requeue_result"], {"id": result_id, "errors": Jsonb([error])})


def prune(conn: psycopg.Connection[Any], backend: str, retention: float) -> int:
    """Delete ``backend``'s results finished more than ``retention`` seconds ago, a batch
    per statement (each committed alone when ``conn`` is in autocommit); how many went."""
    deleted = 0
    while True:
        with conn.cursor() as cur:
            cur.execute(
                _Q["prune_results"],
                {"backend": backend, "retention": retention, "limit": PRUNE_BATCH},
            )
            deleted += cur.rowcount
        if cur.rowcount < PRUNE_BATCH:
            return deleted
