"""Pausing a queue across the fleet (``pauses.py``): the claim itself refuses a paused queue,
whatever worker asks and whether or not it listens; resuming wakes the idle workers at once;
enqueueing, the other queues and the jobs already running go on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Job, Worker, WorkerConfig, enqueue
from pgenough.core.admin import (
    get_job,
    pause_queue,
    paused_queues,
    queue_stats,
    refresh_queue_metrics,
    resume_queue,
)
from tests.helpers.procs import wait_until

pytestmark = pytest.mark.db

CONFIG = WorkerConfig(queue="mail", maintenance=None)


async def test_a_paused_queue_is_not_claimed_until_it_is_resumed(db: AsyncConnectionPool) -> None:
    done: list[int] = []

    async def send(job: Job) -> None:
        done.append(job.id)

    async with db.connection() as conn:
        assert await pause_queue(conn, "mail", reason="provider down") is True
        ids = [await enqueue(conn, "send", {"n": n}, queue="mail") for n in range(3)]
        other = await enqueue(conn, "send", {"n": 9}, queue="other")
    # A worker that starts while the queue is paused claims nothing of it: it finds the
    # queue idle (nothing claimable) and returns; the other queue is worked as usual.
    stats = await Worker(
        db, {"send": send}, CONFIG, WorkerConfig(queue="other", maintenance=None)
    ).run(until_idle=True)
    assert stats.claimed == 1 and done == [other]
    async with db.connection() as conn:
        assert [(await get_job(conn, i)).state for i in ids] == ["ready"] * 3  # type: ignore[union-attr]
        assert await resume_queue(conn, "mail") is True
    stats = await Worker(db, {"send": send}, CONFIG).run(until_idle=True)
    assert stats.completed == 3 and sorted(done[1:]) == sorted(ids)


async def test_pausing_twice_keeps_the_first_pause_and_resuming_an_unpaused_queue_is_no_error(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        assert await pause_queue(conn, "mail", reason="first") is True
        assert await pause_queue(conn, "mail", reason="second") is False
        (pause,) = await paused_queues(conn)
        assert (pause.queue, pause.reason) == ("mail", "first")
        assert await resume_queue(conn, "mail") is True
        assert await resume_queue(conn, "mail") is False
        assert await paused_queues(conn) == []
        with pytest.raises(ValueError, match="queue name"):
            await pause_queue(conn, "")


async def test_a_pause_commits_with_the_callers_transaction_and_works_on_a_sync_connection(
    db: AsyncConnectionPool, database_url: str
) -> None:
    with psycopg.connect(database_url) as conn:
        assert pause_queue(conn, "mail") is True
        conn.rollback()
        assert paused_queues(conn) == []
        pause_queue(conn, "mail", reason="deploy")
    async with db.connection() as conn:
        assert [p.reason for p in await paused_queues(conn)] == ["deploy"]


async def test_stats_and_metrics_show_a_paused_queue_even_with_no_jobs(
    db: AsyncConnectionPool,
) -> None:
    async with db.connection() as conn:
        await enqueue(conn, "send", {}, queue="other")
        await pause_queue(conn, "mail")
        stats = {s.queue: s for s in await queue_stats(conn)}
        assert stats["mail"].paused and stats["mail"].ready == 0
        assert not stats["other"].paused and stats["other"].ready == 1
        await refresh_queue_metrics(conn)
        assert REGISTRY.get_sample_value("pgenough_queue_paused", {"queue": "mail"}) == 1
        assert REGISTRY.get_sample_value("pgenough_queue_paused", {"queue": "other"}) == 0
        await resume_queue(conn, "mail")
        await refresh_queue_metrics(conn)
    assert REGISTRY.get_sample_value("pgenough_queue_paused", {"queue": "mail"}) == 0


async def _claimed_since(pool: AsyncConnectionPool, since: datetime, *, full: bool) -> bool:
    """A claim statement that started after ``since`` has run to its end: the claim loop's
    held session is idle, its last statement a claim (which reads the pauses); with ``full``,
    the scan from the start of the claim index, after which a loop that found nothing waits
    for a notification or its poll (the claim past its position is followed by one)."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'idle' AND query_start > %s"
            " AND query LIKE '%%queue_pauses%%' AND query LIKE '%%SKIP LOCKED%%'"
            " AND NOT (%s AND query LIKE '%%(run_at, id) >%%')",
            [since, full],
        )
        row = await cur.fetchone()
    return row is not None and row[0] > 0


async def test_a_running_worker_stops_claiming_at_once_and_resuming_wakes_it_without_a_poll(
    db: AsyncConnectionPool,
) -> None:
    """The pause needs no notification (the next claim sees it); the resume notifies the
    queue, so a worker whose poll is 10 minutes away claims within the test's deadline."""
    started = asyncio.Event()
    release = asyncio.Event()
    done: list[int] = []

    async def send(job: Job) -> None:
        if job.payload["n"] == 0:
            started.set()
            await release.wait()
        done.append(job.payload["n"])

    config = WorkerConfig(queue="mail", maintenance=None, poll_interval=600)
    worker = Worker(db, {"send": send}, config)
    run = asyncio.create_task(worker.run())
    try:
        await worker.wait_listening()
        async with db.connection() as conn:
            await enqueue(conn, "send", {"n": 0}, queue="mail")
        await asyncio.wait_for(started.wait(), 30)
        async with db.connection() as conn:
            async with conn.transaction():
                await pause_queue(conn, "mail")
                ids = [await enqueue(conn, "send", {"n": n}, queue="mail") for n in (1, 2)]
            cur = await conn.execute("SELECT clock_timestamp()")
            (committed,) = await cur.fetchone()  # type: ignore[misc]
        # The enqueues' notification wakes the loop (9 of its 10 slots are free): its claim,
        # begun after the commit, sees both jobs ready and the queue paused.
        await wait_until(
            lambda: _claimed_since(db, committed, full=False), what="a claim after the pause"
        )
        async with db.connection() as conn:
            assert [(await get_job(conn, i)).state for i in ids] == ["ready"] * 2  # type: ignore[union-attr]
        release.set()  # the job already running runs on to its end
        await wait_until(_async(lambda: done == [0]), what="the running job to finish")
        async with db.connection() as conn:
            cur = await conn.execute("SELECT clock_timestamp()")
            (finished,) = await cur.fetchone()  # type: ignore[misc]
        # Parked: its last claim (a full scan) found the queue paused; the next look would be
        # the poll, 10 minutes away, but for a notification.
        await wait_until(lambda: _claimed_since(db, finished, full=True), what="a full claim")
        async with db.connection() as conn:
            await resume_queue(conn, "mail")
        await wait_until(_async(lambda: sorted(done) == [0, 1, 2]), what="the resumed jobs")
    finally:
        worker.stop()
        await asyncio.wait_for(run, 30)


def _async(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def condition() -> bool:
        return check()

    return condition
