"""``plans.runs`` against the database: its status enum is the database's, each statement
returns exactly its record's columns, and no other statement file touches the table."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool

import pgenough_plans
from pgenough_plans.ingest import runs
from pgenough_plans.ingest.runs import (
    FailedRun,
    ProcessedRun,
    ProviderSummary,
    Run,
    RunStatus,
    RunSummary,
    ThroughputPoint,
)

pytestmark = pytest.mark.db


def _fields(record: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(record))


RETURNS: dict[str, tuple[str, ...] | None] = {
    "open_run": ("id",),
    "fail_orphaned_runs": _fields(FailedRun),
    "fail_stale_runs": _fields(FailedRun),
    "heartbeat_run": ("id",),
    "record_attempt": None,
    "seal_run": ("id",),
    "fail_run": ("id",),
    "fail_staged_run": ("id",),
    "chunk_done": ("last",),
    "mark_processed": _fields(ProcessedRun),
    "get_run": _fields(Run),
    "list_runs": _fields(RunSummary),
    "failed_runs_since": _fields(RunSummary),
    "count_failed_since": ("count",),
    "providers": _fields(ProviderSummary),
    "throughput": _fields(ThroughputPoint),
    "provider_names": ("provider",),
}
"""What each statement returns: its record's fields, in order (None: no rows)."""

# Every parameter any statement takes; each statement picks its own. Ids that match no run:
# an UPDATE ... RETURNING describes its columns even when it changes nothing.
PARAMS = {
    "id": -1,
    "provider": "pinned",
    "url": "http://pinned.invalid",
    "owner": "test",
    "stale_after": 1e9,
    "bytes": 0,
    "staged": 0,
    "skipped": 0,
    "duplicates": 0,
    "phase": "pinning",
    "attempt": "{}",
    "variant": None,
    "samples": "[]",
    "chunks": 0,
    "reason": "pinned",
    "written": 0,
    "failed": 0,
    "status": None,
    "before": None,
    "limit": 1,
    "window": 0,
    "names": [],
}


async def test_run_statuses_are_the_database_enum_in_its_order(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT a.atttypid::regtype::text,"
            "       (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder)"
            "        FROM pg_enum e WHERE e.enumtypid = a.atttypid)"
            " FROM pg_attribute a"
            " WHERE a.attrelid = 'plans.runs'::regclass AND a.attname = 'status'"
        )
        row = await cur.fetchone()
    assert row is not None
    column_type, labels = row
    assert column_type == "plans.run_status"
    assert labels == [s.value for s in RunStatus]


async def test_each_statement_returns_its_records_fields(db: AsyncConnectionPool) -> None:
    assert set(runs.STATEMENTS) == set(RETURNS), "pin the new statement's columns here"
    async with db.connection() as conn:
        for name, statement in runs.STATEMENTS.items():
            async with conn.transaction(force_rollback=True):
                cur = await conn.execute(statement, PARAMS)
                got = None if cur.description is None else tuple(d.name for d in cur.description)
            assert got == RETURNS[name], name


def test_statuses_are_looked_up_in_any_case() -> None:
    assert RunStatus.lookup("failed") is RunStatus.FAILED
    assert RunStatus.lookup("DONE") is None
    assert RunStatus.choices() == "RUNNING, STAGED, PROCESSED, FAILED"


def test_only_runs_sql_has_statements_on_the_runs_table() -> None:
    """Migrations create the table; every statement on it lives in ingest/sql/runs.sql."""
    src = Path(pgenough_plans.__file__).parent
    touching = {
        str(path.relative_to(src))
        for path in src.glob("**/sql/*.sql")
        if re.search(r"\bplans\.runs\b", path.read_text("utf-8"))
    }
    assert touching == {"ingest/sql/runs.sql"}


async def test_a_run_is_failed_only_by_the_fetch_that_opened_it(db: AsyncConnectionPool) -> None:
    """After a failover with asynchronous replication the new primary may hand a lost run's
    id to another fetch's run: the lost fetch, failing its run on a fresh connection, must
    not fail that one (nor drop its staging)."""
    failure = {"reason": "cut off", "bytes": 0, "staged": 0, "skipped": 0, "samples": "[]"}
    async with db.connection() as conn:
        run_id = await runs.open_run(conn, provider="p", url="http://p", owner="fetch-new")
        assert not await runs.fail_run(conn, run_id, provider="p", owner="fetch-old", **failure)
        assert not await runs.fail_run(conn, run_id, provider="q", owner="fetch-new", **failure)
        run = await runs.get_run(conn, run_id)
        assert run is not None and run.status == RunStatus.RUNNING
        assert await runs.fail_run(conn, run_id, provider="p", owner="fetch-new", **failure)
        run = await runs.get_run(conn, run_id)
        assert run is not None and (run.status, run.reason) == (RunStatus.FAILED, "cut off")
