"""Ingestion yields to the read path: the API's pressure, published in PostgreSQL, makes the
fetch and process workers pause between chunks; no pressure, no pause; a pause is bounded;
a killed API's pressure expires (it must not stall ingestion)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import WorkerConfig
from pgenough_plans.ingest import pacing
from pgenough_plans.ingest.fetch import FetchConfig
from pgenough_plans.ingest.pacing import NO_PACING, Pacer, PacingConfig
from pgenough_plans.ingest.process import pacer, process_worker
from pgenough_plans.sim.server import SimServer
from tests.helpers.procs import Proc, wait_until
from tests.plan_service.api.helpers import api_settings, free_port, serving
from tests.plan_service.ingest.pipeline import fetch

pytestmark = pytest.mark.db

PAUSE = 0.05
PACED = PacingConfig(max_pause=PAUSE)


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(plans=1500, seed=4) as server:
        yield server


async def pressure_now(db: AsyncConnectionPool) -> float:
    async with db.connection() as conn:
        return await pacing.current_pressure(conn)


@contextlib.asynccontextmanager
async def pressed(
    db: AsyncConnectionPool, pressure: float, ttl: float = 60.0
) -> AsyncIterator[None]:
    async with db.connection() as conn:
        await pacing.publish(conn, "test", pressure, ttl)
    try:
        yield
    finally:
        async with db.connection() as conn:
            await pacing.withdraw(conn, "test")


async def test_no_pressure_no_pause(db: AsyncConnectionPool) -> None:
    p = Pacer(PACED)
    async with db.connection() as conn:
        assert await p.between_chunks(conn) == 0.0
        assert await p.between_chunks(conn) == 0.0
    assert (p.chunks, p.pauses, p.paused_seconds) == (2, 0, 0.0)


async def test_a_pause_is_proportional_and_bounded(db: AsyncConnectionPool) -> None:
    p = Pacer(PACED)
    async with pressed(db, 0.5), db.connection() as conn:
        assert await p.between_chunks(conn) == pytest.approx(PAUSE / 2)
    async with pressed(db, 1.0), db.connection() as conn:
        # Full pressure (publish clamps anything above) pauses max_pause, never longer:
        # ingestion always progresses.
        await pacing.publish(conn, "test", 7.0, 60.0)
        assert await pacing.current_pressure(conn) == 1.0
        assert await p.between_chunks(conn) == PAUSE
    assert p.pauses == 2
    async with pressed(db, 1.0), db.connection() as conn:
        assert await Pacer(NO_PACING).between_chunks(conn) == 0.0  # pacing off


async def test_the_highest_live_report_counts_and_an_expired_one_does_not(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        await pacing.publish(conn, "a", 0.25, 60.0)
        await pacing.publish(conn, "b", 0.75, 0.2)
        assert await pacing.current_pressure(conn) == 0.75
        await asyncio.sleep(0.4)
        assert await pacing.current_pressure(conn) == 0.25
        await pacing.withdraw(conn, "a")
        await pacing.withdraw(conn, "b")
        assert await pacing.current_pressure(conn) == 0.0


async def test_a_fetch_pauses_between_batches_only_under_pressure(
    db: AsyncConnectionPool, sim: SimServer
) -> None:
    config = FetchConfig(copy_batch=100, chunk_pages=16, pacing=PACED)
    calm = await fetch(db, sim.url + "?version=1", "calm", config)
    assert calm.status == "STAGED" and calm.paused_seconds == 0.0
    async with pressed(db, 1.0):
        paced = await fetch(db, sim.url + "?version=1", "paced", config)
    assert paced.status == "STAGED"
    assert paced.plans_staged == calm.plans_staged  # slowed, never stopped
    # A full pause after each COPY batch (a batch is whatever the network chunks held).
    assert paced.paused_seconds >= PAUSE
    assert paced.paused_seconds / PAUSE == pytest.approx(round(paced.paused_seconds / PAUSE))


async def test_a_process_worker_pauses_between_chunks_only_under_pressure(
    db: AsyncConnectionPool, sim: SimServer
) -> None:
    config = WorkerConfig(concurrency=1, batch_size=1, maintenance=None)
    fetched = FetchConfig(chunk_pages=2)
    await fetch(db, sim.url + "?version=1", "calm", fetched)
    stats = await process_worker(db, config, PACED).run(until_idle=True)
    assert stats.completed > 1 and pacer().pauses == 0
    await fetch(db, sim.url + "?version=2", "calm", fetched)
    async with pressed(db, 1.0):
        stats = await process_worker(db, config, PACED).run(until_idle=True)
    assert stats.completed > 1
    assert pacer().pauses == pacer().chunks == stats.completed
    async with db.connection() as conn:
        cur = await conn.execute("SELECT status::text FROM plans.runs ORDER BY id")
        assert [r[0] for r in await cur.fetchall()] == ["PROCESSED", "PROCESSED"]


async def test_the_api_publishes_its_pressure_and_a_fetch_yields_to_it(
    db: AsyncConnectionPool, database_url: str, sim: SimServer
) -> None:
    settings = api_settings(
        database_url,
        api_search_delay=0.3,
        api_max_concurrent_searches=1,
        pool_max_size=3,
        api_pressure_interval=0.05,
    )
    async with serving(settings) as (_, client):
        assert await pressure_now(db) == 0.0  # an idle API reports nothing

        fetched = asyncio.Event()

        async def search() -> None:
            # Until the fetch has ended: three searches alone may be over before a loaded
            # machine starts the fetch, which would then see no pressure at all.
            while not fetched.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    await client.get("/search?limit=1")
                await asyncio.sleep(0.02)  # a refusal is immediate: no busy loop

        # One search holds the only slot, the next ones are refused: full pressure.
        load = [asyncio.create_task(search()) for _ in range(3)]
        await wait_until(lambda: _pressed(db), timeout=5, what="pressure published")
        assert await pressure_now(db) == 1.0
        try:
            result = await fetch(
                db, sim.url + "?version=1", config=FetchConfig(copy_batch=100, pacing=PACED)
            )
        finally:
            fetched.set()
            await asyncio.gather(*load)
        assert result.paused_seconds > 0
    assert await pressure_now(db) == 0.0  # withdrawn at shutdown


def hammer(url: str, stop: threading.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError, urllib.error.URLError):
            urllib.request.urlopen(url, timeout=5).read()


@pytest.mark.slow
async def test_a_killed_apis_pressure_expires(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    port = free_port()
    env = dict(
        worker_env,
        PGENOUGH_API_SEARCH_DELAY="0.3",
        PGENOUGH_API_MAX_CONCURRENT_SEARCHES="1",
        PGENOUGH_POOL_MAX_SIZE="3",
        PGENOUGH_API_PRESSURE_INTERVAL="0.1",
        PGENOUGH_UI_ENABLED="0",
    )
    api = Proc.plans(env, "api", "--host", "127.0.0.1", "--port", str(port))
    stop = threading.Event()
    threads = [
        threading.Thread(target=hammer, args=(f"http://127.0.0.1:{port}/search?limit=1", stop))
        for _ in range(3)
    ]
    try:
        await wait_until(lambda: _ready(port), timeout=30, what="the API ready")
        for t in threads:
            t.start()
        await wait_until(lambda: _pressed(db), timeout=10, what="pressure published")
        api.popen.send_signal(signal.SIGKILL)  # nobody withdraws its row
        api.popen.wait(10)
        killed = time.monotonic()
        await wait_until(lambda: _no_pressure(db), timeout=5, what="pressure expired")
        # The row is still there (nobody cleaned up); it stopped counting when it expired,
        # within its TTL (10 intervals: 1 s).
        assert time.monotonic() - killed < 3
        async with db.connection() as conn:
            cur = await conn.execute("SELECT count(*) FROM plans.read_pressure")
            assert (await cur.fetchone()) == (1,)
        async with db.connection() as conn:
            assert await Pacer(PACED).between_chunks(conn) == 0.0
    finally:
        stop.set()
        if api.popen.poll() is None:
            api.popen.kill()
        for t in threads:
            if t.is_alive():
                t.join(10)


@pytest.mark.slow
def test_ingest_nice_lowers_a_workers_priority(worker_env: dict[str, str]) -> None:
    # A fetch worker in its loop (its one provider refuses connections): alive until stopped.
    env = dict(worker_env, PGENOUGH_INGEST_NICE="7", PGENOUGH_PROVIDER_MAX_ATTEMPTS="1")
    worker = Proc.plans(
        env, "worker", "fetch", "--provider", f"down=http://127.0.0.1:{free_port()}/"
    )
    try:
        worker.expect(lambda line: "FAILED" in line or "fetching" in line)
        assert os.getpriority(os.PRIO_PROCESS, worker.popen.pid) == os.nice(0) + 7
    finally:
        worker.popen.send_signal(signal.SIGTERM)
        assert worker.popen.wait(30) == 0


async def _no_pressure(db: AsyncConnectionPool) -> bool:
    return await pressure_now(db) == 0.0


async def _pressed(db: AsyncConnectionPool) -> bool:
    return await pressure_now(db) > 0


async def _ready(port: int) -> bool:
    def get() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    return await asyncio.to_thread(get)
