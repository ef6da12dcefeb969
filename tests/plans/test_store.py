"""The plans tables' own rules, below the pipeline."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.plans.store import plan_uuid

pytestmark = pytest.mark.db


@pytest.mark.parametrize(
    ("provider", "base_plan_id", "plan_id"),
    [("fever", "291", "291"), ("prövïdér-ñ", "🎭", "x\x1fy"), ("a", "", "b")],
)
async def test_sql_and_python_derive_the_same_plan_id(
    db: AsyncConnectionPool, provider: str, base_plan_id: str, plan_id: str
) -> None:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT pgenough.plan_uuid(%s, %s, %s)", (provider, base_plan_id, plan_id)
        )
        row = await cur.fetchone()
    assert row is not None
    assert row[0] == plan_uuid(provider, base_plan_id, plan_id)
    assert row[0].version == 3
