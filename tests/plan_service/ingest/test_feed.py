"""The feed parser: the real fixture, both variants, chunking, round-trips of generated
snapshots, validation skips, corruption, hostile documents and truncation. Pure: no database.
"""

from __future__ import annotations

import itertools
import re
import socket
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from lxml import etree

from pgenough.core import PgenoughError
from pgenough_plans.ingest.errors import FeedError, PlanServiceError
from pgenough_plans.ingest.feed import (
    MAX_ATTRIBUTES,
    MAX_DEPTH,
    MAX_GAP_BYTES,
    MAX_ID_LENGTH,
    MAX_MARKUP_EQUALS,
    MAX_SKIP_SAMPLES,
    MAX_TITLE_LENGTH,
    FeedParser,
    PlanRecord,
    Skip,
    _parse_datetime,
)
from tests.plan_service.ingest.feedgen import Snapshot, deep_document, render, synthetic
from tests.plan_service.ingest.records import parse_bytes

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "fever" / "response_1.xml"
VARIANTS = ("planList", "eventList")


# -- helpers -------------------------------------------------------------------------------


def utc(text: str) -> datetime:
    """The expected reading of a feed date-time, computed without the parser's code path."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)


def utc_or_none(text: str | None) -> datetime | None:
    """An optional feed date-time we do not serve: missing, empty or invalid is None."""
    try:
        return utc(text) if text else None
    except ValueError:
        return None


SOLD_OUT = {"true": True, "false": False, "1": True, "0": False}


def expected_records(snapshot: Snapshot) -> list[PlanRecord]:
    """What a snapshot without bad records must parse to, computed from the dicts alone:
    whatever is optional (end, prices, sold_out, sell dates, organizer) follows the rules of
    the feed module's docstring."""
    records = []
    for base in snapshot:
        organizer = base.get("organizer_company_id")
        for plan in base["plans"]:
            prices = [Decimal(z["price"]) for z in plan["zones"] if z.get("price") is not None]
            records.append(
                PlanRecord(
                    base_plan_id=base["base_plan_id"],
                    plan_id=plan["plan_id"],
                    title=base["title"],
                    sell_mode=base["sell_mode"].lower(),
                    organizer_company_id=(
                        organizer
                        if organizer and re.fullmatch(r"[\x21-\x7e]{1,64}", organizer)
                        else None
                    ),
                    starts_at=utc(plan["plan_start_date"]),
                    ends_at=utc(plan["plan_end_date"]) if plan.get("plan_end_date") else None,
                    sell_from=utc_or_none(plan.get("sell_from")),
                    sell_to=utc_or_none(plan.get("sell_to")),
                    sold_out=SOLD_OUT.get(plan.get("sold_out", "")),
                    min_price=min(prices) if prices else None,
                    max_price=max(prices) if prices else None,
                    zones=len(plan["zones"]),
                )
            )
    return records


def feed_at(data: bytes, cuts: Sequence[int]) -> tuple[list[PlanRecord], FeedParser]:
    """Feed ``data`` split at the given offsets, then close."""
    parser = FeedParser()
    records: list[PlanRecord] = []
    bounds = [0, *cuts, len(data)]
    for start, end in itertools.pairwise(bounds):
        records += parser.feed(data[start:end])
    records += parser.close()
    return records, parser


def feed_in(data: bytes, size: int) -> tuple[list[PlanRecord], FeedParser]:
    return feed_at(data, range(size, len(data), size))


def zone(price: str = "20.00", capacity: str | None = "10", **extra: Any) -> dict[str, Any]:
    return {"zone_id": "1", "capacity": capacity, "price": price, "name": "Platea", **extra}


def plan(
    plan_id: str = "1", zones: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "plan_id": plan_id,
        "plan_start_date": "2021-06-30T21:00:00",
        "plan_end_date": "2021-06-30T22:00:00",
        "sell_from": "2020-07-01T00:00:00",
        "sell_to": "2021-06-30T20:00:00",
        "sold_out": "false",
        "zones": [zone()] if zones is None else zones,
        **extra,
    }


def base(base_plan_id: str, plans: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "base_plan_id": base_plan_id,
        "sell_mode": "online",
        "title": "Camela",
        "plans": plans,
        **extra,
    }


def to_event_list(doc: bytes) -> bytes:
    """The older variant of a planList document, by renaming (independent of feedgen)."""
    for old, new in [
        (b"planList", b"eventList"),
        (b"base_plan", b"base_event"),
        (b"<plan ", b"<event "),
        (b"</plan>", b"</event>"),
        (b" plan_id=", b" event_id="),
        (b"plan_start_date=", b"event_start_date="),
        (b"plan_end_date=", b"event_end_date="),
    ]:
        doc = doc.replace(old, new)
    return doc


# -- 1. the real fixture ---------------------------------------------------------------------


def test_fixture_parses_to_the_four_known_plans() -> None:
    records, parser = parse_bytes(FIXTURE.read_bytes())

    assert [(r.base_plan_id, r.plan_id) for r in records] == [
        ("291", "291"),
        ("322", "1642"),
        ("322", "1643"),
        ("1591", "1642"),
    ]
    assert [(r.min_price, r.max_price) for r in records] == [
        (Decimal("15.00"), Decimal("30.00")),
        (Decimal("55.00"), Decimal("55.00")),
        (Decimal("55.00"), Decimal("55.00")),
        (Decimal("65.00"), Decimal("75.00")),
    ]
    assert records[3] == PlanRecord(
        base_plan_id="1591",
        plan_id="1642",
        title="Los Morancos",
        sell_mode="online",
        organizer_company_id="1",
        starts_at=datetime(2021, 7, 31, 20, 0, tzinfo=UTC),
        ends_at=datetime(2021, 7, 31, 21, 0, tzinfo=UTC),
        sell_from=datetime(2021, 6, 26, 0, 0, tzinfo=UTC),
        sell_to=datetime(2021, 7, 31, 19, 50, tzinfo=UTC),
        sold_out=False,
        min_price=Decimal("65.00"),
        max_price=Decimal("75.00"),
        zones=2,
    )
    assert str(records[3].min_price) == "65.00"  # the provider's text, not a float
    assert records[0].organizer_company_id is None
    assert records[0].title == "Camela en concierto"
    assert [r.zones for r in records] == [3, 1, 1, 2]
    assert all(r.starts_at.utcoffset() == timedelta(0) for r in records)
    assert (parser.variant, parser.plans_seen, parser.skipped, parser.skip_samples) == (
        "planList",
        4,
        0,
        [],
    )


# -- 2. both variants ------------------------------------------------------------------------


def test_both_variants_give_the_same_records() -> None:
    plan_list = FIXTURE.read_bytes()
    event_list = to_event_list(plan_list)
    assert b"<base_event base_event_id=" in event_list and b"event_start_date=" in event_list

    records, parser = parse_bytes(plan_list)
    event_records, event_parser = parse_bytes(event_list)

    assert len(records) == 4
    assert event_records == records
    assert (parser.variant, event_parser.variant) == ("planList", "eventList")


def test_each_variant_reads_only_its_own_names() -> None:
    """An eventList with planList element names has no events in it."""
    doc = FIXTURE.read_bytes().replace(b"planList", b"eventList")
    records, parser = parse_bytes(doc)
    assert (records, parser.plans_seen) == ([], 0)


# -- 3. chunking -----------------------------------------------------------------------------

MIXED: Snapshot = [
    base("1", [plan("1", title="x"), plan("2", plan_start_date="2021-09-31T20:00:00")]),
    base(
        "2",
        [plan("3", zones=[zone("9.50"), zone("0", capacity="0"), zone("120")])],
        title='Tom & "Jerry" <3 ñ — 🎭 Zürich',
        organizer_company_id="7",
    ),
]
CHUNK_DOCS = {
    "fixture": FIXTURE.read_bytes(),
    "mixed": render(MIXED),
    "mixed-charrefs-event": render(MIXED, variant="eventList", charrefs=True, pretty=False),
}


@pytest.mark.parametrize("name", CHUNK_DOCS)
@pytest.mark.parametrize("size", [1, 7, 64 * 1024])
def test_fixed_chunk_sizes_give_identical_records(name: str, size: int) -> None:
    doc = CHUNK_DOCS[name]
    whole, whole_parser = parse_bytes(doc)
    records, parser = feed_in(doc, size)
    assert records == whole
    assert parser.skip_samples == whole_parser.skip_samples
    assert (parser.skipped, parser.plans_seen) == (whole_parser.skipped, whole_parser.plans_seen)


def test_mixed_document_is_what_the_chunk_tests_think_it_is() -> None:
    records, parser = parse_bytes(CHUNK_DOCS["mixed"])
    assert [r.plan_id for r in records] == ["1", "3"]
    assert records[1].title == 'Tom & "Jerry" <3 ñ — 🎭 Zürich'
    assert (records[1].min_price, records[1].max_price) == (Decimal("0"), Decimal("120"))
    assert parser.skip_samples == [Skip("invalid plan_start_date '2021-09-31T20:00:00'", "1", "2")]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_chunk_boundaries_give_identical_records(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(CHUNK_DOCS)))
    doc = CHUNK_DOCS[name]
    cuts = sorted(data.draw(st.sets(st.integers(1, len(doc) - 1), max_size=40)))
    whole, whole_parser = parse_bytes(doc)

    records, parser = feed_at(doc, cuts)

    assert records == whole
    assert parser.skip_samples == whole_parser.skip_samples


# -- 4. round-trips of generated snapshots ---------------------------------------------------


def _is_xml_char(char: str) -> bool:
    code = ord(char)
    return (
        code in (0x9, 0xA, 0xD)
        or 0x20 <= code <= 0xD7FF
        or 0xE000 <= code <= 0xFFFD
        or code >= 0x10000
    )


TRICKY_TITLES = [
    'Tom & "Jerry" <3 ñ',
    "Café &amp; bar &#233;",  # entity-looking text must come back as written
    "L'Été à Zürich",
    "",
    "  spaced  ",
    "tab\tand\nnewline\r",
    "🎭 ]]> <!-- --> <?pi?>",
]
texts = st.one_of(
    st.sampled_from(TRICKY_TITLES),
    st.text(st.characters(exclude_categories=["Cs"]).filter(_is_xml_char), max_size=20),
)
ids = st.from_regex(r"[0-9]{1,6}", fullmatch=True) | st.from_regex(
    r"[A-Za-z0-9_.:-]{1,10}", fullmatch=True
)
plan_ids = st.sampled_from(["1642", "1643", "7"]) | ids  # repeats across base_plans
moments = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2090, 1, 1)).map(
    lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%S")
)
prices = st.one_of(
    st.decimals(min_value=0, max_value=100_000, places=2).map(lambda d: f"{d:.2f}"),
    st.integers(0, 10**6).map(str),
)
# What we do not serve may be missing or anything at all: never a reason to skip.
unread = st.none() | st.sampled_from(["", "n/a", "-1", "1.5", "\u0663"])
zones = st.fixed_dictionaries(
    {
        "zone_id": st.sampled_from(["186", "311", "40"]),  # repeats inside a plan
        "capacity": st.sampled_from(["0", "2"]) | st.integers(0, 10_000).map(str) | unread,
        "price": prices | st.none(),  # a zone without a price is left out of the prices
        "name": texts,
        "numbered": st.sampled_from(["true", "false"]),
    }
)


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    start = draw(moments)
    end = utc(start) + timedelta(seconds=draw(st.integers(0, 30 * 86_400)))
    return {
        "plan_start_date": start,
        # a plan without an end is kept, with ends_at None
        "plan_end_date": draw(
            st.just(end.strftime("%Y-%m-%dT%H:%M:%S")) | st.sampled_from(["", None])
        ),
        "plan_id": draw(plan_ids),
        "sell_from": draw(st.none() | st.just("") | moments | st.just("yesterday")),
        "sell_to": draw(st.none() | moments | st.just("2021-13-01T00:00:00")),
        "sold_out": draw(st.sampled_from(["true", "false", "1", "0"]) | unread),
        "zones": draw(st.lists(zones, max_size=4)),  # a plan without zones has no prices
    }


base_plans = st.fixed_dictionaries(
    {
        "base_plan_id": ids,
        "sell_mode": st.sampled_from(["online", "offline", "ONLINE", "Offline"]),
        "title": texts,
        "plans": st.lists(plans(), min_size=1, max_size=3),
    },
    optional={
        "organizer_company_id": st.none()
        | st.just("")
        | st.from_regex(r"[0-9]{1,3}", fullmatch=True)
        | st.sampled_from(["a b", "x" * (MAX_ID_LENGTH + 1), "ñ"])  # not ids: None
    },
)
snapshots = st.lists(base_plans, max_size=5)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    snapshot=snapshots,
    variant=st.sampled_from(VARIANTS),
    charrefs=st.booleans(),
    pretty=st.booleans(),
)
def test_generated_snapshots_round_trip(
    snapshot: Snapshot, variant: str, charrefs: bool, pretty: bool
) -> None:
    doc = render(snapshot, variant=variant, charrefs=charrefs, pretty=pretty)

    records, parser = parse_bytes(doc)

    assert records == expected_records(snapshot)
    assert (parser.skipped, parser.plans_seen, parser.variant) == (0, len(records), variant)


@settings(max_examples=50, deadline=None)
@given(snapshot=snapshots)
def test_generated_snapshots_give_the_same_records_in_both_variants(snapshot: Snapshot) -> None:
    records, _ = parse_bytes(render(snapshot, variant="planList"))
    event_records, _ = parse_bytes(render(snapshot, variant="eventList", charrefs=True))
    assert event_records == records


def test_titles_with_entities_come_back_decoded() -> None:
    """``resolve_entities=False`` would hand ``&amp;`` over as ``&#38;``: not here."""
    doc = (
        FIXTURE.read_bytes()
        .replace(b'"Los Morancos"', b'"Tom &amp; &quot;Jerry&quot; &lt;3 &#241;&#xE9; &#38;"')
        .replace(b'"Camela en concierto"', "'Caf\u00e9 \"Zürich\"'".encode())
    )
    records, _ = parse_bytes(doc)
    assert records[3].title == 'Tom & "Jerry" <3 ñé &'
    assert records[0].title == 'Café "Zürich"'


# -- 5. validation: skip the plan, count it, go on -------------------------------------------

START = "2021-06-30T21:00:00"
MANY_ATTRIBUTES = {f"extra{n}": "x" for n in range(MAX_ATTRIBUTES)}  # plus the element's own
BIG = MAX_GAP_BYTES - 4096
"""A value as big as a start tag may carry (the gap bound, less the rest of the element)."""


def put(element: dict[str, Any], key: str, value: Any) -> None:
    """Set one attribute of a feedgen element, or several when ``value`` is a dict."""
    if isinstance(value, dict):
        element.update(value)
    else:
        element[key] = value


@pytest.mark.parametrize(
    ("where", "key", "value", "reason"),
    [
        (
            "plan",
            "plan_start_date",
            "2021-09-31T20:00:00",
            "invalid plan_start_date '2021-09-31T20:00:00'",
        ),
        (
            "plan",
            "plan_end_date",
            "2021-02-29T20:00:00",
            "invalid plan_end_date '2021-02-29T20:00:00'",
        ),
        ("plan", "plan_end_date", "tomorrow", "invalid plan_end_date 'tomorrow'"),
        ("plan", "plan_start_date", "2021-06-30", "invalid plan_start_date '2021-06-30'"),
        (
            "plan",
            "plan_start_date",
            "2021-06-30T24:00:00",
            "invalid plan_start_date '2021-06-30T24:00:00'",
        ),
        (
            "plan",
            "plan_start_date",
            "30/06/2021 21:00",
            "invalid plan_start_date '30/06/2021 21:00'",
        ),
        (
            "plan",
            "plan_start_date",
            "0001-01-01T00:00:00+01:00",
            "invalid plan_start_date '0001-01-01T00:00:00+01:00'",
        ),
        ("plan", "plan_start_date", None, "missing plan_start_date"),
        ("plan", "plan_start_date", "", "invalid plan_start_date ''"),
        (
            "plan",
            "plan_start_date",
            "2" * BIG,
            "invalid plan_start_date '" + "2" * 40 + "...'",
        ),
        ("plan", "plan_end_date", "2021-06-30T20:59:59", "plan_end_date before plan_start_date"),
        ("plan", "plan_id", None, "missing plan_id"),
        ("plan", "plan_id", "", "invalid plan_id ''"),
        ("plan", "plan_id", "16 42", "invalid plan_id '16 42'"),
        ("plan", "plan_id", "x" * 65, "invalid plan_id '" + "x" * 40 + "...'"),
        ("plan", "plan_id", "é", "invalid plan_id 'é'"),
        ("plan", "", MANY_ATTRIBUTES, f"plan with more than {MAX_ATTRIBUTES} attributes"),
        ("zone", "price", "abc", "invalid price 'abc'"),
        ("zone", "price", "-1.00", "negative price '-1.00'"),
        ("zone", "price", "NaN", "invalid price 'NaN'"),
        ("zone", "price", "Infinity", "invalid price 'Infinity'"),
        ("zone", "price", "1e3", "invalid price '1e3'"),
        ("zone", "price", " 12.00", "invalid price ' 12.00'"),
        ("zone", "price", "", "invalid price ''"),
        ("zone", "price", "1" * BIG, "invalid price '" + "1" * 40 + "...'"),
        ("zone", "", MANY_ATTRIBUTES, f"zone with more than {MAX_ATTRIBUTES} attributes"),
    ],
)
def test_an_invalid_plan_is_skipped_and_its_neighbours_kept(
    where: str, key: str, value: Any, reason: str
) -> None:
    bad = plan("2")
    target = bad if where == "plan" else zone()
    put(target, key, value)
    if where == "zone":
        bad["zones"] = [zone("1.00"), target]
    snapshot = [base("10", [plan("1"), bad, plan("3")]), base("20", [plan("4")])]

    records, parser = parse_bytes(render(snapshot))

    assert [(r.base_plan_id, r.plan_id) for r in records] == [("10", "1"), ("10", "3"), ("20", "4")]
    assert (parser.skipped, parser.plans_seen) == (1, 4)
    plan_id = value if key == "plan_id" else "2"
    if plan_id is not None and len(plan_id) > 64:
        plan_id = plan_id[:64] + "..."  # samples clip ids
    assert parser.skip_samples == [Skip(reason, "10", plan_id)]


@pytest.mark.parametrize(
    ("where", "key", "value", "expected"),
    [
        # What the service serves but the spec makes nullable: kept with None.
        ("plan", "plan_end_date", None, {"ends_at": None}),
        ("plan", "plan_end_date", "", {"ends_at": None}),
        ("plan", "zones", [], {"min_price": None, "max_price": None, "zones": 0}),
        ("plan", "zones", [{"zone_id": "1"}], {"min_price": None, "max_price": None, "zones": 1}),
        # What it does not serve: never a reason to skip.
        ("plan", "sold_out", None, {"sold_out": None}),
        ("plan", "sold_out", "maybe", {"sold_out": None}),
        ("plan", "sold_out", "1", {"sold_out": True}),
        ("plan", "sell_from", "yesterday", {"sell_from": None}),
        ("plan", "sell_to", "2021-13-01T00:00:00", {"sell_to": None}),
        ("plan", "sell_to", "9" * BIG, {"sell_to": None}),
        ("zone", "capacity", None, {}),
        ("zone", "capacity", "-1", {}),
        ("zone", "capacity", "1.5", {}),
        ("zone", "capacity", "\u0663", {}),  # an Arabic-Indic 3
        ("zone", "capacity", "n/a", {}),
        # A zone without a price is left out of the prices, not the plan.
        ("zone", "price", None, {"min_price": Decimal("1.00"), "max_price": Decimal("1.00")}),
        ("base", "sell_mode", "ONLINE", {"sell_mode": "online"}),
        ("base", "sell_mode", "Offline", {"sell_mode": "offline"}),
        ("base", "sell_mode", "oNlInE", {"sell_mode": "online"}),
        ("base", "organizer_company_id", "7", {"organizer_company_id": "7"}),
        ("base", "organizer_company_id", "a b", {"organizer_company_id": None}),
        ("base", "organizer_company_id", "x" * 65, {"organizer_company_id": None}),
        ("base", "title", "t" * MAX_TITLE_LENGTH, {"title": "t" * MAX_TITLE_LENGTH}),
        ("base", "title", "🎭" * MAX_TITLE_LENGTH, {"title": "🎭" * MAX_TITLE_LENGTH}),
        ("plan", "", dict(list(MANY_ATTRIBUTES.items())[:-7]), {}),  # exactly the maximum
    ],
)
def test_what_the_spec_allows_is_kept(
    where: str, key: str, value: Any, expected: dict[str, Any]
) -> None:
    """Each of these once skipped the plan; now they are read as documented."""
    kept = plan("2")
    bp = base("10", [plan("1"), kept, plan("3")])
    target = {"plan": kept, "base": bp, "zone": zone()}[where]
    put(target, key, value)
    if where == "zone":
        kept["zones"] = [zone("1.00"), target]
    snapshot = [bp, base("20", [plan("4")])]

    records, parser = parse_bytes(render(snapshot))

    assert (parser.skipped, parser.skip_samples, parser.plans_seen) == (0, [], 4)
    assert [(r.base_plan_id, r.plan_id) for r in records] == [
        ("10", "1"),
        ("10", "2"),
        ("10", "3"),
        ("20", "4"),
    ]
    record = records[1]
    assert record == expected_records(snapshot)[1]  # the generic rule agrees
    for name, want in expected.items():
        assert getattr(record, name) == want, name


def test_the_issue_9_plans_all_parse_to_nulls_not_skips() -> None:
    """Without an end, without zones, without sold_out, a zone without capacity, ONLINE."""
    no_end = plan("1", plan_end_date=None)
    no_zones = plan("2", zones=[])
    no_sold_out = plan("3", sold_out=None)
    no_capacity = plan("4", zones=[zone("5.00", capacity=None), zone("7.50")])
    snapshot = [base("10", [no_end, no_zones, no_sold_out, no_capacity], sell_mode="ONLINE")]

    records, parser = parse_bytes(render(snapshot))

    assert parser.skipped == 0
    assert [(r.plan_id, r.sell_mode) for r in records] == [(str(n), "online") for n in (1, 2, 3, 4)]
    first, second, third, fourth = records
    assert (first.ends_at, first.min_price) == (None, Decimal("20.00"))
    assert (second.min_price, second.max_price, second.zones) == (None, None, 0)
    assert second.ends_at == utc("2021-06-30T22:00:00")
    assert (third.sold_out, fourth.sold_out) == (None, False)
    assert (fourth.min_price, fourth.max_price) == (Decimal("5.00"), Decimal("7.50"))


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("sell_mode", "sometimes", "invalid sell_mode 'sometimes'"),
        ("sell_mode", "onlinee", "invalid sell_mode 'onlinee'"),
        ("sell_mode", "", "invalid sell_mode ''"),
        ("sell_mode", "o" * BIG, "invalid sell_mode '" + "o" * 40 + "...'"),
        ("sell_mode", None, "missing sell_mode"),
        ("title", None, "missing title"),
        (
            "title",
            "t" * (MAX_TITLE_LENGTH + 1),
            f"title longer than {MAX_TITLE_LENGTH} characters",
        ),
        ("title", "x" * BIG, "title longer than 1024 characters"),
        ("base_plan_id", None, "missing base_plan_id"),
        ("base_plan_id", " 20", "invalid base_plan_id ' 20'"),
        ("base_plan_id", "b" * (MAX_ID_LENGTH + 1), "invalid base_plan_id '" + "b" * 40 + "...'"),
        ("", MANY_ATTRIBUTES, f"base_plan with more than {MAX_ATTRIBUTES} attributes"),
    ],
)
def test_an_invalid_base_plan_skips_all_its_plans(key: str, value: Any, reason: str) -> None:
    bad = base("20", [plan("2"), plan("3")])
    put(bad, key, value)
    snapshot = [base("10", [plan("1")]), bad, base("30", [plan("4")])]

    records, parser = parse_bytes(render(snapshot))

    assert [r.plan_id for r in records] == ["1", "4"]
    assert (parser.skipped, parser.plans_seen) == (2, 4)
    base_id = value if key == "base_plan_id" else "20"
    if base_id is not None and len(base_id) > 64:
        base_id = base_id[:64] + "..."
    assert parser.skip_samples == [Skip(reason, base_id, "2"), Skip(reason, base_id, "3")]
    assert all(len(s.reason) < 80 for s in parser.skip_samples)  # clipped, whatever the value


def test_event_list_reasons_name_its_own_attributes() -> None:
    snapshot = [
        base("1", [plan("1", plan_start_date="2021-09-31T20:00:00"), plan("2")]),
        base("2", [plan("3")], **MANY_ATTRIBUTES),
    ]
    records, parser = parse_bytes(render(snapshot, variant="eventList"))
    assert [r.plan_id for r in records] == ["2"]
    assert parser.skip_samples == [
        Skip("invalid event_start_date '2021-09-31T20:00:00'", "1", "1"),
        Skip(f"base_event with more than {MAX_ATTRIBUTES} attributes", "2", "3"),
    ]


def test_lenient_values_are_read_as_documented() -> None:
    snapshot = [
        base(
            "1",
            [
                plan(
                    "1",
                    plan_start_date="2021-06-30T21:00:00+02:00",
                    plan_end_date="2021-06-30T21:00:00.250000Z",
                    sell_from="",
                    sell_to=None,
                    sold_out="1",
                    zones=[zone("0", capacity="0"), zone("7"), zone("7.5")],
                    unknown_attribute="ignored",
                ),
                plan("2", plan_end_date=START, sold_out="0"),  # ends when it starts: fine
            ],
            title="",
            organizer_company_id="",
        )
    ]
    records, parser = parse_bytes(render(snapshot))
    assert parser.skipped == 0
    first, second = records
    assert first.title == "" and first.organizer_company_id is None
    assert first.starts_at == datetime(2021, 6, 30, 19, 0, tzinfo=UTC)
    assert first.ends_at == datetime(2021, 6, 30, 21, 0, 0, 250_000, tzinfo=UTC)
    assert (first.sell_from, first.sell_to, first.sold_out) == (None, None, True)
    assert (first.min_price, first.max_price, first.zones) == (Decimal(0), Decimal("7.5"), 3)
    assert (second.starts_at == second.ends_at, second.sold_out) == (True, False)


def test_unknown_elements_are_ignored_with_their_subtrees() -> None:
    doc = (
        FIXTURE.read_bytes()
        .replace(
            b"<output>",
            b'<meta generated="now"><base_plan base_plan_id="9" sell_mode="online" title="no">'
            b'<plan plan_id="9"/></base_plan></meta><output><!-- c --><?pi x?>',
        )
        .replace(
            b'numbered="false" />', b'numbered="false"><extra><zone price="-1"/></extra></zone>'
        )
        .replace(b"</output>", b'</output><output><plan plan_id="loose"/></output>')
    )
    records, parser = parse_bytes(doc)
    assert [(r.base_plan_id, r.plan_id) for r in records] == [
        ("291", "291"),
        ("322", "1642"),
        ("322", "1643"),
        ("1591", "1642"),
    ]
    assert (parser.plans_seen, parser.skipped) == (4, 0)


def test_skips_are_all_counted_and_the_first_twenty_kept() -> None:
    bad = [plan(str(n), plan_start_date="2021-02-30T20:00:00") for n in range(25)]
    records, parser = parse_bytes(render([base("1", [*bad, plan("ok")])]))
    assert [r.plan_id for r in records] == ["ok"]
    assert (parser.skipped, parser.plans_seen) == (25, 26)
    assert len(parser.skip_samples) == MAX_SKIP_SAMPLES == 20
    assert [s.plan_id for s in parser.skip_samples] == [str(n) for n in range(20)]


def test_skip_samples_clip_hostile_ids() -> None:
    records, parser = parse_bytes(render([base("1", [plan("y" * 100_000)])]))
    assert records == []
    (sample,) = parser.skip_samples
    assert sample.plan_id == "y" * 64 + "..."
    assert len(sample.reason) < 80


def test_a_plan_listed_twice_is_handed_over_twice_in_document_order() -> None:
    """The store decides which listing wins (the last); the parser drops neither."""
    snapshot = [
        base("1", [plan("1", title="ignored"), plan("2")], title="first"),
        base("1", [plan("1", zones=[zone("9.00")])], title="second"),
    ]
    records, parser = parse_bytes(render(snapshot))
    assert [(r.plan_id, r.title, r.min_price) for r in records] == [
        ("1", "first", Decimal("20.00")),
        ("2", "first", Decimal("20.00")),
        ("1", "second", Decimal("9.00")),
    ]
    assert (parser.skipped, parser.plans_seen) == (0, 3)


DATE_CHARS = "0123456789-T:+Z. \u0663\uff11"


@st.composite
def near_dates(draw: st.DrawFn) -> str:
    """Feed-format date-times with a few characters replaced."""
    chars = list(draw(moments))
    for _ in range(draw(st.integers(0, 3))):
        chars[draw(st.integers(0, 18))] = draw(st.sampled_from(DATE_CHARS))
    return "".join(chars)


@settings(max_examples=300, deadline=None)
@given(text=near_dates() | st.text(st.sampled_from(DATE_CHARS), min_size=17, max_size=21))
@example(text="2021-06-30 21:05:09")  # fromisoformat takes any separator
@example(text="2021-06-30x21:05:09")
@example(text="20210630T210509.000")  # the basic format, also 19 characters
@example(text="2021-W26-3T21:05:09")  # an ISO week date
def test_the_date_fast_path_accepts_exactly_the_feed_format(text: str) -> None:
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}", text):
        try:
            reference: datetime | None = utc(text)
        except ValueError:
            reference = None
        assert _parse_datetime(text) == reference
    elif len(text) == 19:
        assert _parse_datetime(text) is None


# -- 6. corruption never escapes as anything but FeedError -----------------------------------

CORRUPTION_BASES = [
    render(MIXED),
    render(MIXED, variant="eventList", charrefs=True),
    FIXTURE.read_bytes(),
]
INTERESTING = [
    b"<", b">", b"&", b"&amp;", b"&#0;", b"&#xD800;", b'"', b"'", b"\x00", b"\xff", b"\xc3",
    b"<!DOCTYPE x>", b"<![CDATA[", b"]]>", b"<!--", b"<?xml ?>", b"<zone/>", b"</plan>",
    b"<plan>", b"</base_plan>", b"</output>", b"</planList>", b'price="-1"', b"\xef\xbb\xbf",
]  # fmt: skip


@st.composite
def corruptions(draw: st.DrawFn) -> bytes:
    doc = bytearray(draw(st.sampled_from(CORRUPTION_BASES)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        at = draw(st.integers(0, max(len(doc) - 1, 0)))
        if op == "flip" and doc:
            doc[at] = draw(st.integers(0, 255))
        elif op == "delete":
            del doc[at : at + draw(st.integers(1, 40))]
        elif op == "insert":
            doc[at:at] = draw(st.sampled_from(INTERESTING) | st.binary(min_size=1, max_size=8))
        else:
            del doc[at:]
    return bytes(doc)


@settings(max_examples=600, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
@given(doc=corruptions(), data=st.data())
def test_corrupted_documents_only_ever_raise_feed_error(doc: bytes, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(doc) - 1, 1)), max_size=10)))
    try:
        records, parser = feed_at(doc, [c for c in cuts if c < len(doc)])
    except FeedError as exc:
        reason = str(exc)
        assert reason
        assert "\n" not in reason
    else:
        assert len(records) + parser.skipped == parser.plans_seen


def test_a_failed_parser_stays_failed() -> None:
    parser = FeedParser()
    with pytest.raises(FeedError, match="XML syntax error at line 1, column") as first:
        parser.feed(b"<planList><output></planList>")
    with pytest.raises(FeedError) as again:
        parser.feed(b"</output></planList>")
    assert str(again.value) == str(first.value)
    with pytest.raises(FeedError):
        parser.close()


def test_a_closed_parser_cannot_be_fed() -> None:
    parser = FeedParser()
    parser.feed(FIXTURE.read_bytes())
    parser.close()
    with pytest.raises(RuntimeError, match="closed"):
        parser.feed(b"<planList/>")


def test_feed_error_is_part_of_the_error_tree() -> None:
    assert issubclass(FeedError, PlanServiceError)
    assert issubclass(PlanServiceError, PgenoughError)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (b"<foo><output/></foo>", "unexpected root element <foo>; expected planList or eventList"),
        (
            b'<planList xmlns="urn:x"><output/></planList>',
            "unexpected root element <{urn:x}planList>",
        ),
        (b"<planList><output></planList>", "XML syntax error at line 1, column 30: "),
        (b'<planList a="1" a="2"/>', "XML syntax error at line 1"),
        (b"<planList>&nope;</planList>", "Entity 'nope' not defined"),
        (b"<planList/><planList/>", "Extra content at the end of the document"),
        (b"<planList/>trailing", "XML syntax error"),
        (b'<?xml version="1.0" encoding="UTF-9"?><planList/>', "Unsupported encoding"),
        (b"", "empty document"),
        (b"   \n", "document ended before its root element"),
    ],
)
def test_documents_that_cannot_be_parsed_raise_feed_error(doc: bytes, message: str) -> None:
    with pytest.raises(FeedError, match=re.escape(message)):
        parse_bytes(doc)


def test_an_empty_root_is_an_empty_snapshot() -> None:
    records, parser = parse_bytes(b"<planList/>")
    assert (records, parser.variant, parser.plans_seen) == ([], "planList", 0)


# -- 7. hostile documents --------------------------------------------------------------------

PLAN_BODY = (
    '<output><base_plan base_plan_id="1" sell_mode="online" title="{title}">{text}'
    '<plan plan_id="1" plan_start_date="2021-06-30T21:00:00" plan_end_date="2021-06-30T22:00:00"'
    ' sold_out="false"><zone zone_id="1" capacity="1" price="1.00"/></plan></base_plan></output>'
)

BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE planList [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{n} "{("&lol" + str(n - 1) + ";") * 10}">\n'.replace("&lol0;", "&lol;")
        for n in range(1, 10)
    )
    + "]>\n<planList>"
    + PLAN_BODY.format(title="&lol9;", text="&lol9;")
    + "</planList>"
).encode()


def parse_hostile(doc: bytes, chunk: int) -> tuple[FeedError, list[PlanRecord]]:
    """Parse a document that must be rejected; the error and any records it let out."""
    parser = FeedParser()
    records: list[PlanRecord] = []
    with pytest.raises(FeedError) as caught:
        for offset in range(0, len(doc), chunk):
            records += parser.feed(doc[offset : offset + chunk])
        records += parser.close()
    return caught.value, records


def error_texts(error: BaseException) -> str:
    texts = []
    current: BaseException | None = error
    while current is not None:
        texts += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(texts)


@pytest.mark.parametrize("chunk", [1, 64 * 1024])
def test_billion_laughs_is_rejected_fast(chunk: int) -> None:
    assert BILLION_LAUGHS.count(b"<!ENTITY") == 10
    started = time.perf_counter()
    error, records = parse_hostile(BILLION_LAUGHS, chunk)
    assert time.perf_counter() - started < 1.0
    assert records == []
    assert "DOCTYPE" in str(error)


@pytest.fixture
def secret_file(tmp_path: Path) -> tuple[Path, str]:
    marker = f"XXE-MARKER-{uuid.uuid4().hex}"
    path = tmp_path / "secret.txt"
    path.write_text(marker)
    return path, marker


def xxe_file_doc(path: Path) -> bytes:
    return (
        f'<?xml version="1.0"?><!DOCTYPE planList [<!ENTITY xxe SYSTEM "{path.as_uri()}">]>'
        f"<planList>{PLAN_BODY.format(title='t', text='&xxe;')}</planList>"
    ).encode()


def test_the_xxe_document_is_a_real_attack_on_an_unhardened_parser(
    secret_file: tuple[Path, str],
) -> None:
    """Control: the same document does read the file when entities are resolved."""
    path, marker = secret_file
    unsafe = etree.XMLParser(resolve_entities=True, load_dtd=True, no_network=True)
    root = etree.fromstring(xxe_file_doc(path), unsafe)
    assert root.find(".//base_plan").text == marker  # type: ignore[union-attr]


@pytest.mark.parametrize("chunk", [1, 64 * 1024])
def test_xxe_file_entities_never_read_the_file(chunk: int, secret_file: tuple[Path, str]) -> None:
    path, marker = secret_file
    started = time.perf_counter()
    error, records = parse_hostile(xxe_file_doc(path), chunk)
    assert time.perf_counter() - started < 1.0
    assert records == []
    assert "DOCTYPE" in str(error)
    assert marker not in error_texts(error)


@pytest.fixture
def listener() -> Iterator[tuple[int, Callable[[], bool]]]:
    """A local port and a check that tells whether anything connected to it."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.setblocking(False)

    def connected() -> bool:
        try:
            conn, _ = server.accept()  # a finished handshake waits here, no delay needed
        except BlockingIOError:
            return False
        conn.close()
        return True

    yield server.getsockname()[1], connected
    server.close()


def test_the_listener_sees_a_connection(listener: tuple[int, Callable[[], bool]]) -> None:
    """Control: the check below would notice a connection attempt."""
    port, connected = listener
    assert not connected()
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        assert connected()


NETWORK_DOCS = {
    "general entity": (
        '<!DOCTYPE planList [<!ENTITY xxe SYSTEM "http://127.0.0.1:{port}/x">]>'
        "<planList>" + PLAN_BODY.format(title="t", text="&xxe;") + "</planList>"
    ),
    "external DTD": ('<!DOCTYPE planList SYSTEM "http://127.0.0.1:{port}/x.dtd"><planList/>'),
    "public DTD": (
        '<!DOCTYPE planList PUBLIC "-//X//DTD X//EN" "http://127.0.0.1:{port}/x.dtd"><planList/>'
    ),
    "parameter entity": (
        '<!DOCTYPE planList [<!ENTITY % p SYSTEM "http://127.0.0.1:{port}/p.dtd"> %p;]><planList/>'
    ),
}


@pytest.mark.parametrize("name", NETWORK_DOCS)
def test_network_entities_are_rejected_without_connecting(
    name: str, listener: tuple[int, Callable[[], bool]]
) -> None:
    port, connected = listener
    doc = ('<?xml version="1.0"?>' + NETWORK_DOCS[name].replace("{port}", str(port))).encode()
    started = time.perf_counter()
    error, records = parse_hostile(doc, 64 * 1024)
    assert time.perf_counter() - started < 1.0
    assert "DOCTYPE" in str(error)
    assert records == []
    assert not connected()


def test_xinclude_and_schema_locations_are_not_fetched(
    listener: tuple[int, Callable[[], bool]],
) -> None:
    port, connected = listener
    url = f"http://127.0.0.1:{port}"
    doc = (
        FIXTURE.read_bytes()
        .replace(b'"planList.xsd"', f'"{url}/planList.xsd"'.encode())
        .replace(
            b"<output>",
            b'<output><xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="'
            + f'{url}/x"/>'.encode(),
        )
    )
    records, _ = parse_bytes(doc)
    assert len(records) == 4
    assert not connected()


@pytest.mark.parametrize(
    "doctype",
    [
        "<!DOCTYPE planList>",
        "<!DOCTYPE planList [<!ELEMENT planList ANY>]>",
        '<!DOCTYPE planList [<!ATTLIST base_plan sell_mode CDATA "online">]>',
        '<!DOCTYPE planList [<!ENTITY harmless "x">]>',
    ],
)
def test_any_doctype_is_rejected(doctype: str) -> None:
    doc = (
        '<?xml version="1.0"?>' + doctype + "<planList>" + PLAN_BODY.format(title="t", text="")
    ).encode()
    with pytest.raises(FeedError, match=r"^DOCTYPE is not allowed \(found <!DOCTYPE planList>\)"):
        parse_bytes(doc + b"</planList>")


# -- 8. truncation ---------------------------------------------------------------------------


def test_cut_mid_element_fails_on_close() -> None:
    doc = FIXTURE.read_bytes()
    parser = FeedParser()
    parser.feed(doc[: doc.index(b"<zone") + 12])
    with pytest.raises(
        FeedError, match=re.escape("document ended before </planList> (truncated?)")
    ):
        parser.close()


def test_cut_after_a_complete_base_plan_fails_on_close() -> None:
    doc = FIXTURE.read_bytes()
    cut = doc.index(b"</base_plan>") + len(b"</base_plan>")
    parser = FeedParser()
    records = parser.feed(doc[:cut])
    records += parser.feed(b"\n   ")
    assert [r.plan_id for r in records] == ["291"]  # delivered, but the run must not seal
    with pytest.raises(FeedError, match=r"^document ended before </planList> \(truncated\?\)"):
        parser.close()


def test_cut_event_list_names_its_root() -> None:
    doc = to_event_list(FIXTURE.read_bytes())
    with pytest.raises(FeedError, match=re.escape("document ended before </eventList>")):
        parse_bytes(doc[: doc.index(b"</output>")])


def test_every_proper_prefix_of_the_fixture_is_incomplete() -> None:
    doc = FIXTURE.read_bytes().rstrip()
    assert doc.endswith(b"</planList>")
    for cut in range(len(doc)):
        with pytest.raises(FeedError):
            parse_bytes(doc[:cut])


# -- 9. bounds: depth and attributes ------------------------------------------------------------


def nested(depth: int, inner: str = "") -> bytes:
    """A planList whose elements reach ``depth`` (the root is 1): the fixture's plans, then
    unknown elements inside ``output`` (``inner`` at the bottom)."""
    levels = depth - 2  # planList, output
    doc = FIXTURE.read_bytes()
    nest = "<x>" * levels + inner + "</x>" * levels
    return doc.replace(b"</output>", nest.encode() + b"</output>")


@pytest.mark.parametrize("size", [1, 64 * 1024])
def test_nesting_up_to_the_maximum_depth_is_read(size: int) -> None:
    records, _ = feed_in(nested(MAX_DEPTH), size)
    assert len(records) == 4


@pytest.mark.parametrize("size", [1, 64 * 1024])
@pytest.mark.parametrize(
    "doc",
    [
        nested(MAX_DEPTH + 1),
        # counted inside ignored subtrees and below a zone alike
        FIXTURE.read_bytes().replace(
            b'numbered="false" />',
            b'numbered="false">'
            + b"<y>" * (MAX_DEPTH - 4)  # the zone is at depth 5
            + b"</y>" * (MAX_DEPTH - 4)
            + b"</zone>",
            1,
        ),
    ],
    ids=["unknown-element", "below-a-zone"],
)
def test_nesting_deeper_than_the_maximum_fails_the_document(doc: bytes, size: int) -> None:
    with pytest.raises(FeedError, match=rf"^document nested deeper than {MAX_DEPTH} elements$"):
        feed_in(doc, size)


def test_a_depth_bomb_fails_within_its_first_chunk() -> None:
    """10 million nested elements (70 MB): the parser stops at level 65, so libxml2 never
    holds more than that: memory stays flat (tests/plan_service/ingest/test_bounds.py measures the
    RSS)."""
    parser = FeedParser()
    fed = 0
    with pytest.raises(FeedError, match="nested deeper than"):
        for chunk in deep_document(10_000_000):
            fed += len(chunk)
            parser.feed(chunk)
    assert fed <= 2 * 64 * 1024
    with pytest.raises(FeedError, match="nested deeper than"):
        parser.close()


def crowded(attributes: int, before: bytes = b"") -> bytes:
    """The fixture with an unknown element of ``attributes`` attributes inside ``output``."""
    element = b"<x" + b"".join(b' a%d=""' % n for n in range(attributes)) + b"/>"
    return FIXTURE.read_bytes().replace(b"<output>", b"<output>" + before + element)


def test_an_element_with_the_most_attributes_the_guard_allows_is_read() -> None:
    records, _ = parse_bytes(crowded(MAX_MARKUP_EQUALS))
    assert len(records) == 4


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_an_element_with_too_many_attributes_fails_wherever_the_chunks_are_cut(
    data: st.DataObject,
) -> None:
    doc = crowded(MAX_MARKUP_EQUALS + 1)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(doc) - 1), max_size=8)))
    with pytest.raises(FeedError, match=rf"^more than {MAX_MARKUP_EQUALS} '=' between two '<'"):
        feed_at(doc, cuts)


@pytest.mark.parametrize(
    "before",
    [b"", b"<y/>" * 3, b'<zone a="1" b="2"/>' * 2000],  # the last crowds the span: the regex path
    ids=["first", "after-elements", "dense-span"],
)
def test_the_attribute_guard_finds_the_element_inside_one_big_chunk(before: bytes) -> None:
    parser = FeedParser()
    with pytest.raises(FeedError, match="an element with too many attributes"):
        parser.feed(crowded(MAX_MARKUP_EQUALS + 1, before))


def test_the_attribute_guard_lets_dense_documents_through() -> None:
    """Many small elements with many attributes in all (more '=' per span than one element
    may have): not an element with too many attributes."""
    zones = [zone(f"{n}.00", **{f"k{k}": "" for k in range(50)}) for n in range(300)]
    snapshot = [base(str(b), [plan(str(b), zones=zones)]) for b in range(5)]
    doc = render(snapshot, pretty=False)
    assert doc.count(b"=") > 4 * MAX_MARKUP_EQUALS
    parser = FeedParser()
    records = parser.feed(doc) + parser.close()  # one chunk: spans of 64 KiB, each crowded
    assert [(r.min_price, r.max_price) for r in records] == [(Decimal(0), Decimal(299))] * 5


# -- 10. bounds: the gap between two start tags ------------------------------------------------

GAP_REASON = f"more than {MAX_GAP_BYTES} bytes without a new element"
SPAN = 64 * 1024  # what the parser hands libxml2 at once, and the bound's precision


def with_gap(gap: int) -> bytes:
    """A planList of four plans whose second plan's start tag ends exactly ``gap`` bytes after
    the start tag before it (its base_plan's) ends: the difference is an unknown attribute,
    ignored when the document is read."""
    padded = plan("2", note="#")
    doc = render(
        [base("10", [plan("1")]), base("20", [padded, plan("3")]), base("30", [plan("4")])]
    )
    value = doc.index(b'note="#"') + len(b'note="')
    tag_end = doc.index(b">", value) + 1
    previous_end = doc.rindex(b">", 0, doc.rindex(b"<plan ", 0, value)) + 1
    missing = gap - (tag_end - previous_end)
    assert missing >= 0
    return doc[:value] + b"#" * (1 + missing) + doc[value + 1 :]


def test_a_huge_attribute_value_costs_its_size_not_more() -> None:
    """A title as big as the gap bound allows: its plans skipped with the reason, its
    neighbours kept, and the parser's own allocations stay near the value's size (the title is
    read once, never copied into a record)."""
    snapshot = [
        base("1", [plan("1")]),
        base("2", [plan("2"), plan("3")], title="x" * BIG),
        base("3", [plan("4")]),
    ]
    doc = render(snapshot)
    tracemalloc.start()
    try:
        records, parser = parse_bytes(doc)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.plan_id for r in records] == ["1", "4"]
    assert parser.skip_samples == [
        Skip(f"title longer than {MAX_TITLE_LENGTH} characters", "2", "2"),
        Skip(f"title longer than {MAX_TITLE_LENGTH} characters", "2", "3"),
    ]
    assert peak < 3 * BIG, f"peak {peak} bytes"


@pytest.mark.parametrize("size", [0, SPAN, 1000, 7], ids=["whole", "64KiB", "1000", "7"])
def test_a_start_tag_up_to_the_gap_bound_is_read(size: int) -> None:
    doc = with_gap(MAX_GAP_BYTES)
    records, _ = feed_in(doc, size or len(doc))
    assert [r.plan_id for r in records] == ["1", "2", "3", "4"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_start_tag_up_to_the_gap_bound_is_read_wherever_the_chunks_are_cut(
    data: st.DataObject,
) -> None:
    doc = with_gap(MAX_GAP_BYTES)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(doc) - 1), max_size=8)))
    records, _ = feed_at(doc, cuts)
    assert [r.plan_id for r in records] == ["1", "2", "3", "4"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_start_tag_past_the_gap_bound_fails_wherever_the_chunks_are_cut(
    data: st.DataObject,
) -> None:
    """Over the bound by the two spans of its precision: whatever the cuts, it fails, and
    says where."""
    doc = with_gap(MAX_GAP_BYTES + 2 * SPAN + 1)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(doc) - 1), max_size=8)))
    with pytest.raises(FeedError, match=f"^{GAP_REASON}") as caught:
        feed_at(doc, cuts)
    assert 'the last markup began \'<plan plan_id="2"' in str(caught.value)


HUGE = 400_000_000


def huge(head: bytes, unit: bytes, tail: bytes, size: int) -> Iterator[bytes]:
    """The fixture with ``head`` + ``size`` bytes of ``unit`` + ``tail`` inside ``output``,
    streamed in 64 KiB pieces (never held whole)."""
    doc = FIXTURE.read_bytes()
    before, after = doc.split(b"<output>")
    yield before + b"<output>" + head
    block = unit * (SPAN // len(unit))
    for _ in range(size // len(block)):
        yield block
    yield unit * ((size % len(block)) // len(unit)) + tail + after


# Whatever libxml2 buffers until it ends (and text, which it does not), unknown to the feed.
MARKUP = {
    "attribute value": (b'<x a="', b"v", b'"/>'),
    "attribute value with >": (b'<x a="', b">", b'"/>'),
    "attribute value with <": (b'<x a="', b"<", b'"/>'),  # invalid, found only at its end
    "start tag spaces": (b"<x", b" ", b"/>"),
    "element name": (b"<x", b"x", b"/>"),
    "end tag spaces": (b"<x></x", b" ", b">"),
    "comment": (b"<!--", b"c", b"-->"),
    "comment with >": (b"<!--", b">", b"-->"),
    "processing instruction": (b"<?pi ", b"p", b"?>"),
    "CDATA section": (b"<x><![CDATA[", b"d", b"]]></x>"),
    "entity reference": (b"<x>&", b"e", b";</x>"),
    "text": (b"<x>", b"t", b"</x>"),
}
NOT_WELL_FORMED = {"attribute value with <", "element name", "entity reference"}  # at any size


@pytest.mark.parametrize("kind", [kind for kind in MARKUP if kind not in NOT_WELL_FORMED])
def test_markup_or_text_up_to_the_gap_bound_is_read(kind: str) -> None:
    head, unit, tail = MARKUP[kind]
    records, _ = parse_bytes(b"".join(huge(head, unit, tail, BIG)))
    assert len(records) == 4


@pytest.mark.parametrize("chunk", [SPAN, 1 << 20], ids=["64KiB", "1MiB"])
@pytest.mark.parametrize("kind", MARKUP)
def test_markup_or_text_past_the_gap_bound_fails_while_it_is_read(kind: str, chunk: int) -> None:
    """400 MB of it: the document fails after about 1 MiB has been handed to libxml2, which
    never buffers more than that (before the bound, it held all 400 MB, and then twice that
    as its buffer doubled)."""
    head, unit, tail = MARKUP[kind]
    parser = FeedParser()
    fed = 0
    pending = b""
    with pytest.raises(FeedError, match=f"^{GAP_REASON}"):
        for piece in huge(head, unit, tail, HUGE):
            pending += piece
            if len(pending) >= chunk:
                fed += len(pending)
                parser.feed(pending)
                pending = b""
    assert fed <= MAX_GAP_BYTES + 2 * max(chunk, SPAN) + len(FIXTURE.read_bytes())


def test_a_trickled_start_tag_fails_at_the_gap_bound() -> None:
    """Fed 16 bytes at a time, the bound counts every span however small: the document fails
    within a few bytes of the bound."""
    parser = FeedParser()
    parser.feed(b'<planList><output><base_plan base_plan_id="1" sell_mode="online" title="')
    piece = b"x" * 16
    fed = 0
    with pytest.raises(FeedError, match=f"^{GAP_REASON}") as caught:
        while fed < 2 * MAX_GAP_BYTES:
            fed += len(piece)
            parser.feed(piece)
    assert MAX_GAP_BYTES < fed <= MAX_GAP_BYTES + len(piece)
    assert 'the last markup began \'<base_plan base_plan_id="1" sell_mode="o...' in str(
        caught.value
    )
    with pytest.raises(FeedError, match=f"^{GAP_REASON}"):
        parser.close()  # the parser is spent


# -- memory ----------------------------------------------------------------------------------


def test_memory_does_not_grow_with_the_document() -> None:
    doc = render(synthetic(20_000))
    assert len(doc) > 10_000_000
    parser = FeedParser()
    count = 0
    tracemalloc.start()
    try:
        for offset in range(0, len(doc), 64 * 1024):
            count += len(parser.feed(doc[offset : offset + 64 * 1024]))
        count += len(parser.close())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20_000
    # Keeping the records (or a tree) would take well over 10 MB; one chunk's worth is ~0.3 MB.
    assert peak < 2_000_000, f"peak {peak} bytes"
