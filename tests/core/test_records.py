"""Each statement whose rows become a record selects exactly that record's fields, in order.

The rows are read by name (``statements.record_rows``), so a mismatch would raise rather than
shift values; this pins the column lists so it never gets that far: each statement is run
(in a transaction rolled back) and its result's column names compared with the fields.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Job, JobRecord
from pgenough.core._sql import load
from pgenough.core.admin import JobFailures, QueueStats
from pgenough.core.queue import Requeued
from pgenough.core.statements import record_maker

_CLAIM = {
    "done_ids": "{}",
    "done_attempts": "{}",
    "done_created": "{}",
    "queue": "q",
    "limit": 0,
    "lease": 1.0,
    "worker": "w",
}
_LIST = {
    "state": None,
    "queue": None,
    "kind": None,
    "text": None,
    "failing": False,
    "limit": 1,
    "before": None,
}

STATEMENTS: list[tuple[str, type[Any], dict[str, Any]]] = [
    ("claim", Job, _CLAIM),
    (
        "claim_after",
        Job,
        {**_CLAIM, "priority": 0, "after_run_at": datetime.now(UTC), "after_id": 0},
    ),
    ("get_job", JobRecord, {"id": 0}),
    ("list_jobs", JobRecord, _LIST),
    ("stats", QueueStats, {}),
    ("job_failures_since", JobFailures, {"window": 60.0}),
    ("requeue_stuck", Requeued, {"limit": 1, "errors_kept": 20}),
    ("jobs_by_payload", JobRecord, {"queue": "q", "kind": "k", "key": "k", "value": "1"}),
]


@pytest.mark.db
@pytest.mark.parametrize(("name", "record", "params"), STATEMENTS, ids=[s[0] for s in STATEMENTS])
async def test_columns_are_the_record_fields(
    db: AsyncConnectionPool, name: str, record: type[Any], params: dict[str, Any]
) -> None:
    async with db.connection() as conn, conn.transaction(force_rollback=True):
        cur = await conn.execute(load("queue")[name], params)
        assert cur.description is not None
        columns = [c.name for c in cur.description]
    assert columns == [f.name for f in dataclasses.fields(record)]


def test_a_row_is_read_by_name() -> None:
    names = ["queue", "ready", "scheduled", "running", "dead", "cancelled", "oldest_ready_age"]
    make = record_maker(QueueStats, names)
    assert make(["q", 1, 2, 3, 4, 5, 0.5]) == QueueStats("q", 1, 2, 3, 4, 5, 0.5)
    reordered = record_maker(QueueStats, list(reversed(names)))
    assert reordered([0.5, 5, 4, 3, 2, 1, "q"]) == QueueStats("q", 1, 2, 3, 4, 5, 0.5)
    with pytest.raises(TypeError, match="not the fields of QueueStats"):
        record_maker(QueueStats, names[:-1])
    with pytest.raises(TypeError, match="not the fields of QueueStats"):
        record_maker(QueueStats, [*names, "extra"])
