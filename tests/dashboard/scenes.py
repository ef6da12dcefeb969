"""Real states for the dashboard to show, made by real workers: one job in each state, dead
letters with real tracebacks, jobs finished and the backlog sampled (the queues' history),
and periodic tasks claimed by real replicas (one on time, one overdue)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    Cron,
    GiveUp,
    Interval,
    Job,
    NewJob,
    Periodic,
    PeriodicTask,
    RetryIn,
    Worker,
    WorkerConfig,
    enqueue,
    enqueue_many,
    get_job,
)
from pgenough.core.admin import discard_job
from pgenough.core.history import sample_queues


@dataclass(frozen=True)
class Jobs:
    """One job in each state: ``ops`` has a ready, a scheduled, a dead and a cancelled one,
    ``slow`` the running one, held by ``worker``."""

    ready: int
    scheduled: int
    dead: int
    """Failed twice for real: a retry, then a give-up."""
    cancelled: int
    running: int
    worker: str

    @property
    def everything(self) -> list[int]:
        """Newest first, as the jobs pages list them."""
        return sorted(
            [self.ready, self.scheduled, self.dead, self.cancelled, self.running], reverse=True
        )


DEAD_PAYLOAD = {"order": 7, "note": "naïve <b>bold</b>"}


async def _flaky(job: Job) -> None:
    if job.attempts == 1:
        raise RetryIn(0, "upstream timed out")
    raise GiveUp("upstream said no")


@asynccontextmanager
async def jobs(pool: AsyncConnectionPool) -> AsyncIterator[Jobs]:
    """``Jobs``, the running one held by a real worker until the block ends."""
    quick = WorkerConfig(queue="ops", batch_size=1, maintenance=None)
    async with pool.connection() as conn:
        dead = await enqueue(conn, "flaky", DEAD_PAYLOAD, queue="ops", max_attempts=5)
    # Drained until the job is dead: its retry is due at once, and a drain that ends just
    # before the retry is claimable is allowed to (the next one takes it).
    for _ in range(5):
        await Worker(pool, {"flaky": _flaky}, quick, name="flaky-worker").run(until_idle=True)
        async with pool.connection() as conn:
            record = await get_job(conn, dead) if dead else None
        if record is None or record.state == "dead":
            break
    assert record is not None and record.state == "dead", record
    async with pool.connection() as conn:
        ready = await enqueue(conn, "noop", {"n": 1}, queue="ops")
        scheduled = await enqueue(conn, "noop", {"n": 2}, queue="ops", run_at=timedelta(minutes=5))
        cancelled = await enqueue(conn, "noop", {"n": 3}, queue="ops")
        assert cancelled is not None
        await discard_job(conn, cancelled)
        running = await enqueue(conn, "hold", {"n": 4}, queue="slow")
    assert dead and ready and scheduled and running

    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Job) -> None:
        started.set()
        await release.wait()

    slow = WorkerConfig(queue="slow", maintenance=None)
    worker = Worker(pool, {"hold": hold}, slow, name="holder-1")
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            await started.wait()
        yield Jobs(ready, scheduled, dead, cancelled, running, worker.name)
    finally:
        release.set()
        worker.stop()
        async with asyncio.timeout(10):
            await task


class CardDeclined(Exception):
    """What the payment provider said, in a test."""


def _charge_card(payload: dict[str, Any]) -> None:
    raise CardDeclined(f"card of {payload['customer']} declined <script>alert(1)</script>")


async def _charge(job: Job) -> None:
    try:
        _charge_card(job.payload)
    except CardDeclined as exc:
        raise RuntimeError(f"charge for order {job.payload['order']} failed") from exc


CUSTOMERS = ("ann@example.com", "bob@example.com", "Ann.Other@example.com")


async def dead_letters(pool: AsyncConnectionPool, queue: str = "billing") -> list[int]:
    """Jobs of task ``charge`` dead after one real attempt each (a chained exception's
    traceback), one per customer of ``CUSTOMERS``, and a ``refund`` of ann's, dead too;
    oldest first."""
    ids = []
    async with pool.connection() as conn:
        for n, customer in enumerate(CUSTOMERS):
            payload = {"order": 100 + n, "customer": customer}
            ids.append(await enqueue(conn, "charge", payload, queue=queue, max_attempts=1))
        ids.append(
            await enqueue(
                conn, "refund", {"order": 99, "customer": CUSTOMERS[0]}, queue=queue, max_attempts=1
            )
        )
    config = WorkerConfig(queue=queue, maintenance=None)
    await Worker(pool, {"charge": _charge, "refund": _charge}, config, name="billing-1").run(
        until_idle=True
    )
    found = [i for i in ids if i is not None]
    async with pool.connection() as conn:
        for job_id in found:
            record = await get_job(conn, job_id)
            assert record is not None and record.state == "dead", record
    return found


async def _ok(job: Job) -> None:
    pass


async def _refused(job: Job) -> None:
    raise GiveUp("mailbox full")


@dataclass(frozen=True)
class Finished:
    """What ``finished`` made, as the history counts it."""

    completed: dict[str, int]
    failed: int
    dead: int
    ready: int
    """Jobs left ready in ``mail`` when the backlog was sampled."""


async def finished(pool: AsyncConnectionPool) -> Finished:
    """Jobs finished by real workers, counted in the history as their workers stop: in
    ``mail`` 3 completed and 1 dead-lettered (one failed attempt), in ``other`` 2 completed
    (it has no job left: only its history says it ran); then 2 jobs ready in ``mail`` and the
    backlog sampled, as the workers' once-a-minute duty does."""
    async with pool.connection() as conn:
        await enqueue_many(conn, [NewJob("ok", {"n": n}, queue="mail") for n in range(3)])
        await enqueue(conn, "refused", {"to": "full@example.com"}, queue="mail", max_attempts=1)
        await enqueue_many(conn, [NewJob("ok", {"n": n}, queue="other") for n in range(2)])
    handlers = {"ok": _ok, "refused": _refused}
    for queue in ("mail", "other"):
        config = WorkerConfig(queue=queue, maintenance=None)
        await Worker(pool, handlers, config, name=f"{queue}-drain").run(until_idle=True)
    async with pool.connection() as conn:
        await enqueue_many(conn, [NewJob("ok", {"n": n}, queue="mail") for n in range(2)])
        assert await sample_queues(conn) >= 1
    return Finished({"mail": 3, "other": 2}, failed=1, dead=1, ready=2)


async def _nothing() -> None:
    pass


EVERY_MINUTE = PeriodicTask("heartbeat-report", Interval(60), _nothing)
NIGHTLY = PeriodicTask("nightly-export", Cron("30 2 * * *", "Europe/Berlin"), _nothing)


async def periodic_tasks(pool: AsyncConnectionPool) -> datetime:
    """Two periodic tasks as real replicas claim them, at chosen database times (as
    ``tests/core/test_periodic.py`` does): ``heartbeat-report`` claimed now by replica ``a``
    (on time: due again within a minute); ``nightly-export`` first seen 5 days ago, run 2
    days ago by replica ``b`` (the 2 nightly ticks between missed) and never since: overdue,
    no replica runs it. The database's time of the claims."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT now()")
        row = await cur.fetchone()
        assert row is not None
        now: datetime = row[0]
        a, b = Periodic(pool, replica="a"), Periodic(pool, replica="b")
        assert (await a.claim_at(conn, EVERY_MINUTE, now)).outcome == "run"
        assert (await a.claim_at(conn, NIGHTLY, now - timedelta(days=5))).outcome == "recorded"
        assert (await b.claim_at(conn, NIGHTLY, now - timedelta(days=2))).outcome == "run"
    return now
