"""The first-page cache: bounded, short-lived, never stale past an invalidation; and, end to
end, a cached range shows a newly processed snapshot without waiting for its TTL."""

from __future__ import annotations

import asyncio

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api.cache import ResponseCache
from pgenough_plans.sim.server import SimServer
from tests.helpers.netproxy import Proxy
from tests.plan_service.api.helpers import Plan, add_plans, api_settings, events, serving, state
from tests.plan_service.ingest.pipeline import ingest

WAIT = 30.0  # seconds any awaited event gets


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def listening_cache(size: int = 3, ttl: float = 5.0) -> tuple[ResponseCache, Clock]:
    clock = Clock()
    cache = ResponseCache(size, ttl, clock=clock)
    cache.set_listening(True, "listener")
    return cache, clock


def test_entries_expire_after_their_ttl() -> None:
    cache, clock = listening_cache(ttl=5.0)
    assert cache.put("k", b"v", cache.generation)
    clock.now += 4.9
    assert cache.get("k") == b"v"
    clock.now += 0.2
    assert cache.get("k") is None
    assert len(cache) == 0


def test_the_least_recently_used_entry_goes_first() -> None:
    cache, _ = listening_cache(size=3)
    for key in "abc":
        cache.put(key, key.encode(), cache.generation)
    assert cache.get("a") == b"a"  # a is now the most recent
    cache.put("d", b"d", cache.generation)
    assert len(cache) == 3
    assert cache.get("b") is None
    assert [cache.get(k) for k in "acd"] == [b"a", b"c", b"d"]


def test_an_answer_read_before_an_invalidation_is_not_stored() -> None:
    cache, _ = listening_cache()
    generation = cache.generation  # the search starts...
    cache.invalidate("plans_changed")  # ...new plans land meanwhile...
    assert not cache.put("k", b"old", generation)  # ...its answer may predate them
    assert cache.get("k") is None
    assert cache.put("k", b"new", cache.generation)


def test_the_cache_is_bypassed_while_its_listener_is_down() -> None:
    cache, _ = listening_cache()
    cache.put("k", b"v", cache.generation)
    cache.set_listening(False, "listener")
    assert cache.get("k") is None
    assert not cache.put("k", b"v", cache.generation)
    cache.set_listening(True, "listener")
    assert cache.get("k") is None  # it starts empty again


def test_size_or_ttl_zero_disables_it() -> None:
    for size, ttl in ((0, 5.0), (10, 0.0)):
        cache = ResponseCache(size, ttl)
        cache.set_listening(True, "listener")
        assert not cache.put("k", b"v", cache.generation)
        assert cache.get("k") is None


async def test_waiting_for_invalidations() -> None:
    cache, _ = listening_cache()
    target = cache.invalidations + 2
    waiter = asyncio.create_task(cache.wait_invalidations(target))
    cache.invalidate("plans_changed")
    await asyncio.sleep(0)
    assert not waiter.done()
    cache.invalidate("gap")
    await asyncio.wait_for(waiter, WAIT)


@pytest.mark.db
async def test_first_pages_are_cached_and_later_pages_are_not(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    async with serving(api_settings(database_url, api_cache_ttl=3600.0)) as (app, client):
        cache = state(app).cache
        first = await client.get("/search", params={"limit": "10"})
        assert len(cache) == 1
        # Written without announcing it: the cached first page does not see it (yet)...
        await add_plans(db, Plan("p2", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
        again = await client.get("/search", params={"limit": "10"})
        assert again.content == first.content
        # ...pages after the first always ask PostgreSQL, and so do other keys.
        assert len(events(await client.get("/search", params={"offset": "1"}))) == 1
        assert len(events(await client.get("/search", params={"limit": "11"}))) == 2
        assert len(cache) == 2
        # The same bounds written differently are the same key.
        same = await client.get(
            "/search", params={"limit": "10", "starts_at": "1970-01-01T02:00:00+02:00"}
        )
        other = await client.get("/search", params={"limit": "10", "starts_at": "1970-01-01"})
        assert same.content == other.content
        assert len(cache) == 3


@pytest.mark.db
async def test_a_cached_range_shows_a_new_snapshot_without_waiting_for_the_ttl(
    db: AsyncConnectionPool, database_url: str
) -> None:
    params = {"limit": "500"}
    with SimServer(plans=300, seed=7) as sim:
        await ingest(db, sim.url + "?version=1")
        settings = api_settings(database_url, api_cache_ttl=3600.0)
        async with serving(settings) as (app, client):
            cache = state(app).cache
            before = await client.get("/search", params=params)
            assert len(events(before)) > 100
            assert (await client.get("/search", params=params)).content == before.content
            assert len(cache) == 1
            seen = cache.invalidations
            await ingest(db, sim.url + "?version=2")  # publishes plans_changed when processed
            await asyncio.wait_for(cache.wait_invalidations(seen + 1), WAIT)
            after = await client.get("/search", params=params)
        # The truth, from an app without a cache:
        async with serving(api_settings(database_url)) as (_, uncached):
            truth = await uncached.get("/search", params=params)
    assert after.content != before.content
    assert after.content == truth.content
    old = {e["id"]: e for e in events(before)}
    changed = [e for e in events(after) if e["id"] in old and e != old[e["id"]]]
    assert changed, "version 2 should change titles, prices or times of plans in range"


@pytest.mark.db
async def test_a_gap_in_the_listener_empties_the_cache(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    async with serving(api_settings(database_url, api_cache_ttl=3600.0)) as (app, client):
        cache = state(app).cache
        await client.get("/search")
        assert len(cache) == 1
        seen = cache.invalidations
        pid = cache.listener_pid
        assert pid is not None
        async with db.connection() as conn:
            cur = await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert await cur.fetchone() == (True,)
        await asyncio.wait_for(cache.wait_invalidations(seen + 1), WAIT)
        assert len(cache) == 0
        # Announced changes are seen again once it listens again, on a new session.
        await asyncio.wait_for(_until_listening(cache), WAIT)
        assert cache.listener_pid not in (None, pid)
        seen = cache.invalidations
        await add_plans(
            db, Plan("p2", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"), notify=True
        )
        await asyncio.wait_for(cache.wait_invalidations(seen + 1), WAIT)
        assert len(events(await client.get("/search"))) == 2


async def _until_listening(cache: ResponseCache) -> None:
    while not cache.listening:
        await cache.wait_invalidations(cache.invalidations + 1)


@pytest.mark.db
async def test_cache_metrics_count_hits_and_misses(
    db: AsyncConnectionPool, database_url: str
) -> None:
    async with serving(api_settings(database_url, api_cache_ttl=3600.0)) as (_, client):

        async def counter(name: str) -> float:
            text = (await client.get("/metrics")).text
            [line] = [ln for ln in text.splitlines() if ln.startswith(name + " ")]
            return float(line.split()[1])

        hits, misses = (
            await counter("pgenough_api_cache_hits_total"),
            await counter("pgenough_api_cache_misses_total"),
        )
        for _ in range(3):
            await client.get("/search", params={"limit": "7"})
        assert await counter("pgenough_api_cache_misses_total") == misses + 1
        assert await counter("pgenough_api_cache_hits_total") == hits + 2


@pytest.mark.db
async def test_the_cache_is_bypassed_while_the_api_is_cut_off_from_postgresql(
    db: AsyncConnectionPool, database_url: str
) -> None:
    """docs/plan-service/api.md: the cache "is bypassed from the moment its listener finds its
    connection lost until it listens again". Cut by a real TCP proxy (the listener's
    reconnects fail all the while), a cached first page must not be served: not during the
    cut (the search fails, 503) and not once the pool is back and the listener not yet (it
    backs off), when the plans changed underneath without a message it could have heard."""
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    proxy = Proxy(database_url)
    async with proxy.running():
        settings = api_settings(proxy.url, api_cache_ttl=3600.0, api_pool_timeout=0.5)
        async with serving(settings) as (app, client):
            cache = state(app).cache
            assert len(events(await client.get("/search"))) == 1
            assert len(cache) == 1
            seen = cache.invalidations
            await proxy.cut()
            await asyncio.wait_for(cache.wait_invalidations(seen + 1), WAIT)
            assert not cache.listening
            # Changed underneath, on a connection that does not go through the proxy.
            await add_plans(
                db, Plan("p2", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"), notify=True
            )
            during = await client.get("/search")
            assert during.status_code == 503, during.text  # not the stale page
            await proxy.start()
            after = await client.get("/search")
            assert len(events(after)) == 2  # PostgreSQL's answer, not the cached one
