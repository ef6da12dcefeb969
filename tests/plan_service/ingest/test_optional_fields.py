"""Plans the Fever spec and the reference accept are kept (issue 9, section 4), end to end:
served over real HTTP, fetched and processed by the real workers into real PostgreSQL, and
searched through the real API with nulls where the spec allows them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api.models import SearchResponse
from pgenough_plans.ingest.store import plan_uuid
from tests.plan_service.api.helpers import ServerThread, api_app, api_settings
from tests.plan_service.ingest.feedgen import render
from tests.plan_service.ingest.model import expected_rows
from tests.plan_service.ingest.pipeline import assert_finished, dump, ingest
from tests.plan_service.ingest.records import parse_bytes
from tests.plan_service.ingest.static import StaticServer
from tests.plan_service.ingest.test_feed import base, plan, zone

pytestmark = pytest.mark.db
PROVIDER = "fever"

SNAPSHOT = [
    base(
        "10",
        [
            plan("no-end", plan_end_date=None),
            plan("empty-end", plan_end_date=""),
            plan("no-zones", zones=[]),
            plan("no-sold-out", sold_out=None),
            plan("no-capacity", zones=[zone("5.00", capacity=None), zone("7.50")]),
            plan("unpriced-zone", zones=[zone("9.00"), {"zone_id": "2", "capacity": "1"}]),
            plan("bad-start", plan_start_date="2021-09-31T20:00:00"),  # still skipped
        ],
        sell_mode="ONLINE",
    ),
    base("20", [plan("normal")], sell_mode="online"),
]


def event_id(plan_id: str, base_plan_id: str = "10") -> str:
    return str(plan_uuid(PROVIDER, base_plan_id, plan_id))


async def test_plans_the_spec_allows_are_stored_and_served_with_nulls(
    db: AsyncConnectionPool, database_url: str
) -> None:
    doc = render(SNAPSHOT)
    with StaticServer({"/planList": doc}) as server:
        result = await ingest(db, server.url("/planList"), name=PROVIDER)
    run = await assert_finished(db, result.run_id, "PROCESSED")
    assert (run["plans_staged"], run["plans_skipped"], run["plans_duplicate"]) == (7, 1, 0)
    assert [s["reason"] for s in run["skip_samples"]] == [
        "invalid plan_start_date '2021-09-31T20:00:00'"
    ]

    # Stored as the model says, NULLs included.
    records, _ = parse_bytes(doc)
    rows = await dump(db)
    assert rows == expected_rows(PROVIDER, [(run["started_at"], records)])
    by_plan = {r[2]: r for r in rows}
    # columns: ... 8 ends_at, 11 sold_out, 12 min_price, 13 max_price, 14 ever_online
    assert by_plan["no-end"][8] is None and by_plan["empty-end"][8] is None
    assert by_plan["no-zones"][12:14] == (None, None)
    assert by_plan["no-sold-out"][11] is None
    assert [str(p) for p in by_plan["no-capacity"][12:14]] == ["5.00", "7.50"]
    assert [str(p) for p in by_plan["unpriced-zone"][12:14]] == ["9.00", "9.00"]
    assert all(r[5] == "online" and r[14] for r in rows)  # ONLINE counts as online

    app = api_app(api_settings(database_url))
    with ServerThread(app) as api:
        async with httpx.AsyncClient(base_url=api.url, timeout=30) as client:

            async def search(**params: str) -> list[dict[str, Any]]:
                response = await client.get("/search", params=params)
                assert response.status_code == 200, response.text
                body = response.json()
                SearchResponse.model_validate(body)
                found: list[dict[str, Any]] = body["data"]["events"]
                return found

            everything = {e["id"]: e for e in await search()}
            assert len(everything) == 7
            no_end = everything[event_id("no-end")]
            assert (no_end["end_date"], no_end["end_time"], no_end["min_price"]) == (
                None,
                None,
                20.0,
            )
            no_zones = everything[event_id("no-zones")]
            assert (no_zones["min_price"], no_zones["max_price"]) == (None, None)
            assert no_zones["end_time"] == "22:00:00"

            # An event without an end matches only when ends_at is absent.
            open_ended = {event_id("no-end"), event_id("empty-end")}
            assert open_ended <= {e["id"] for e in await search(starts_at="2021-06-30T21:00:00")}
            bounded = {e["id"] for e in await search(ends_at="2030-01-01T00:00:00Z")}
            assert bounded == set(everything) - open_ended
            both = await search(starts_at="2021-06-30T00:00:00Z", ends_at="2021-07-01T00:00:00Z")
            assert {e["id"] for e in both} == set(everything) - open_ended


async def test_a_plan_loses_its_end_and_prices_when_a_newer_snapshot_drops_them(
    db: AsyncConnectionPool,
) -> None:
    """NULL is content like any other: the newer snapshot's nulls replace older values, and
    the same snapshot again writes nothing."""
    older = [base("1", [plan("1"), plan("2")])]
    newer = [base("1", [plan("1", plan_end_date=None), plan("2", zones=[])])]
    with StaticServer({"/old": render(older), "/new": render(newer)}) as server:
        first = await ingest(db, server.url("/old"), name=PROVIDER)
        second = await ingest(db, server.url("/new"), name=PROVIDER)
        again = await ingest(db, server.url("/new"), name=PROVIDER)
    for result in (first, second):
        await assert_finished(db, result.run_id, "PROCESSED")
    third = await assert_finished(db, again.run_id, "PROCESSED")
    rows = {r[2]: r for r in await dump(db)}
    assert rows["1"][8] is None
    assert rows["1"][7] == datetime(2021, 6, 30, 21, 0, tzinfo=UTC)
    assert rows["2"][12:14] == (None, None) and rows["2"][8] is not None
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT plans_written FROM plans.runs WHERE id = %s", (again.run_id,)
        )
        assert await cur.fetchone() == (0,)  # nothing changed, nothing rewritten
    assert third["plans_staged"] == 2
