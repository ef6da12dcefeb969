"""Each long-lived loop comes back after its connection is lost, through the one reconnect
policy (``core.retry.Reconnect``): the claim loop after its backend is terminated, the
periodic scheduler after the database was unreachable, a subscription whose first connect
fails. (The listener's return is in test_worker_run.py, pub/sub's in test_pubsub.py, the
API cache's in tests/plan_service/api/test_cache.py, the dashboard's in
tests/plan_service/ui/test_live.py.) Every
wait is on an event or a polled condition with a deadline."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Backoff, Job, Message, Periodic, Worker, WorkerConfig, enqueue, subscribe
from pgenough.core.db import open_pool
from pgenough.core.service import Services
from pgenough.core.worker._listener import Notifier
from tests.helpers.netproxy import Proxy
from tests.helpers.procs import wait_until

pytestmark = pytest.mark.db
WAIT = 30.0


def warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and text in r.getMessage()
    ]


async def test_the_claim_loop_comes_back_after_its_backend_is_terminated(
    db: AsyncConnectionPool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgenough.core.worker")
    pool = await open_pool(database_url, max_size=3, name="claim-reconnect-test")
    done: list[int] = []
    ran = asyncio.Event()

    async def handler(job: Job) -> None:
        done.append(job.id)
        ran.set()

    worker = Worker(pool, {"noop": handler}, WorkerConfig(maintenance=None), name="claimer")
    runner = asyncio.create_task(worker.run())
    try:
        await worker.wait_listening()
        async with db.connection() as conn:
            first = await enqueue(conn, "noop", {})
        await asyncio.wait_for(ran.wait(), WAIT)
        ran.clear()
        # Every session of the worker's pool, the one its claim loop holds among them (the
        # listener has a session of its own, not in the pool).
        async with db.connection() as conn:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'claim-reconnect-test' AND datname = current_database()"
            )
            second = await enqueue(conn, "noop", {})  # its notification wakes the claim loop
        await asyncio.wait_for(ran.wait(), WAIT)
        assert done == [first, second]
        [line] = warnings(caplog, "claimer: claim failed")
        assert "attempt 1, retry in" in line
    finally:
        worker.stop()
        await asyncio.wait_for(runner, WAIT)
        await pool.close()


async def test_periodic_claims_again_once_the_database_is_reachable(
    db: AsyncConnectionPool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``db``: a migrated database with no periodic rows (first on an xdist worker, the
    database would not be migrated yet)."""
    caplog.set_level(logging.WARNING, logger="pgenough.core.periodic")
    proxy = Proxy(database_url)
    await proxy.start()
    pool = await open_pool(proxy.url, max_size=2, timeout=0.5, name="periodic-reconnect-test")
    runs = 0
    ran = asyncio.Event()

    async def beat() -> None:
        nonlocal runs
        runs += 1
        ran.set()

    periodic = Periodic(pool, replica="reconnecting")
    periodic.every(0.2, "reconnect-beat", beat)
    runner = asyncio.create_task(periodic.run())
    try:
        await asyncio.wait_for(ran.wait(), WAIT)
        await proxy.cut()

        async def failed_twice() -> bool:
            return len(warnings(caplog, "periodic task reconnect-beat: claim")) >= 2

        await wait_until(failed_twice, WAIT, "two failed claims")
        ran.clear()
        before = runs
        await proxy.start()
        await asyncio.wait_for(ran.wait(), WAIT)
        assert runs > before
        lines = warnings(caplog, "periodic task reconnect-beat: claim")
        assert "attempt 1, retry in" in lines[0] and "attempt 2, retry in" in lines[1]
    finally:
        periodic.stop()
        await asyncio.wait_for(runner, WAIT)
        await pool.close()
        await proxy.cut()


async def test_a_subscription_retries_its_first_connect_when_asked(
    db: AsyncConnectionPool, database_url: str
) -> None:
    proxy = Proxy(database_url)  # not started: every connect is refused
    lost: list[str] = []
    down = asyncio.Event()

    def on_lost(reason: str) -> None:
        lost.append(reason)
        down.set()

    async def listen() -> str:
        async with subscribe(
            proxy.url, "first-connect", on_lost=on_lost, retry_connect=Backoff(0.05, 0.2)
        ) as sub:
            async for item in sub:
                if isinstance(item, Message):
                    return item.payload
        return ""

    listener = asyncio.create_task(listen())
    try:
        await asyncio.wait_for(down.wait(), WAIT)
        await proxy.start()

        async def listening() -> bool:
            async with db.connection() as conn:
                cur = await conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name = 'pgenough-subscriber' AND query LIKE 'LISTEN%'"
                    " AND datname = current_database()"
                )
                row = await cur.fetchone()
                return row is not None and row[0] > 0

        await wait_until(listening, WAIT, "the subscription's LISTEN")
        async with db.connection() as conn:
            await conn.execute("SELECT pg_notify('first-connect', 'hello')")
        assert await asyncio.wait_for(listener, WAIT) == "hello"
        assert len(lost) == 1  # once, when found down; not once per retry
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        await proxy.cut()


async def test_without_retry_connect_the_first_connect_fails_at_once(database_url: str) -> None:
    proxy = Proxy(database_url)  # not started
    with pytest.raises(psycopg.OperationalError):
        async with subscribe(proxy.url, "nowhere"):
            pass


async def test_a_worker_listener_started_before_its_database_listens_once_it_is_up(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgenough.core")
    proxy = Proxy(database_url)  # not started: the database is unreachable
    notifier = Notifier(proxy.url, name="early-listener", check_interval=1.0)
    wake = asyncio.Event()
    notifier.register("default", wake.set)
    async with Services() as services:
        assert await services.start(notifier) is False  # not ready, and not waited for
        try:

            async def refused() -> bool:
                said = "subscriber to pgenough_jobs, pgenough_cancel: connect failed"
                return bool(warnings(caplog, said))

            await wait_until(refused, WAIT, "a refused first connect")
            assert len(warnings(caplog, "early-listener: listener lost")) == 1
            await proxy.start()
            await asyncio.wait_for(notifier.listening.wait(), WAIT)
            assert wake.is_set()  # woken once on connect, for what came meanwhile
        finally:
            await proxy.cut()
