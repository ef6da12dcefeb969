"""The queues over time (``pgenough.job_counts``, ``pgenough.queue_samples``): what workers
finish is counted per queue and minute, completed jobs included (they are deleted); the
backlog is sampled; ``queue_history`` reads both, ``queue_trend`` one series of them in
buckets; the cleaner keeps them to their retention."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any, cast
from unittest.mock import ANY

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import GiveUp, Job, Worker, WorkerConfig, enqueue, enqueue_many
from pgenough.core.admin import queue_history, queue_trend
from pgenough.core.history import CountsFlusher, sample_queues
from pgenough.core.maintenance import MaintenanceConfig, clean
from pgenough.core.queue import NewJob

pytestmark = pytest.mark.db


async def test_what_a_worker_finishes_is_counted_per_queue_and_minute(
    db: AsyncConnectionPool,
) -> None:
    async def ok(job: Job) -> None:
        pass

    async def bad(job: Job) -> None:
        raise GiveUp("no")

    async with db.connection() as conn:
        await enqueue_many(conn, [NewJob("ok", queue="mail") for _ in range(7)])
        await enqueue_many(conn, [NewJob("bad", queue="mail") for _ in range(2)])
        await enqueue(conn, "ok", queue="other")
    handlers = {"ok": ok, "bad": bad}
    for queue in ("mail", "other"):
        # A drain too: its counts are flushed when it stops.
        await Worker(db, handlers, WorkerConfig(queue=queue, maintenance=None)).run(until_idle=True)
    async with db.connection() as conn:
        points = await queue_history(conn, window=3600)
        mail = await queue_history(conn, window=3600, queue="mail")
    totals = {p.queue: (p.completed, p.failed, p.dead) for p in points}
    assert totals == {"mail": (7, 2, 2), "other": (1, 0, 0)}
    assert [p.queue for p in mail] == ["mail"]
    assert all(p.ready is None for p in points)  # nothing sampled yet


async def test_a_flush_that_fails_is_carried_into_the_next(db: AsyncConnectionPool) -> None:
    """Counts not written (the database unreachable) are sent with the next flush, once."""

    class Stats:
        completed, failed, dead = 5, 1, 0

    class Unreachable:
        """The pool while the database is unreachable: its first connection fails."""

        failures = 1

        def connection(self) -> Any:
            if self.failures:
                self.failures -= 1
                raise psycopg.OperationalError("connection refused (test)")
            return db.connection()

    flusher = CountsFlusher(
        cast(AsyncConnectionPool, Unreachable()), "carrier", lambda: {"q": Stats()}
    )
    await flusher.flush()  # fails: nothing sent, a warning
    Stats.completed = 8
    await flusher.flush()
    await flusher.flush()  # nothing new: nothing added
    async with db.connection() as conn:
        [point] = await queue_history(conn, window=600)
    assert (point.completed, point.failed) == (8, 1)


async def test_the_backlog_is_sampled_and_read_with_the_counts(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        await enqueue_many(conn, [NewJob("x", queue="mail") for _ in range(3)])
        await enqueue(conn, "x", queue="mail", run_at=timedelta(hours=1))
        assert await sample_queues(conn) == 1
        assert await sample_queues(conn) == 0  # one sample per queue and minute
        [point] = await queue_history(conn, window=600)
        # Emptied, a queue is still sampled, at zero, for an hour after its last sample.
        await conn.execute("UPDATE pgenough.queue_samples SET at = at - interval '1 minute'")
        await conn.execute("DELETE FROM pgenough.jobs")
        assert await sample_queues(conn) == 1
        emptied = await queue_history(conn, window=600)
    assert (point.queue, point.ready, point.scheduled, point.running) == ("mail", 3, 1, 0)
    assert point.oldest_ready_age is not None and point.oldest_ready_age >= 0
    assert point.completed == 0
    assert [(p.ready, p.scheduled, p.oldest_ready_age) for p in emptied] == [(3, 1, ANY), (0, 0, 0)]


async def test_the_cleaner_keeps_the_history_to_its_retention(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        for hours in (1, 30):
            await conn.execute(
                "INSERT INTO pgenough.job_counts (bucket, queue, completed)"
                " VALUES (date_trunc('minute', now()) - %s * interval '1 hour', 'q', 1)",
                [hours],
            )
            await conn.execute(
                "INSERT INTO pgenough.queue_samples"
                " (at, queue, ready, scheduled, running, dead, oldest_ready_age)"
                " VALUES (date_trunc('minute', now()) - %s * interval '1 hour',"
                " 'q', 1, 0, 0, 0, 0)",
                [hours],
            )
        result = await clean(conn, MaintenanceConfig(history_retention=24 * 3600, batch=1))
        assert result.history_deleted == 2
        points = await queue_history(conn, window=7 * 24 * 3600)
    assert len(points) == 1


async def test_a_trend_is_every_bucket_of_one_queue_or_of_all_added_together(
    db: AsyncConnectionPool,
) -> None:
    async def ok(job: Job) -> None:
        pass

    async with db.connection() as conn:
        await enqueue_many(conn, [NewJob("ok", queue="mail") for _ in range(3)])
        await enqueue(conn, "ok", queue="other")
    for queue in ("mail", "other"):
        await Worker(db, {"ok": ok}, WorkerConfig(queue=queue, maintenance=None)).run(
            until_idle=True
        )
    async with db.connection() as conn:
        await enqueue_many(conn, [NewJob("x", queue="mail") for _ in range(2)])
        await enqueue(conn, "x", queue="other", run_at=timedelta(hours=1))
        assert await sample_queues(conn) == 2
        # The same depths an hour and a half ago, as if sampled then: a bucket of its own.
        await conn.execute(
            "INSERT INTO pgenough.queue_samples"
            " SELECT at - interval '90 minutes', queue, ready + 5, scheduled, running, dead,"
            " oldest_ready_age + 60 FROM pgenough.queue_samples"
        )
        every = await queue_trend(conn, window=6 * 3600, step=1800)
        mail = await queue_trend(conn, window=3600, step=60, queue="mail")
        with pytest.raises(ValueError, match="at most the window"):
            await queue_trend(conn, window=60, step=120)
    assert len(every) == 12 and len(mail) == 60
    assert all(p.queue == "" for p in every) and all(p.queue == "mail" for p in mail)
    steps = {(b.at - a.at).total_seconds() for a, b in itertools.pairwise(every)}
    assert steps == {1800.0}
    # Both queues added together (a minute may have turned since: counted where it fell).
    assert sum(p.completed for p in every) == 4 and sum(p.failed + p.dead for p in every) == 0
    sampled = [(p.ready, p.scheduled, p.running) for p in every if p.ready is not None]
    assert sampled == [(12, 1, 0), (2, 1, 0)]
    earlier = next(p for p in every if p.ready == 12)
    assert earlier.oldest_ready_age is not None and earlier.oldest_ready_age >= 60
    assert sum(p.completed for p in mail) == 3
    # The other sample is not in the hour; this one is mail's alone.
    assert [(p.ready, p.scheduled) for p in mail if p.ready is not None] == [(2, 0)]
