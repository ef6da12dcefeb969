"""Periodic tasks: at most once per tick across replicas, missed ticks by policy.

The claims run on real PostgreSQL; ``claim_at`` takes the database time as an argument, so a
test presents ticks in the past (or at an exact instant) without waiting for them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Cron, Interval, Periodic, PeriodicTask, metrics
from pgenough.core.admin import PeriodicInfo, list_periodic
from pgenough.core.periodic import Claim
from tests.helpers.procs import Proc

T = datetime(2026, 5, 1, 10, tzinfo=UTC)  # an hourly tick
US = timedelta(microseconds=1)
HOUR = timedelta(hours=1)
HOURLY = Cron("0 * * * *")


async def nothing() -> None:
    pass


def hourly(name: str = "report", **options: object) -> PeriodicTask:
    return PeriodicTask(name, HOURLY, nothing, grace=60.0, **options)  # type: ignore[arg-type]


async def claim(db: AsyncConnectionPool, p: Periodic, task: PeriodicTask, now: datetime) -> Claim:
    async with db.connection() as conn:
        return await p.claim_at(conn, task, now)


async def stored(db: AsyncConnectionPool, name: str) -> tuple[int, str | None, str | None]:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT period, schedule, claimed_by FROM pgenough.periodic WHERE name = %s", (name,)
        )
        row = await cur.fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def key(t: datetime) -> int:
    return int(t.timestamp())


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pgenough.core.periodic" and r.levelno == logging.INFO
    ]


# -- registration ------------------------------------------------------------------------------


def test_a_periodic_task_needs_a_name_and_a_known_policy() -> None:
    with pytest.raises(ValueError, match="positive"):
        PeriodicTask("x", Interval(0), nothing)
    with pytest.raises(ValueError, match="name"):
        PeriodicTask("", HOURLY, nothing)
    with pytest.raises(ValueError, match="missed"):
        PeriodicTask("x", HOURLY, nothing, missed="twice")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grace"):
        PeriodicTask("x", HOURLY, nothing, missed="skip")


@pytest.mark.db
async def test_cron_refuses_a_bad_expression_or_zone_at_registration(
    db: AsyncConnectionPool,
) -> None:
    p = Periodic(db)
    with pytest.raises(ValueError, match="invalid cron expression '61 \\* \\* \\* \\*'"):
        p.cron("61 * * * *", "bad")
    with pytest.raises(ValueError, match="unknown timezone 'Europe/Atlantis'"):
        # The decorator form fails at the call, before any function is given.
        p.cron("0 * * * *", "bad", timezone="Europe/Atlantis")
    with pytest.raises(ValueError, match="grace"):
        p.cron("0 * * * *", "bad", grace=-1)

    @p.cron("30 2 * * *", "nightly", timezone="Europe/Berlin", missed="skip")
    async def nightly() -> None: ...

    p.every(60, "minutely", nothing)
    with pytest.raises(ValueError, match="already registered"):
        p.cron("* * * * *", "nightly", nothing)


# -- intervals, as before ----------------------------------------------------------------------


@pytest.mark.db
async def test_one_claim_per_period(db: AsyncConnectionPool) -> None:
    runs: list[str] = []
    a, b = Periodic(db, replica="a"), Periodic(db, replica="b")

    async def fn() -> None:
        runs.append("ran")

    for p in (a, b):
        p.every(3600, "hourly", fn)
    task = PeriodicTask("hourly", Interval(3600), fn)
    results = [await p.run_once(task) for p in (a, b, a)]
    assert [claimed for _, claimed in results] == [True, False, False]
    assert runs == ["ran"]


@pytest.mark.db
async def test_an_interval_runs_its_current_period_when_first_seen(
    db: AsyncConnectionPool,
) -> None:
    task = PeriodicTask("every-minute", Interval(60), nothing)
    a = Periodic(db, replica="a")
    first = await claim(db, a, task, T + timedelta(seconds=30))
    assert first.outcome == "run"
    assert await stored(db, task.name) == (key(T) // 60, "every 60.0s", "a")


# -- cron: the tick instant, first registration, on time ----------------------------------------


@pytest.mark.db
async def test_a_cron_task_first_seen_does_not_run_a_tick_from_before_it_was_registered(
    db: AsyncConnectionPool,
) -> None:
    a = Periodic(db, replica="a")
    registered = await claim(db, a, hourly(), T + timedelta(minutes=10))
    assert registered.outcome == "recorded"
    assert await stored(db, "report") == (key(T), "cron 0 * * * * UTC", None)
    # It waits for the next tick, which runs.
    assert (await claim(db, a, hourly(), T + HOUR - US)).outcome is None
    assert (await claim(db, a, hourly(), T + HOUR)).outcome == "run"
    assert await stored(db, "report") == (key(T + HOUR), "cron 0 * * * * UTC", "a")


@pytest.mark.db
async def test_a_tick_is_claimed_at_its_instant_and_not_a_microsecond_before(
    db: AsyncConnectionPool,
) -> None:
    a = Periodic(db, replica="a")
    await claim(db, a, hourly(), T - timedelta(minutes=30))
    early = await claim(db, a, hourly(), T - US)
    assert early.outcome is None and early.tick is not None and early.tick.at == T - HOUR
    exact = await claim(db, a, hourly(), T)
    assert exact.outcome == "run" and exact.tick is not None and exact.tick.at == T


@pytest.mark.db
async def test_a_tick_claimed_on_time_runs_on_one_replica_and_logs_nothing(
    db: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgenough.core.periodic")
    a, b = Periodic(db, replica="a"), Periodic(db, replica="b")
    await claim(db, a, hourly(), T - timedelta(minutes=1))
    outcomes = [
        (await claim(db, p, hourly(), T + timedelta(milliseconds=ms))).outcome
        for p, ms in ((a, 5), (b, 8), (a, 900))
    ]
    assert outcomes == ["run", None, None]
    assert info_lines(caplog) == []


@pytest.mark.db
async def test_replicas_claiming_the_same_tick_together_run_it_once(
    db: AsyncConnectionPool,
) -> None:
    replicas = [Periodic(db, replica=f"r{n}") for n in range(3)]
    first = await asyncio.gather(*(claim(db, p, hourly(), T - US) for p in replicas))
    assert sorted(str(c.outcome) for c in first) == ["None", "None", "recorded"]
    for hour in range(1, 21):
        now = T + hour * HOUR - HOUR + timedelta(milliseconds=3)
        claims = await asyncio.gather(*(claim(db, p, hourly(), now) for p in replicas))
        assert [c.outcome for c in claims].count("run") == 1, (hour, claims)
        assert [c.outcome for c in claims].count(None) == 2
    assert (await stored(db, "report"))[0] == key(T + 19 * HOUR)


# -- missed ticks ---------------------------------------------------------------------------


@pytest.mark.db
async def test_skip_runs_a_tick_claimed_within_its_grace(
    db: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgenough.core.periodic")
    a = Periodic(db, replica="a")
    task = hourly(missed="skip")
    await claim(db, a, task, T - timedelta(minutes=30))
    assert (await claim(db, a, task, T + timedelta(seconds=60))).outcome == "run"
    assert info_lines(caplog) == []


@pytest.mark.db
async def test_skip_does_not_run_a_tick_past_its_grace_and_runs_the_next(
    db: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgenough.core.periodic")
    a, b = Periodic(db, replica="a"), Periodic(db, replica="b")
    task = hourly(missed="skip")
    await claim(db, a, task, T - timedelta(minutes=30))
    late = T + timedelta(seconds=60) + US
    assert (await claim(db, a, task, late)).outcome == "skipped"
    assert (await claim(db, b, task, late)).outcome is None
    assert await stored(db, "report") == (key(T), "cron 0 * * * * UTC", None)
    assert info_lines(caplog) == [
        "periodic task report: skipped tick 2026-05-01T10:00:00+00:00, claimed 60.0 s after it"
        " (grace 60 s); it runs again at its next tick"
    ]
    assert (await claim(db, b, task, T + HOUR + timedelta(seconds=1))).outcome == "run"


@pytest.mark.db
async def test_once_runs_only_the_latest_of_several_missed_ticks_on_recovery(
    db: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgenough.core.periodic")
    replicas = [Periodic(db, replica=f"r{n}") for n in range(3)]
    await claim(db, replicas[0], hourly(), T - 5 * HOUR)  # then every replica is down
    recovery = T + timedelta(minutes=20)
    claims = await asyncio.gather(*(claim(db, p, hourly(), recovery) for p in replicas))
    ran = [c for c in claims if c.outcome == "run"]
    assert len(ran) == 1 and ran[0].tick is not None and ran[0].tick.at == T
    assert [c.outcome for c in claims].count(None) == 2
    assert info_lines(caplog) == [
        "periodic task report: ticks passed while no replica claimed them; running the "
        "latest, 2026-05-01T10:00:00+00:00, once (1200.0 s after it), the older ones not at all"
    ]
    # The dropped ticks never run later; the next run is the next tick.
    for now in (recovery + timedelta(minutes=1), T + HOUR - US):
        assert (await claim(db, replicas[1], hourly(), now)).outcome is None
    assert (await claim(db, replicas[2], hourly(), T + HOUR)).outcome == "run"


@pytest.mark.db
async def test_once_logs_dropped_ticks_even_when_the_latest_is_on_time(
    db: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pgenough.core.periodic")
    minutely = PeriodicTask("minutely", Cron("* * * * *"), nothing, grace=60.0)
    a = Periodic(db, replica="a")
    await claim(db, a, minutely, T - timedelta(minutes=5, seconds=30))
    assert (await claim(db, a, minutely, T + timedelta(seconds=10))).outcome == "run"
    assert len(info_lines(caplog)) == 1
    assert "running the latest, 2026-05-01T10:00:00+00:00, once (10.0 s" in info_lines(caplog)[0]


@pytest.mark.db
async def test_recovery_with_the_database_clock_runs_the_latest_tick_once(
    db: AsyncConnectionPool,
) -> None:
    runs: list[str] = []

    async def fn() -> None:
        runs.append("ran")

    task = PeriodicTask("recovering", HOURLY, fn, grace=60.0)
    a, b = Periodic(db, replica="a"), Periodic(db, replica="b")
    async with db.connection() as conn:
        cur = await conn.execute("SELECT now()")
        row = await cur.fetchone()
        assert row is not None
        latest = HOURLY.latest(row[0])
        assert latest is not None
        await conn.execute(
            "INSERT INTO pgenough.periodic (name, schedule, period) VALUES (%s, %s, %s)",
            (task.name, HOURLY.spec, latest.key - 5 * 3600),
        )
    before = metrics.PERIODIC_RUNS.labels(task.name)._value.get()
    now_s, ran = await a.run_once(task)
    assert ran and runs == ["ran"]
    assert metrics.PERIODIC_RUNS.labels(task.name)._value.get() == before + 1
    current = HOURLY.latest(datetime.fromtimestamp(now_s, UTC))
    assert current is not None and (await stored(db, task.name))[0] == current.key
    assert [await p.run_once(task) for p in (a, b)] == [(pytest.approx(now_s, abs=5), False)] * 2
    assert runs == ["ran"]


# -- schedule changes ----------------------------------------------------------------------------


@pytest.mark.db
async def test_a_changed_schedule_starts_over_instead_of_stalling(
    db: AsyncConnectionPool,
) -> None:
    a = Periodic(db, replica="a")
    # A cron key (an epoch second) is far above an interval's (a period number): without the
    # stored schedule the interval would wait decades to move past it.
    await claim(db, a, hourly("x"), T - US)
    assert (await claim(db, a, hourly("x"), T)).outcome == "run"
    every = PeriodicTask("x", Interval(60), nothing)
    assert (await claim(db, a, every, T + timedelta(seconds=5))).outcome == "run"
    assert await stored(db, "x") == (key(T) // 60, "every 60.0s", "a")
    assert (await claim(db, a, every, T + timedelta(seconds=50))).outcome is None
    # Back to cron, with another expression: a first registration again, then its ticks.
    half_past = PeriodicTask("x", Cron("30 * * * *"), nothing, grace=60.0)
    assert (await claim(db, a, half_past, T + timedelta(minutes=1))).outcome == "recorded"
    assert await stored(db, "x") == (key(T - timedelta(minutes=30)), "cron 30 * * * * UTC", None)
    assert (await claim(db, a, half_past, T + timedelta(minutes=30))).outcome == "run"
    # Another timezone is another schedule too.
    berlin = PeriodicTask("x", Cron("30 * * * *", "Europe/Berlin"), nothing, grace=60.0)
    assert (await claim(db, a, berlin, T + timedelta(minutes=31))).outcome == "recorded"


@pytest.mark.db
async def test_a_row_from_before_schedules_were_recorded_keeps_its_period(
    db: AsyncConnectionPool,
) -> None:
    every = PeriodicTask("legacy", Interval(60), nothing)
    period = key(T) // 60
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO pgenough.periodic (name, period, claimed_by) VALUES ('legacy', %s, 'old')",
            (period,),
        )
    a = Periodic(db, replica="a")
    # The period the old code claimed is not run again; the next one is, under the schedule.
    assert (await claim(db, a, every, T + timedelta(seconds=30))).outcome is None
    assert (await claim(db, a, every, T + timedelta(seconds=60))).outcome == "run"
    assert await stored(db, "legacy") == (period + 1, "every 60.0s", "a")
    # A legacy row ahead of the schedule (it was shorter) starts over instead of stalling.
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE pgenough.periodic SET schedule = NULL, period = %s WHERE name = 'legacy'",
            (period * 60,),
        )
    assert (await claim(db, a, every, T + timedelta(seconds=90))).outcome == "run"
    assert await stored(db, "legacy") == (period + 1, "every 60.0s", "a")


# -- the loop --------------------------------------------------------------------------------


@pytest.mark.db
async def test_a_cron_task_runs_in_the_loop_once_per_second(db: AsyncConnectionPool) -> None:
    ticks: list[float] = []

    async def fn() -> None:
        async with db.connection() as conn:
            cur = await conn.execute("SELECT period FROM pgenough.periodic WHERE name = 'sec'")
            row = await cur.fetchone()
            assert row is not None
            ticks.append(row[0])

    p = Periodic(db, replica="a")
    p.cron("* * * * * *", "sec", fn)
    runner = asyncio.create_task(p.run())
    await asyncio.sleep(2.6)
    p.stop()
    await asyncio.wait_for(runner, 5)
    # The first second is recorded without running (a first registration), then each runs.
    assert 1 <= len(ticks) <= 3, ticks
    assert ticks == sorted(set(ticks))
    assert all(b - a == 1 for a, b in itertools.pairwise(ticks))


@pytest.mark.db
@pytest.mark.slow
def test_three_replicas_run_a_one_second_task_about_ten_times_in_ten_seconds(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    _three_replicas(worker_env, "periodic", "--period", "1", "--name", "tick")
    with psycopg.connect(database_url) as conn:
        runs, periods, replicas = conn.execute(
            "SELECT count(*), count(DISTINCT period), count(DISTINCT replica) FROM ticks"
        ).fetchone()  # type: ignore[misc]
    assert runs == periods  # never twice in one period
    # The replicas started at slightly different times within those 10 s: 9 to 12 periods.
    assert 9 <= runs <= 12, runs
    assert replicas >= 1


@pytest.mark.db
@pytest.mark.slow
def test_three_replicas_run_an_every_second_cron_task_once_per_tick(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    _three_replicas(worker_env, "cron", "--expr", "* * * * * *", "--name", "cron")
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT period FROM ticks WHERE task = 'cron' ORDER BY period"
        ).fetchall()
        lag = conn.execute(
            "SELECT max(extract(epoch FROM at) - period) FROM ticks WHERE task = 'cron'"
        ).fetchone()
    ticks = [r[0] for r in rows]
    assert len(ticks) == len(set(ticks))  # never twice per tick
    # Each replica runs 10 s from its own start, the first tick after the first one only.
    assert 8 <= len(ticks) <= 12, ticks
    assert ticks[-1] - ticks[0] == len(ticks) - 1  # and no tick was lost while all were up
    assert lag is not None and 0 <= lag[0] < 2.0, lag  # each ran at its tick, give or take load


def _three_replicas(env: dict[str, str], mode: str, *args: str) -> None:
    """Three helper processes running ``mode`` for the same 10 s, to their end."""
    procs = [Proc(env, mode, "--seconds", "10", *args) for _ in range(3)]
    try:
        for proc in procs:
            proc.expect("ready")
        for proc in procs:
            proc.expect("done", timeout=60)
    finally:
        for proc in procs:
            proc.kill()


# -- what the dashboard and `pgenough status` read: list_periodic -------------------------------


async def periodic_info(db: AsyncConnectionPool, name: str) -> PeriodicInfo:
    async with db.connection() as conn:
        [found] = [p for p in await list_periodic(conn) if p.name == name]
    return found


@pytest.mark.db
async def test_list_periodic_counts_ticks_missed_and_records_the_last_run(
    db: AsyncConnectionPool,
) -> None:
    a, b = Periodic(db, replica="a"), Periodic(db, replica="b")
    # Five hours with no replica up, then one: the four ticks before the latest are dropped.
    await claim(db, a, hourly(), T - 5 * HOUR)  # first seen: recorded, not run
    assert (await periodic_info(db, "report")).last_run_at is None
    assert (await claim(db, b, hourly(), T + timedelta(minutes=20))).outcome == "run"
    info = await periodic_info(db, "report")
    assert (info.missed, info.last_run_by, info.schedule) == (4, "b", "cron 0 * * * * UTC")
    assert info.last_tick_at == T and info.last_run_at is not None
    # A tick skipped past its grace is missed too, and keeps the last run as it was.
    skipping = hourly("skipping", missed="skip")
    await claim(db, a, skipping, T - timedelta(minutes=30))
    await claim(db, a, skipping, T + timedelta(minutes=5))  # late: skipped
    skipped = await periodic_info(db, "skipping")
    assert (skipped.missed, skipped.last_run_at) == (1, None)
    # An interval counts by its periods.
    every = PeriodicTask("every", Interval(10), nothing)
    await claim(db, a, every, T)  # runs its current period
    await claim(db, a, every, T + timedelta(seconds=65))
    ran = await periodic_info(db, "every")
    assert (ran.missed, ran.last_run_by, ran.schedule) == (5, "a", "every 10.0s")


@pytest.mark.db
async def test_list_periodic_says_when_a_task_runs_next_and_whether_it_is_overdue(
    db: AsyncConnectionPool,
) -> None:
    """By the database's clock: a task claimed now is due at its next tick and not
    overdue; one whose ticks passed unclaimed (no replica runs it) is overdue by them."""
    every = PeriodicTask("every-minute", Interval(60), nothing)
    async with db.connection() as conn:
        cur = await conn.execute("SELECT now()")
        row = await cur.fetchone()
    assert row is not None
    now: datetime = row[0]
    await claim(db, Periodic(db, replica="a"), every, now)
    info = await periodic_info(db, "every-minute")
    assert info.next_run_at is not None
    assert now < info.next_run_at <= now + timedelta(seconds=60)
    assert info.overdue == 0
    async with db.connection() as conn:  # as if claimed 10 minutes ago, and never since
        await conn.execute(
            "UPDATE pgenough.periodic SET period = period - 10 WHERE name = 'every-minute'"
        )
    # Ten periods passed unclaimed; the latest counts once OVERDUE_SLACK seconds into it.
    assert (await periodic_info(db, "every-minute")).overdue in (9, 10)
