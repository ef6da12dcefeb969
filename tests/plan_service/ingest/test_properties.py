"""Property tests through the whole worker: generated snapshots land as the canonical rows
DESIGN §4 says; corrupted bytes fail the run cleanly, never the worker."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from psycopg_pool import AsyncConnectionPool

from tests.plan_service.ingest.feedgen import Snapshot, render
from tests.plan_service.ingest.model import expected_rows
from tests.plan_service.ingest.pipeline import dump, ingest, queued_chunks, run_row
from tests.plan_service.ingest.static import StaticServer
from tests.plan_service.ingest.test_feed import corruptions, expected_records, snapshots

pytestmark = pytest.mark.db
PROPERTY = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(snapshot=snapshots)
async def test_valid_snapshots_land_as_the_expected_canonical_rows(
    db: AsyncConnectionPool, snapshot: Snapshot
) -> None:
    name = f"p{uuid.uuid4().hex[:10]}"  # each example its own provider
    with StaticServer({"/s": render(snapshot)}) as server:
        result = await ingest(db, server.url("/s"), name=name)
    run = await run_row(db, result.run_id)
    assert run["status"] == "PROCESSED"
    assert await dump(db, name) == expected_rows(
        name, [(run["started_at"], expected_records(snapshot))]
    )


@PROPERTY
@given(doc=corruptions())
async def test_corrupted_bytes_fail_the_run_cleanly(db: AsyncConnectionPool, doc: bytes) -> None:
    name = f"p{uuid.uuid4().hex[:10]}"
    with StaticServer({"/s": doc}) as server:
        result = await ingest(db, server.url("/s"), name=name)  # never raises
    run = await run_row(db, result.run_id)
    assert not run["has_staging"]
    if run["status"] == "FAILED":
        assert run["reason"]
        assert await dump(db, name) == []
    else:
        assert run["status"] == "PROCESSED"
    assert await queued_chunks(db) == 0
