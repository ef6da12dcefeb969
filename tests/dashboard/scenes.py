"""Real states for the dashboard to show, made by real workers: one job in each state, and
dead letters with real tracebacks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    GiveUp,
    Job,
    RetryIn,
    Worker,
    WorkerConfig,
    discard_job,
    enqueue,
    get_job,
)


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
