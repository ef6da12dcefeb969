"""``/search`` from a read replica (``PGENOUGH_API_READ_URL``): the cache's fence, the lag
bound, a replica that goes away; on a real primary and hot standby (``tests/helpers/standby``)
started once for the module, and on their own for the pure parts."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api.cache import ResponseCache
from pgenough_plans.api.replica import PRIMARY, PROBE_INTERVAL, REPLICA, Lag, lsn
from pgenough_plans.settings import PlanSettings
from tests.helpers.standby import StandbyPair, standby_pair
from tests.plan_service.api.helpers import Plan, add_plans, api_settings, events, serving, state

WAIT = 30.0  # seconds any awaited condition gets


async def until(condition: Callable[[], Any], what: str, timeout: float = WAIT) -> None:
    """Poll ``condition`` (sync or async) until it holds, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(0.02)


# The pure parts: positions, the fence, the lag.


def test_lsn_orders_as_pg_lsn_does() -> None:
    assert lsn("0/3000000") == 0x3000000
    assert lsn("1/0") > lsn("0/FFFFFFFF")
    assert lsn("16/B374D848") < lsn("16/B374D849") < lsn("17/0")


def test_a_replica_answer_is_stored_only_at_or_past_the_fence() -> None:
    cache: ResponseCache[bytes] = ResponseCache(4, 60.0)
    cache.set_listening(True, "listener")
    generation = cache.generation
    assert not cache.put("k", b"v", generation, replayed=100)  # fence not known yet
    assert cache.put("p", b"v", generation)  # the primary's answers need no fence
    cache.set_fence(generation, 200)
    assert not cache.put("k", b"old", generation, replayed=199)  # may predate the change
    assert cache.put("k", b"new", generation, replayed=200)
    cache.invalidate("plans_changed")
    cache.set_fence(generation, 50)  # a late fence of the invalidation before: ignored
    assert cache.fence is None
    assert not cache.put("k", b"v", cache.generation, replayed=10**9)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_idle_primary_is_no_lag_and_a_stuck_replica_grows_past_the_bound() -> None:
    clock = Clock()
    replica = Lag(max_lag=1.0, clock=clock)
    for _ in range(100):  # 25 idle seconds: the primary's position does not move
        replica.sample_primary(500)
        clock.now += PROBE_INTERVAL
    assert replica.lag_at(500) <= PROBE_INTERVAL  # caught up: no lag, however long idle
    replica.sample_primary(900)  # a write the replica has not replayed
    written = clock.now
    for _ in range(20):
        clock.now += PROBE_INTERVAL
        replica.sample_primary(900)
        assert replica.lag_at(500) >= clock.now - written  # never less than the truth
    assert replica.lag_at(500) > 1.0
    assert replica.lag_at(900) <= PROBE_INTERVAL
    # Behind every kept sample: at least the oldest one's age, a number (it answers).
    assert math.isfinite(replica.lag_at(100)) and replica.lag_at(100) >= clock.now - written


def test_the_lag_of_a_replica_far_past_the_bound_is_still_measured() -> None:
    """A 1 s bound, a replica stuck for 100 s while the primary writes on: its lag is known
    to the probe interval (the primary's positions are kept for LAG_HISTORY, not the bound),
    and an idle primary keeps one sample, not one per probe."""
    clock = Clock()
    replica = Lag(max_lag=1.0, clock=clock)
    for _ in range(400):  # 100 idle seconds
        replica.sample_primary(500)
        clock.now += PROBE_INTERVAL
    assert len(replica._samples) == 1
    last_idle = clock.now - PROBE_INTERVAL  # when 500 was last the primary's position
    written_at = {}
    for position in range(501, 901):  # 100 s of writes
        written_at[position] = clock.now
        replica.sample_primary(position)
        clock.now += PROBE_INTERVAL
    assert replica.lag_at(500) == pytest.approx(clock.now - last_idle)  # 100.25 s
    assert replica.lag_at(700) == pytest.approx(clock.now - written_at[700])
    assert Lag(max_lag=1.0, clock=clock).lag_at(10) == math.inf  # nothing sampled yet


# On a real primary and standby.


@pytest.fixture(scope="module")
def pair() -> Iterator[StandbyPair]:
    with standby_pair() as started:
        yield started


@pytest.fixture
async def fresh(pair: StandbyPair, primary: AsyncConnectionPool) -> StandbyPair:
    """No plans, on both servers; replay running."""
    pair.resume_replay()
    async with primary.connection() as conn:
        await conn.execute("DELETE FROM plans.plans")
    pair.wait_replayed()
    return pair


def settings(pair: StandbyPair, **overrides: Any) -> PlanSettings:
    """The API on the pair's primary, ``/search`` on its standby, the cache on."""
    values: dict[str, Any] = {"api_read_url": pair.standby_url, "api_cache_ttl": 60.0}
    values.update(overrides)
    return api_settings(pair.primary_url, **values)


PLAN_A = Plan("a", "2021-06-01T10:00:00Z", "2021-06-01T12:00:00Z")
PLAN_B = Plan("b", "2021-06-02T10:00:00Z", "2021-06-02T12:00:00Z")
PAGE = "/search?starts_at=2021-06-01&ends_at=2021-07-01&limit=10"


def ids(response: httpx.Response) -> list[str]:
    return [e["id"] for e in events(response)]


@pytest.mark.slow
async def test_a_page_the_replica_has_not_caught_up_on_is_never_cached(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    await add_plans(primary, PLAN_A)
    fresh.wait_replayed()
    async with serving(settings(fresh, api_max_replica_lag=60.0)) as (app, client):
        api = state(app)
        assert api.replicas is not None and api.replicas.reading == REPLICA
        assert ids(await client.get(PAGE)) == [PLAN_A.id]
        assert len(api.cache) == 1  # read on the replica, past the listener's fence

        fresh.pause_replay()
        seen = api.cache.invalidations
        await add_plans(primary, PLAN_B, notify=True)
        await asyncio.wait_for(api.cache.wait_invalidations(seen + 1), WAIT)
        await until(lambda: api.cache.fence is not None, "the fence is read")
        # Within the lag bound, the replica answers as of before PLAN_B: that answer must
        # not be kept, or it would hide PLAN_B for the TTL once the replica has it.
        assert ids(await client.get(PAGE)) == [PLAN_A.id]
        assert api.replicas.reading == REPLICA
        assert len(api.cache) == 0

        fresh.resume_replay()
        fresh.wait_replayed()
        assert ids(await client.get(PAGE)) == [PLAN_A.id, PLAN_B.id]
        assert len(api.cache) == 1
        assert ids(await client.get(PAGE)) == [PLAN_A.id, PLAN_B.id]  # from the cache


@pytest.mark.slow
async def test_past_the_lag_bound_searches_read_the_primary(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    async with serving(settings(fresh, api_max_replica_lag=1.0, api_cache_ttl=0.0)) as (
        app,
        client,
    ):
        api = state(app)
        assert api.replicas is not None
        fresh.pause_replay()
        await add_plans(primary, PLAN_A)
        replica = api.replicas
        await until(lambda: replica.reading == PRIMARY, "the lag passes the bound")
        assert ids(await client.get(PAGE)) == [PLAN_A.id]  # fresh: read on the primary

        # Well past the bound (the primary writes on), the replica answers: its lag is a
        # number, not null (it was while the primary's positions were kept for the bound only).
        async def far_behind() -> bool:
            await add_plans(primary, Plan(f"w{time.monotonic_ns()}", "2030-01-01T00:00:00Z", None))
            return replica.lag > 4.0

        await until(far_behind, "the lag passes 4 s")
        ready = (await client.get("/health/ready")).json()["data"]
        assert ready["status"] == "ready"
        assert ready["replica"]["reading"] == PRIMARY
        assert ready["replica"]["lag_seconds"] > 4.0
        assert ready["replica"]["replicas"][0]["up"] is True
        label = fresh.standby_label()
        assert ready["replica"]["replicas"][0]["replica"] == label
        lag = next(
            float(line.split()[1])
            for line in (await client.get("/metrics")).text.splitlines()
            if line.startswith(f'pgenough_api_replica_lag_seconds{{replica="{label}"}} ')
        )
        assert lag > 1.0

        fresh.resume_replay()
        await until(lambda: replica.reading == REPLICA, "the replica catches up")
        assert ids(await client.get(PAGE)) == [PLAN_A.id]


@pytest.mark.slow
async def test_a_stopped_replica_is_read_around_then_read_again(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    async with serving(settings(fresh)) as (app, client):
        api = state(app)
        replica = api.replicas
        assert replica is not None and replica.reading == REPLICA
        assert ids(await client.get(PAGE)) == []
        fresh.stop_standby()
        try:
            seen = api.cache.invalidations
            await add_plans(primary, PLAN_A, notify=True)
            await asyncio.wait_for(api.cache.wait_invalidations(seen + 1), WAIT)
            # The first search after may still try the replica: it falls back, never a 500.
            assert ids(await client.get(PAGE)) == [PLAN_A.id]
            await until(lambda: replica.reading == PRIMARY, "the replica is seen gone")
            ready = (await client.get("/health/ready")).json()["data"]
            label = fresh.standby_label()
            assert ready["replica"] == {
                "reading": PRIMARY,
                "lag_seconds": None,
                "replicas": [{"replica": label, "up": False, "within": False, "lag_seconds": None}],
            }
            metrics = (await client.get("/metrics")).text
            assert f'pgenough_api_replica_lag_seconds{{replica="{label}"}} +Inf' in metrics
            assert ids(await client.get(PAGE)) == [PLAN_A.id]
        finally:
            fresh.start_standby()
        await until(lambda: replica.reading == REPLICA, "the replica is read again")
        await add_plans(primary, PLAN_B, notify=True)
        fresh.wait_replayed()
        await until(
            lambda: _ids_of(client, [PLAN_A.id, PLAN_B.id]), "the replica answers with PLAN_B"
        )
        assert replica.reading == REPLICA


async def _ids_of(client: httpx.AsyncClient, expected: list[str]) -> bool:
    return ids(await client.get(PAGE)) == expected


def _sleeping_searches(pair: StandbyPair) -> int:
    """Searches asleep in ``api_search_delay`` on the standby."""
    with psycopg.connect(pair.standby_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE state = 'active' AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.slow
async def test_a_frozen_replica_holds_no_search_and_the_api_stays_ready(
    fresh: StandbyPair, primary: AsyncConnectionPool
) -> None:
    """Every process of the standby stopped (SIGSTOP, sockets open) with six searches asleep on
    it and two clients searching on: the six are cut at the API's deadline (the search timeout
    + 1 s) and answered by the primary while the standby is still frozen; every search of the
    clients is answered too, /health/ready stays ready and says the replica is away; continued,
    the replica is read again. (Before the deadline every search on it waited for as long as
    the freeze, since neither the server's statement timeout nor TCP keepalives can fire.)"""
    await add_plans(primary, PLAN_A)
    fresh.wait_replayed()
    overrides = {"api_cache_ttl": 0.0, "api_search_delay": 1.0, "api_search_timeout": 2.0}
    async with serving(settings(fresh, **overrides)) as (app, client):
        api = state(app)
        replica = api.replicas
        assert replica is not None and replica.reading == REPLICA
        assert api.config.read_deadline == 3.0

        async def timed_search() -> tuple[int, float]:
            started = time.monotonic()
            response = await client.get(PAGE)
            if response.status_code == 200:
                assert ids(response) == [PLAN_A.id]
            return response.status_code, time.monotonic() - started

        in_flight = [asyncio.create_task(timed_search()) for _ in range(6)]
        await until(lambda: _sleeping_searches(fresh) >= 6, "six searches asleep on the standby")
        answered: list[tuple[int, float]] = []
        ready: list[dict[str, Any]] = []
        with fresh.frozen():
            done = asyncio.Event()

            async def searching() -> None:
                while not done.is_set():
                    answered.append(await timed_search())

            clients = [asyncio.create_task(searching()) for _ in range(2)]
            # Answered while the standby is still frozen: well before the 30 s allowed.
            results = await asyncio.wait_for(asyncio.gather(*in_flight), WAIT)
            await until(lambda: replica.reading == PRIMARY, "the frozen replica passed over")
            for _ in range(3):
                response = await client.get("/health/ready")
                assert response.status_code == 200, response.text
                ready.append(response.json()["data"])
            await until(lambda: len(answered) >= 6, "the clients' searches answered")
            done.set()
            await asyncio.wait_for(asyncio.gather(*clients), WAIT)
        assert [status for status, _ in results] == [200] * 6
        # Cut at the deadline, then read on the primary (1 s asleep there too).
        assert all(seconds < WAIT for _, seconds in results)
        assert {status for status, _ in answered} == {200}
        for data in ready:
            assert data["status"] == "ready"
            assert data["replica"]["reading"] == PRIMARY
            assert data["replica"]["replicas"][0]["up"] is False

        await until(lambda: replica.reading == REPLICA, "the replica read again once continued")
        reads = REGISTRY.get_sample_value(
            "pgenough_api_replica_reads_total",
            {"reader": "search", "target": "replica", "replica": fresh.standby_label()},
        )
        status, _ = await timed_search()
        assert status == 200
        assert (
            REGISTRY.get_sample_value(
                "pgenough_api_replica_reads_total",
                {"reader": "search", "target": "replica", "replica": fresh.standby_label()},
            )
            == (reads or 0) + 1
        )
