"""The one Python spelling of job states, against the SQL enum and its derived spellings."""

from __future__ import annotations

import dataclasses

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core.admin import JOB_STATES, JobState, QueueStats, parse_job_state
from pgenough.core.job_states import QUEUE_DEPTHS, SCHEDULED, depth_state
from pgenough.core.metrics import QUEUE_STATES


@pytest.mark.db
async def test_job_state_is_the_sql_enum(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        cur = await conn.execute("SELECT enum_range(NULL::pgenough.job_state)::text[]")
        row = await cur.fetchone()
    assert row is not None
    assert row[0] == [s.value for s in JobState]


def test_derived_spellings() -> None:
    assert tuple(JobState) == JOB_STATES
    assert JOB_STATES == ("ready", "running", "dead", "cancelled")
    counts = [f.name for f in dataclasses.fields(QueueStats)]
    assert counts == [
        "queue",
        *QUEUE_DEPTHS,
        "oldest_ready_age",
        "paused",
        "max_running",
        "rate_count",
        "rate_interval",
    ]
    assert {depth_state(d) for d in QUEUE_DEPTHS} == set(JobState)
    assert depth_state(SCHEDULED) is JobState.READY
    assert set(QUEUE_STATES) == set(QUEUE_DEPTHS) - {JobState.CANCELLED}


def test_by_state_counts_the_scheduled_as_ready() -> None:
    stats = QueueStats(
        "q", ready=1, scheduled=2, running=3, dead=4, cancelled=5, oldest_ready_age=0
    )
    assert stats.by_state() == {"ready": 3, "running": 3, "dead": 4, "cancelled": 5}


def test_parse_job_state() -> None:
    assert parse_job_state("dead") is JobState.DEAD
    with pytest.raises(ValueError, match="state must be one of ready, running, dead, cancelled"):
        parse_job_state("done")


async def test_a_job_record_carries_a_job_state(db: AsyncConnectionPool) -> None:
    """``JobRecord.state`` is the enum, not the row's text, and still reads as its value."""
    import json

    from pgenough.core import enqueue, get_job
    from pgenough.core.admin import list_jobs

    async with db.connection() as conn:
        job_id = await enqueue(conn, "states.probe", {})
        record = await get_job(conn, job_id)
        [listed] = await list_jobs(conn)
    assert record is not None
    assert record.state is JobState.READY
    assert listed.state is JobState.READY
    assert record.state == "ready"
    assert json.dumps({"state": record.state}) == '{"state": "ready"}'
