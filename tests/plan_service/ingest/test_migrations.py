"""The plans track's migrations upgrade a database that holds data: 0003 (nullable ends,
prices and sold_out; the listing's seq; runs.plans_duplicate) keeps every row as it was."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgenough.core import migrate
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.core.migrations import MigrationSet, available, schema_version
from pgenough_plans.ingest.store import MIGRATIONS

pytestmark = pytest.mark.db
BEFORE = 2  # the schema version 0003 upgrades


@pytest.fixture
def plans_at_v2(tmp_path: Path) -> Iterator[MigrationSet]:
    """The plans track as pgenough shipped it at version 2: a package holding copies of
    its migrations 0001 and 0002 (the real files), under the same track name."""
    package = tmp_path / "plans_at_v2"
    (package / "migrations").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for migration in available(MIGRATIONS)[:BEFORE]:
        name = f"{migration.version:04d}_{migration.name}.sql"
        (package / "migrations" / name).write_text(migration.sql, "utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        yield MigrationSet(MIGRATIONS.track, "plans_at_v2")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("plans_at_v2", None)


@pytest.fixture
async def conn(server_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    name = f"pgenough_mig_{uuid.uuid4().hex[:8]}"
    create_database(server_url, name)
    try:
        async with await psycopg.AsyncConnection.connect(
            with_database(server_url, name), autocommit=True
        ) as c:
            yield c
    finally:
        drop_database(server_url, name)


OLD_DATA = """
-- as the plans track stood at version 2: in the queue's schema (0008 moved it to plans)
INSERT INTO pgenough.runs (provider, url, owner, status, plans_staged, chunks_total)
VALUES ('fever', 'http://x', 'old', 'PROCESSED', 2, 1);
INSERT INTO pgenough.plans (provider, base_plan_id, plan_id, id, title, sell_mode,
    organizer_company_id, starts_at, ends_at, sell_from, sell_to, sold_out, min_price,
    max_price, ever_online)
SELECT 'fever', '291', n::text, pgenough.plan_uuid('fever', '291', n::text), 'Camela ' || n,
       'online', NULL, '2021-06-30 21:00Z', '2021-06-30 22:00Z', NULL, '2021-06-30 20:00Z',
       false, 15.00, 30.00, true
FROM generate_series(1, 2) n;
INSERT INTO pgenough.plan_seen (provider, base_plan_id, plan_id, seen_at, run_id)
SELECT 'fever', '291', n::text, '2021-06-01Z', 1 FROM generate_series(1, 2) n;
-- a run staged by the old pgenough, waiting for process workers during the upgrade
CREATE TABLE pgenough.staging_7 (seq bigint NOT NULL, base_plan_id text NOT NULL);
"""
PLANS = (
    "SELECT provider, base_plan_id, plan_id, id, title, sell_mode, organizer_company_id,"
    " starts_at, ends_at, sell_from, sell_to, sold_out, min_price::text, max_price::text,"
    " ever_online FROM plans.plans ORDER BY plan_id"
)
NULL_PLAN = """
INSERT INTO {schema}.plans (provider, base_plan_id, plan_id, id, title, sell_mode,
    starts_at, ends_at, sold_out, min_price, max_price, ever_online)
VALUES ('fever', '291', 'open', {schema}.plan_uuid('fever', '291', 'open'), 'No end',
        'online', '2021-07-01Z', NULL, NULL, %(min)s, %(max)s, true)
"""
"""A plan without an end, in the schema of the version at hand."""


async def rows(conn: psycopg.AsyncConnection[Any], query: str) -> list[tuple[Any, ...]]:
    cur = await conn.execute(query)
    return await cur.fetchall()


async def test_0003_upgrades_a_database_with_data_and_keeps_it(
    conn: psycopg.AsyncConnection[Any], plans_at_v2: MigrationSet
) -> None:
    await migrate(conn, [plans_at_v2])
    assert await schema_version(conn, MIGRATIONS.track) == BEFORE
    await conn.execute(OLD_DATA)
    with pytest.raises(psycopg.errors.NotNullViolation):  # the old schema refuses no end
        await conn.execute(NULL_PLAN.format(schema="pgenough"), {"min": None, "max": None})
    plans_before = await rows(conn, PLANS.replace("plans.plans", "pgenough.plans"))

    applied = await migrate(conn, [MIGRATIONS])
    assert [m.version for m in applied][:1] == [BEFORE + 1]
    assert await schema_version(conn, MIGRATIONS.track) == available(MIGRATIONS)[-1].version

    assert await rows(conn, PLANS) == plans_before
    assert await rows(
        conn, "SELECT plan_id, seen_at::text, seq, run_id FROM plans.plan_seen ORDER BY 1"
    ) == [("1", "2021-06-01 00:00:00+00", 0, 1), ("2", "2021-06-01 00:00:00+00", 0, 1)]
    assert await rows(conn, "SELECT plans_staged, plans_duplicate FROM plans.runs") == [(2, 0)]
    columns = await rows(
        conn,
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = 'plans' AND table_name = 'staging_7' ORDER BY ordinal_position",
    )
    assert columns == [("seq",), ("base_plan_id",), ("listed_online",)]

    # What the spec allows is accepted now; prices still come both or neither.
    await conn.execute(NULL_PLAN.format(schema="plans"), {"min": None, "max": None})
    await conn.execute("DELETE FROM plans.plans WHERE plan_id = 'open'")
    with pytest.raises(psycopg.errors.CheckViolation, match="plans_prices_together"):
        await conn.execute(NULL_PLAN.format(schema="plans"), {"min": 10, "max": None})
    with pytest.raises(psycopg.errors.CheckViolation):  # the old checks hold
        await conn.execute(NULL_PLAN.format(schema="plans"), {"min": 30, "max": 10})
    assert await migrate(conn, [MIGRATIONS]) == []
