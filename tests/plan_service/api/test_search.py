"""The /search contract (DESIGN §5): envelopes, every 400, bounds, order, pages, time zones,
exact prices, ever-online plans only."""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api import answer
from pgenough_plans.api.cursor import Cursor
from pgenough_plans.api.models import ErrorResponse, SearchResponse
from pgenough_plans.api.search import Q, SearchQuery
from tests.plan_service.api.helpers import Plan, add_plans, events

pytestmark = pytest.mark.db

EVENT_KEYS_IN_ORDER = (
    "id",
    "title",
    "start_date",
    "start_time",
    "end_date",
    "end_time",
    "min_price",
    "max_price",
)
EVENT_KEYS = {
    "id",
    "title",
    "start_date",
    "start_time",
    "end_date",
    "end_time",
    "min_price",
    "max_price",
}


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"data", "error"}
    assert body["data"] is None
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    ErrorResponse.model_validate(body)
    message: str = body["error"]["message"]
    assert message
    return message


async def test_success_envelope_and_event_schema(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    plan = Plan("p1", "2030-01-01 20:00:00+00", "2030-01-01 23:30:05+00", title='Café "Ñ" & co')
    await add_plans(db, plan)
    response = await client.get("/search")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    SearchResponse.model_validate(body)
    assert set(body) == {"data", "error"} and body["error"] is None
    assert set(body["data"]) == {"events"}
    [event] = body["data"]["events"]
    assert set(event) == EVENT_KEYS
    assert event == {
        "id": plan.id,
        "title": 'Café "Ñ" & co',
        "start_date": "2030-01-01",
        "start_time": "20:00:00",
        "end_date": "2030-01-01",
        "end_time": "23:30:05",
        "min_price": 10.0,
        "max_price": 20.0,
    }
    assert uuid.UUID(event["id"]).version == 3
    assert response.headers["x-request-id"]


async def test_the_body_is_compact_json_with_the_specs_key_order(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    """As a strict client reads it, whatever the route (a page, or every event streamed):
    no space around a colon or a comma, each event's keys in the spec's order."""
    await add_plans(
        db,
        Plan("p1", "2030-01-01 20:00:00+00", "2030-01-01 23:30:05+00", title='a : "b" , c'),
        Plan("p2", "2030-01-02 20:00:00+00", None, min_price=None, max_price=None),
    )
    for params in ({}, {"limit": "1"}, {"limit": "5"}):
        response = await client.get("/search", params=params)
        body = response.json()
        outside_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', response.content.decode())
        assert not re.search(r"\s", outside_strings), (params, outside_strings)
        for event in body["data"]["events"]:
            assert list(event) == list(EVENT_KEYS_IN_ORDER)


async def test_no_events_is_an_empty_list(client: httpx.AsyncClient) -> None:
    response = await client.get("/search", params={"starts_at": "2030-01-01T00:00:00Z"})
    assert response.json() == {"data": {"events": []}, "error": None}


BAD_REQUESTS: list[tuple[dict[str, str], str]] = [
    ({"starts_at": "yesterday"}, "starts_at"),
    ({"starts_at": "2021-13-01T00:00:00"}, "starts_at"),
    ({"starts_at": "2021-02-30"}, "starts_at"),
    ({"starts_at": "2021-06-01T25:00:00Z"}, "starts_at"),
    ({"starts_at": "2021-06-01T10:00:00+25:00"}, "starts_at"),
    ({"ends_at": "2021-06-01T10:00:00.Z"}, "ends_at"),
    ({"ends_at": "2021-06-01T10:00:00,5Z"}, "ends_at"),
    ({"starts_at": "\u0662\u0660\u0662\u0661-06-01"}, "starts_at"),  # Arabic-Indic: \d takes them
    ({"starts_at": "2021-06-01T10:00:61Z"}, "starts_at"),
    ({"ends_at": "1623000000"}, "ends_at"),
    ({"ends_at": "0001-01-01T00:00:00+01:00"}, "ends_at"),
    ({"starts_at": "2021-06-02T00:00:00Z", "ends_at": "2021-06-01T23:59:59Z"}, "before"),
    ({"starts_at": "2021-06-01T12:00:00+02:00", "ends_at": "2021-06-01T09:59:59Z"}, "before"),
    ({"limit": "0"}, "limit"),
    ({"limit": "501"}, "limit"),
    ({"limit": "-1"}, "limit"),
    ({"limit": "x"}, "limit"),
    ({"limit": "1.5"}, "limit"),
    ({"limit": "99999999999999999999999"}, "limit"),
    ({"offset": "-1"}, "offset"),
    ({"offset": "x"}, "offset"),
    ({"offset": "100001"}, "offset"),
    ({"offset": "-0"}, "digits 0-9"),
    ({"limit": "+5"}, "digits 0-9"),
    ({"limit": "²"}, "digits 0-9"),  # a Unicode digit str.isdigit() accepts
    ({"limit": "\u0665"}, "digits 0-9"),  # ARABIC-INDIC DIGIT FIVE
    ({"limit": "00000000000000000000501"}, "between 1 and 500"),
    ({"after": "not-a-cursor"}, "after"),
    ({"after": "x" * 5000}, "after"),
    ({"limit": "5", "offset": "5", "after": "AQ"}, "after and offset"),
]


@pytest.mark.parametrize(
    ("params", "mentions"), BAD_REQUESTS, ids=[json.dumps(p) for p, _ in BAD_REQUESTS]
)
async def test_invalid_requests_are_400(
    client: httpx.AsyncClient, params: dict[str, str], mentions: str
) -> None:
    message = assert_error(await client.get("/search", params=params), 400, "INVALID_REQUEST")
    assert mentions in message


async def test_a_repeated_parameter_is_400(client: httpx.AsyncClient) -> None:
    response = await client.get("/search?limit=5&limit=6")
    assert "more than once" in assert_error(response, 400, "INVALID_REQUEST")


async def test_limits_at_the_edges_are_accepted(client: httpx.AsyncClient) -> None:
    for params in (
        {"limit": "1"},
        {"limit": "500"},
        {"limit": "0000000000005"},  # leading zeros are digits too
        {"offset": "0"},
        {"offset": "100000"},
        {"offset": "000"},
    ):
        assert (await client.get("/search", params=params)).status_code == 200, params
    # An empty value is no value: the default applies.
    assert (await client.get("/search?starts_at=&ends_at=&limit=&offset=")).status_code == 200


async def test_boundary_instants(db: AsyncConnectionPool, client: httpx.AsyncClient) -> None:
    await add_plans(
        db,
        Plan("at-start", "2030-06-01 10:00:00+00", "2030-06-01 12:00:00+00"),
        Plan("before-start", "2030-06-01 09:59:59+00", "2030-06-01 12:00:00+00"),
        Plan("at-end", "2030-06-01 13:00:00+00", "2030-06-01 18:00:00+00"),
        Plan("after-end", "2030-06-01 13:00:00+00", "2030-06-01 18:00:01+00"),
    )
    params = {"starts_at": "2030-06-01T10:00:00Z", "ends_at": "2030-06-01T18:00:00Z"}
    found = events(await client.get("/search", params=params))
    assert [e["id"] for e in found] == [Plan("at-start", "", "").id, Plan("at-end", "", "").id]


async def test_an_event_without_an_end_matches_only_without_ends_at(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    """The Fever spec makes the end and the prices nullable: served as null, and an open-ended
    event is in every search that gives no ends_at, in none that does."""
    open_ended = Plan("open", "2030-06-01 10:00:00+00", None, min_price=None, max_price=None)
    ended = Plan("ended", "2030-06-01 11:00:00+00", "2030-06-01 12:00:00+00")
    await add_plans(db, open_ended, ended)

    body = (await client.get("/search")).json()
    SearchResponse.model_validate(body)  # nulls are what the OpenAPI document says
    first, second = body["data"]["events"]
    assert first == {
        "id": open_ended.id,
        "title": "A plan",
        "start_date": "2030-06-01",
        "start_time": "10:00:00",
        "end_date": None,
        "end_time": None,
        "min_price": None,
        "max_price": None,
    }
    assert (second["id"], second["end_time"], second["min_price"]) == (ended.id, "12:00:00", 10)
    for params, expected in [
        ({"starts_at": "2030-06-01T10:00:00Z"}, [open_ended.id, ended.id]),
        ({"starts_at": "2030-06-01T10:00:01Z"}, [ended.id]),
        ({"ends_at": "2030-06-01T12:00:00Z"}, [ended.id]),
        ({"ends_at": "9999-12-31T23:59:59Z"}, [ended.id]),
        ({"starts_at": "2030-01-01", "ends_at": "2031-01-01"}, [ended.id]),
        ({"starts_at": "", "ends_at": ""}, [open_ended.id, ended.id]),  # empty is absent
    ]:
        found = events(await client.get("/search", params=params))
        assert [e["id"] for e in found] == expected, params


async def test_the_search_is_an_index_range_scan_bounded_by_both_ends(
    db: AsyncConnectionPool,
) -> None:
    """Plans without an end cannot match an ends_at, so ends_at still bounds the start and
    the scan of plans_search_idx stops there instead of reading to the end of the index;
    it starts at starts_at (or the cursor), not at the index's first entry."""
    query = SearchQuery(
        starts_at=datetime(2030, 1, 1, tzinfo=UTC), ends_at=datetime(2030, 2, 1, tzinfo=UTC)
    )
    async with db.connection() as conn, conn.transaction():
        # An empty table: make the planner show the plan it would use on a big one.
        await conn.execute("SET LOCAL enable_seqscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        cur = await conn.execute(b"EXPLAIN " + Q["page"].encode(), query.sql_params(None, 0))
        plan = "\n".join(str(row[0]) for row in await cur.fetchall())
        after = Cursor(datetime(2030, 1, 15, tzinfo=UTC), uuid.uuid4())
        cur = await conn.execute(b"EXPLAIN " + Q["page"].encode(), query.sql_params(after, 0))
        later = "\n".join(str(row[0]) for row in await cur.fetchall())
    (later_cond,) = re.findall(r"Index Cond: (.*)", later)
    assert f"ROW('2030-01-15 00:00:00+00'::timestamp with time zone, '{after.id}'" in later_cond
    assert re.search(r"Index (Only )?Scan using plans_search_idx", plan), plan
    (cond,) = re.findall(r"Index Cond: (.*)", plan)
    # One lower bound, the row comparison from starts_at, and ends_at as the upper one: with a
    # second lower bound beside the row one, the btree scan started at the index's first
    # entry (14x slower at 1M plans).
    assert "ROW(starts_at, id) > ROW('2030-01-01" in cond and "starts_at <=" in cond, plan
    assert "starts_at >=" not in cond, plan


async def test_a_page_is_read_from_the_index_alone(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    """plans_search_idx carries every column a page returns or filters on (migration 0007):
    once vacuumed, a page with an offset reads no heap page, and answers the same events."""
    plans = [
        Plan(
            f"c{n}",
            f"2030-01-{1 + n % 28:02d} 10:00:00+00",
            f"2030-02-{1 + n % 28:02d} 10:00:00+00",
        )
        for n in range(300)
    ]
    await add_plans(db, *plans)
    params = {"starts_at": "2030-01-03", "ends_at": "2030-02-20", "limit": "20", "offset": "30"}
    before = events(await client.get("/search", params=params))
    query = SearchQuery(
        starts_at=datetime(2030, 1, 3, tzinfo=UTC),
        ends_at=datetime(2030, 2, 20, tzinfo=UTC),
        limit=20,
        offset=30,
    )
    async with db.connection() as conn:
        await conn.execute("VACUUM (ANALYZE) plans.plans")
        async with conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = off")
            await conn.execute("SET LOCAL enable_bitmapscan = off")
            cur = await conn.execute(
                b"EXPLAIN (ANALYZE, COSTS OFF) " + Q["page"].encode(), query.sql_params(None, 30)
            )
            plan = "\n".join(str(row[0]) for row in await cur.fetchall())
    assert "Index Only Scan using plans_search_idx" in plan, plan
    assert re.search(r"Heap Fetches: 0\b", plan), plan
    assert len(before) == 20
    assert events(await client.get("/search", params=params)) == before


async def test_order_is_start_then_id(db: AsyncConnectionPool, client: httpx.AsyncClient) -> None:
    plans = [
        Plan(f"p{n}", f"2030-01-0{1 + n % 3} 10:00:00+00", "2030-02-01 00:00:00+00")
        for n in range(12)
    ]
    await add_plans(db, *plans)
    found = events(await client.get("/search"))
    expected = sorted(plans, key=lambda p: (p.starts_at, uuid.UUID(p.id)))
    assert [e["id"] for e in found] == [p.id for p in expected]
    assert len({e["start_date"] for e in found}) == 3


async def test_pages_neither_skip_nor_repeat(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    # Equal start times across page boundaries: only the id breaks the ties.
    plans = [
        Plan(f"p{n:02d}", f"2030-03-{1 + n // 4:02d} 08:00:00+00", "2030-04-01 00:00:00+00")
        for n in range(23)
    ]
    await add_plans(db, *plans)
    everything = [e["id"] for e in events(await client.get("/search", params={"limit": "500"}))]
    assert len(everything) == 23
    paged: list[str] = []
    for offset in range(0, 30, 5):
        page = events(await client.get("/search", params={"limit": "5", "offset": str(offset)}))
        assert len(page) == max(0, min(5, 23 - offset))
        paged += [e["id"] for e in page]
    assert paged == everything


async def test_without_limit_every_event_and_with_limit_a_page(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    """The Fever spec has no paging: a client that sends no limit gets every event (60 here;
    it got 50 and no hint before)."""
    await add_plans(
        db,
        *[Plan(f"p{n:03d}", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00") for n in range(60)],
    )
    everything = await client.get("/search")
    assert len(events(everything)) == 60 and "link" not in everything.headers
    page = await client.get("/search", params={"limit": "50"})
    assert len(events(page)) == 50 and 'rel="next"' in page.headers["link"]
    last = await client.get("/search", params={"limit": "500"})
    assert len(events(last)) == 60 and "link" not in last.headers


async def test_inputs_without_offset_are_utc_and_offsets_are_converted(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    await add_plans(
        db,
        Plan("early", "2030-06-01 09:59:59+00", "2030-06-01 11:00:00+00"),
        Plan("on-time", "2030-06-01 10:00:00+00", "2030-06-01 11:00:00+00"),
    )
    on_time = [Plan("on-time", "", "").id]
    for starts_at in (
        "2030-06-01T10:00:00",
        "2030-06-01T10:00",
        "2030-06-01 10:00:00",
        "2030-06-01T10:00:00Z",
        "2030-06-01T10:00:00.000000z",
        "2030-06-01T10:00:00.000000000Z",  # RFC 3339: any number of fractional digits
        "2030-06-01T10:00:00.0000009Z",  # truncated to the microsecond, not rounded up
        "2030-06-01T09:59:60Z",  # a leap second is the next second, as in PostgreSQL
        "2030-06-01T12:00:00+02:00",
        "2030-06-01T12:00:00+0200",
        "2030-06-01T05:30:00-04:30",
    ):
        found = events(await client.get("/search", params={"starts_at": starts_at}))
        assert [e["id"] for e in found] == on_time, starts_at
    # An unencoded "+" arrives as a space: read back as the offset it was.
    found = events(await client.get("/search?starts_at=2030-06-01T12:00:00+02:00"))
    assert [e["id"] for e in found] == on_time
    # Outputs are UTC whatever the input's offset.
    assert found[0]["start_time"] == "10:00:00"


RFC_3339_EXAMPLES = [  # RFC 3339 section 5.8, every one
    ("1985-04-12T23:20:50.52Z", "1985-04-12T23:20:50.520000+00:00"),
    ("1996-12-19T16:39:57-08:00", "1996-12-20T00:39:57+00:00"),
    ("1990-12-31T23:59:60Z", "1991-01-01T00:00:00+00:00"),
    ("1990-12-31T15:59:60-08:00", "1991-01-01T00:00:00+00:00"),
    ("1937-01-01T12:00:27.87+00:20", "1937-01-01T11:40:27.870000+00:00"),
]


@pytest.mark.parametrize(("text", "utc"), RFC_3339_EXAMPLES)
async def test_rfc_3339_examples_are_read_as_the_rfc_means_them(
    client: httpx.AsyncClient, text: str, utc: str
) -> None:
    from pgenough_plans.api.search import INSTANT_PATTERN, parse_instant

    assert parse_instant("starts_at", text).isoformat() == utc
    assert re.fullmatch(INSTANT_PATTERN.strip("^$"), text)  # the documented syntax has it
    assert (await client.get("/search", params={"starts_at": text})).status_code == 200


async def test_a_plain_date_is_midnight_utc(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    await add_plans(
        db,
        Plan("night-before", "2030-06-01 23:00:00+00", "2030-06-01 23:59:59+00"),
        Plan("day", "2030-06-02 00:00:00+00", "2030-06-02 20:00:00+00"),
    )
    found = events(await client.get("/search", params={"starts_at": "2030-06-02"}))
    assert [e["id"] for e in found] == [Plan("day", "", "").id]
    found = events(await client.get("/search", params={"ends_at": "2030-06-02"}))
    assert [e["id"] for e in found] == [Plan("night-before", "", "").id]


async def test_prices_are_exact_json_numbers(
    db: AsyncConnectionPool, client: httpx.AsyncClient
) -> None:
    prices = [
        ("20.00", "65.5"),
        ("19.99", "19.99"),
        ("0.1", "0.30"),
        ("0", "12345678901234567890.123456789"),
    ]
    await add_plans(
        db,
        *[
            Plan(
                f"p{n}",
                f"2030-01-0{n + 1} 00:00:00+00",
                "2030-02-01 00:00:00+00",
                min_price=lo,
                max_price=hi,
            )
            for n, (lo, hi) in enumerate(prices)
        ],
    )
    text = (await client.get("/search")).text
    body = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    got = [(e["min_price"], e["max_price"]) for e in body["data"]["events"]]
    assert got == [(Decimal(lo), Decimal(hi)) for lo, hi in prices]
    # The decimal text as PostgreSQL keeps it (20.00, not 20.0 or 19.999999), unquoted.
    for n, (lo, hi) in enumerate(prices):
        event = re.findall(r"\{[^{}]*\}", text)[n]
        assert re.search(rf'"min_price"\s*:\s*{re.escape(lo)}\s*[,}}]', event), (lo, event)
        assert re.search(rf'"max_price"\s*:\s*{re.escape(hi)}\s*[,}}]', event), (hi, event)


async def test_only_ever_online_plans(db: AsyncConnectionPool, client: httpx.AsyncClient) -> None:
    await add_plans(
        db,
        Plan("online", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"),
        Plan("never-online", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00", ever_online=False),
    )
    found = events(await client.get("/search"))
    assert [e["id"] for e in found] == [Plan("online", "", "").id]


async def test_not_found_and_method_not_allowed_use_the_envelope(
    client: httpx.AsyncClient,
) -> None:
    assert_error(await client.get("/nope"), 404, "NOT_FOUND")
    assert_error(await client.post("/search"), 405, "METHOD_NOT_ALLOWED")
    assert_error(await client.get("/health/live/"), 404, "NOT_FOUND")  # no redirect


async def test_an_unexpected_error_is_500_without_internals(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError("secret: password=hunter2 at /srv/app.py")

    monkeypatch.setattr(answer, "search", broken)
    with caplog.at_level(logging.ERROR, logger="pgenough_plans.api.errors"):
        response = await client.get("/search", headers={"x-request-id": "req-42"})
    message = assert_error(response, 500, "INTERNAL_ERROR")
    assert "hunter2" not in response.text and "RuntimeError" not in response.text
    assert message == "internal error (request id req-42)"
    assert response.headers["x-request-id"] == "req-42"
    [record] = [r for r in caplog.records if "req-42" in r.getMessage()]
    assert record.exc_info is not None and "hunter2" in str(record.exc_info[1])


async def test_openapi_documents_the_contract(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    search = spec["paths"]["/search"]["get"]
    params = {p["name"]: p for p in search["parameters"]}
    assert set(params) == {"starts_at", "ends_at", "limit", "offset", "after"}
    assert params["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 500}
    assert "every matching event" in params["limit"]["description"]
    assert "link" in {h.lower() for h in search["responses"]["200"]["headers"]}
    assert params["offset"]["schema"]["maximum"] == 100_000
    assert set(search["responses"]) == {"200", "400", "500", "503"}
    event = spec["components"]["schemas"]["Event"]
    assert set(event["required"]) == EVENT_KEYS
    assert set(event["required"]) == EVENT_KEYS  # always there, null where the spec allows
    props = event["properties"]
    for name, kind in [
        ("min_price", "number"),
        ("max_price", "number"),
        ("end_date", "string"),
        ("end_time", "string"),
    ]:
        assert [t["type"] for t in props[name]["anyOf"]] == [kind, "null"], name
    assert props["start_date"]["type"] == "string" and "anyOf" not in props["start_date"]
    docs = await client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
