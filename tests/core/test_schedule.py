"""Schedules: intervals and cron expressions, evaluated on given aware datetimes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgenough.core.schedule import Cron, Interval, Schedule, Tick, is_late

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
US = timedelta(microseconds=1)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def ticks(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Every tick in (start, end], as UTC instants."""
    found, t = [], start
    while (tick := schedule.next_after(t)).at <= end:
        found.append(tick.at)
        t = tick.at
    return found


def local(instants: list[datetime], zone: ZoneInfo) -> list[str]:
    return [t.astimezone(zone).isoformat() for t in instants]


# -- intervals -------------------------------------------------------------------------------


def test_an_interval_ticks_at_each_period_since_the_epoch() -> None:
    every = Interval(60)
    t = utc(2026, 1, 1, 12, 0, 30)
    minute = int(utc(2026, 1, 1, 12, 0).timestamp()) // 60
    assert every.latest(t) == Tick(minute, utc(2026, 1, 1, 12, 0))
    assert every.next_after(t) == Tick(minute + 1, utc(2026, 1, 1, 12, 1))
    # At a boundary the boundary is the latest tick, and the next one is a period later.
    assert every.latest(utc(2026, 1, 1, 12, 1)) == every.next_after(t)
    assert every.next_after(utc(2026, 1, 1, 12, 1)).at == utc(2026, 1, 1, 12, 2)
    # Fractions of a second are exact: keys come from whole microseconds.
    tenth = Interval(0.1)
    assert (
        tenth.next_after(utc(2026, 1, 1) + 100_000 * US - US).at == utc(2026, 1, 1) + 100_000 * US
    )
    assert every.spec == "every 60.0s" == Interval(60.0).spec


def test_an_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Interval(0)
    with pytest.raises(ValueError, match="positive"):
        Interval(-1)


def test_a_schedule_needs_an_aware_datetime() -> None:
    with pytest.raises(ValueError, match="aware"):
        Cron("* * * * *").next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        Interval(1).latest(datetime(2026, 1, 1))


# -- cron: validation and the tick instant ---------------------------------------------------


@pytest.mark.parametrize("expr", ["61 * * * *", "* * * *", "not a cron", "* * 31 2 *", ""])
def test_a_bad_cron_expression_is_refused_by_name(expr: str) -> None:
    with pytest.raises(ValueError, match="invalid cron expression") as info:
        Cron(expr)
    assert repr(" ".join(expr.split())) in str(info.value)


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Europe", "", "../etc/passwd", "utc"])
def test_an_unknown_timezone_is_refused_by_name(zone: str) -> None:
    with pytest.raises(ValueError, match="unknown timezone") as info:
        Cron("* * * * *", zone)
    assert repr(zone) in str(info.value)


def test_the_spec_names_the_expression_and_zone() -> None:
    assert Cron("30  2 * * *", "Europe/Berlin").spec == "cron 30 2 * * * Europe/Berlin"
    assert Cron("0 * * * *").spec == "cron 0 * * * * UTC"


def test_the_latest_tick_includes_the_instant_itself_but_not_one_microsecond_before() -> None:
    hourly = Cron("0 * * * *")
    tick = utc(2026, 5, 1, 10)
    assert hourly.latest(tick) == Tick(int(tick.timestamp()), tick)
    assert hourly.latest(tick - US) == Tick(int(tick.timestamp()) - 3600, utc(2026, 5, 1, 9))
    assert hourly.next_after(tick - US).at == tick
    assert hourly.next_after(tick).at == utc(2026, 5, 1, 11)


def test_seconds_field_leads_and_ticks_every_second() -> None:
    every_second = Cron("* * * * * *")
    t = utc(2026, 5, 1, 10) + 250_000 * US
    assert every_second.latest(t) == Tick(int(utc(2026, 5, 1, 10).timestamp()), utc(2026, 5, 1, 10))
    assert every_second.next_after(t).at == utc(2026, 5, 1, 10, 0, 1)
    assert ticks(Cron("*/15 * * * * *"), utc(2026, 5, 1, 10), utc(2026, 5, 1, 10, 1)) == [
        utc(2026, 5, 1, 10, 0, 15),
        utc(2026, 5, 1, 10, 0, 30),
        utc(2026, 5, 1, 10, 0, 45),
        utc(2026, 5, 1, 10, 1),
    ]


def test_latest_finds_ticks_years_back() -> None:
    leap_day = Cron("0 0 29 2 *")
    assert leap_day.latest(utc(2027, 6, 1)) == Tick(
        int(utc(2024, 2, 29).timestamp()), utc(2024, 2, 29)
    )
    assert leap_day.next_after(utc(2027, 6, 1)).at == utc(2028, 2, 29)


# -- cron across DST: exact instants ---------------------------------------------------------


def test_berlin_spring_forward_runs_a_skipped_local_time_once_just_after_the_gap() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST, so 02:30 does not exist that day. Like
    # Debian's cron, it runs once, at the first instant after the gap: 03:00 CEST.
    nightly = Cron("30 2 * * *", "Europe/Berlin")
    runs = ticks(nightly, utc(2026, 3, 27, 12), utc(2026, 3, 31, 12))
    assert runs == [
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 29, 1, 0),  # 03:00 CEST, the only run of the 29th
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]
    assert local(runs[1:2], BERLIN) == ["2026-03-29T03:00:00+02:00"]


def test_berlin_fall_back_runs_a_repeated_local_time_once_at_its_first_occurrence() -> None:
    # 2026-10-25: 03:00 CEST becomes 02:00 CET, so 02:30 happens twice; it runs once, in
    # summer time (00:30 UTC), not again an hour later.
    nightly = Cron("30 2 * * *", "Europe/Berlin")
    runs = ticks(nightly, utc(2026, 10, 23, 12), utc(2026, 10, 26, 12))
    assert runs == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    assert local(runs[1:], BERLIN) == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
    # From inside the repeated hour (02:20 CET, after the run) the next run is the next day's,
    # and the day's run is still the latest tick.
    second_0220 = utc(2026, 10, 25, 1, 20)
    assert nightly.next_after(second_0220).at == utc(2026, 10, 26, 1, 30)
    assert nightly.latest(second_0220) == Tick(int(runs[1].timestamp()), runs[1])
    assert nightly.latest(utc(2026, 10, 25, 1, 30)).at == runs[1]  # type: ignore[union-attr]


def test_berlin_hourly_runs_in_every_real_hour_across_both_transitions() -> None:
    hourly = Cron("0 * * * *", "Europe/Berlin")
    spring = ticks(hourly, utc(2026, 3, 28, 23, 30), utc(2026, 3, 29, 2, 30))
    assert spring == [utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]
    assert local(spring, BERLIN) == [
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:00 does not exist
        "2026-03-29T04:00:00+02:00",
    ]
    fall = ticks(hourly, utc(2026, 10, 24, 22, 30), utc(2026, 10, 25, 2, 30))
    assert fall == [
        utc(2026, 10, 24, 23),
        utc(2026, 10, 25, 0),
        utc(2026, 10, 25, 1),
        utc(2026, 10, 25, 2),
    ]
    assert local(fall, BERLIN) == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",  # the repeated hour runs too: it is a real hour
        "2026-10-25T03:00:00+01:00",
    ]


def test_berlin_every_fifteen_minutes_runs_through_the_repeated_hour() -> None:
    quarterly = Cron("*/15 * * * *", "Europe/Berlin")
    runs = ticks(quarterly, utc(2026, 10, 24, 23, 50), utc(2026, 10, 25, 2, 0))
    assert runs == [utc(2026, 10, 25, 0) + timedelta(minutes=15 * n) for n in range(9)]
    assert local(runs, BERLIN)[3:6] == [
        "2026-10-25T02:45:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:15:00+01:00",
    ]


def test_new_york_spring_forward_and_fall_back() -> None:
    # 2026-03-08: 02:00 EST becomes 03:00 EDT; 2026-11-01: 02:00 EDT becomes 01:00 EST.
    spring = ticks(Cron("30 2 * * *", "America/New_York"), utc(2026, 3, 7, 12), utc(2026, 3, 9, 12))
    assert spring == [utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]
    assert local(spring[:1], NEW_YORK) == ["2026-03-08T03:00:00-04:00"]
    fall = ticks(
        Cron("30 1 * * *", "America/New_York"), utc(2026, 10, 31, 12), utc(2026, 11, 2, 12)
    )
    assert fall == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]
    assert local(fall[:1], NEW_YORK) == ["2026-11-01T01:30:00-04:00"]


def test_a_seconds_field_expression_follows_absolute_time_across_dst() -> None:
    # cronsim applies Debian's DST handling to five-field expressions only: with a seconds
    # field a skipped local time does not occur and a repeated one occurs twice (documented
    # in docs/guides/periodic.md).
    nightly = Cron("0 30 2 * * *", "Europe/Berlin")
    assert ticks(nightly, utc(2026, 3, 28, 12), utc(2026, 3, 30, 12)) == [utc(2026, 3, 30, 0, 30)]
    assert ticks(nightly, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12)) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 30),
    ]


EXPRESSIONS = [
    "30 2 * * *",
    "0 * * * *",
    "*/15 * * * *",
    "15 1-3 * * *",
    "0 0 * * MON",
    "*/20 * * * * *",
]


@settings(max_examples=60, deadline=None)
@given(
    expr=st.sampled_from(EXPRESSIONS),
    zone=st.sampled_from(["Europe/Berlin", "America/New_York", "UTC"]),
    # Around both of 2026's transitions in either zone, to the microsecond.
    t=st.sampled_from(
        [utc(2026, 3, 8, 4), utc(2026, 3, 28, 22), utc(2026, 10, 24, 21), utc(2026, 10, 31, 22)]
    ),
    offset=st.integers(0, 10 * 3600 * 1_000_000),
)
def test_latest_and_next_after_agree(expr: str, zone: str, t: datetime, offset: int) -> None:
    cron = Cron(expr, zone)
    now = t + offset * US
    latest, following = cron.latest(now), cron.next_after(now)
    assert latest is not None
    assert latest.at <= now < following.at
    assert cron.next_after(latest.at) == following
    assert cron.latest(following.at - US) == latest
    assert latest.key == int(latest.at.timestamp()) and latest.at.microsecond == 0


# -- lateness ----------------------------------------------------------------------------------


def test_a_claim_is_late_only_past_the_grace() -> None:
    tick = Tick(0, utc(2026, 5, 1, 10))
    assert not is_late(tick, tick.at, 60)
    assert not is_late(tick, tick.at + timedelta(seconds=60), 60)
    assert is_late(tick, tick.at + timedelta(seconds=60) + US, 60)
