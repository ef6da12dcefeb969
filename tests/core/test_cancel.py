"""Cancelling a running job (``cancellation.py``): the operator's cancel reaches the handler
(an async one is cancelled at its next await; a plain function sees ``ctx.cancelled``), by
the listener's notification, or by the heartbeat when no listener runs; the job ends
``cancelled``, with no failure recorded, and is never retried; its transactional completion
is refused."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import App, Job, TaskContext, Worker, WorkerConfig, complete, enqueue
from pgenough.core.admin import discard_job, discard_jobs, get_job
from pgenough.core.cancellation import cancelled_here
from pgenough.core.errors import LeaseLost
from tests.helpers.procs import wait_until

pytestmark = pytest.mark.db

FAR = 600.0
"""A lease whose heartbeat (every lease / 3) is far past every deadline here: only the
listener's notification can deliver the cancel in time."""
DEADLINE = 60.0


async def _state(db: AsyncConnectionPool, job_id: int) -> tuple[str, list[Any]]:
    async with db.connection() as conn:
        job = await get_job(conn, job_id)
    assert job is not None
    return job.state, job.errors


def _lost(worker: Worker) -> Callable[[], Awaitable[bool]]:
    async def counted() -> bool:
        return worker.stats.lost >= 1

    return counted


async def test_an_async_handler_is_cancelled_at_its_next_await(db: AsyncConnectionPool) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def hang(job: Job) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: only a cancel ends it
        except asyncio.CancelledError:
            stopped.set()
            raise

    worker = Worker(db, {"hang": hang}, WorkerConfig(lease=FAR, maintenance=None))
    run = asyncio.create_task(worker.run())
    try:
        await worker.wait_listening()
        async with db.connection() as conn:
            job_id = await enqueue(conn, "hang", {})
        assert job_id is not None
        await asyncio.wait_for(started.wait(), DEADLINE)
        async with db.connection() as conn:
            await discard_job(conn, job_id)
        await asyncio.wait_for(stopped.wait(), DEADLINE)
        await wait_until(_lost(worker), what="the handler's end counted")
        assert await _state(db, job_id) == ("cancelled", [])
        s = worker.stats
        assert (s.completed, s.failed, s.retried, s.lost) == (0, 0, 0, 1)
    finally:
        worker.stop()
        stats = await asyncio.wait_for(run, DEADLINE)
    assert (stats.failed, stats.retried) == (0, 0)
    assert await _state(db, job_id) == ("cancelled", [])  # never retried nor handed back
    assert not cancelled_here


async def test_a_plain_function_sees_the_cancel_and_its_completion_is_refused(
    db: AsyncConnectionPool,
) -> None:
    app = App()
    running = threading.Event()
    seen: list[str] = []

    @app.task(pass_context=True)
    def crunch(ctx: TaskContext) -> None:
        running.set()
        deadline = time.monotonic() + DEADLINE
        while not ctx.cancelled:
            if time.monotonic() > deadline:
                raise AssertionError("the cancel never reached the function")
            time.sleep(0.01)
        seen.append("cancelled")
        try:
            asyncio.run(_complete(ctx))
        except LeaseLost:
            seen.append("completion refused")
        ctx.raise_if_cancelled()

    worker = app.worker(db, config=WorkerConfig(lease=FAR, maintenance=None))
    run = asyncio.create_task(worker.run())
    try:
        await worker.wait_listening()
        async with db.connection() as conn:
            job_id = await crunch.enqueue(conn)
        assert job_id is not None
        assert await asyncio.to_thread(running.wait, DEADLINE)
        async with db.connection() as conn:
            assert await discard_jobs(conn, [job_id]) == 1
        await wait_until(_lost(worker), what="the handler's end counted")
        assert seen == ["cancelled", "completion refused"]
        assert await _state(db, job_id) == ("cancelled", [])
        assert (worker.stats.failed, worker.stats.completed) == (0, 0)
    finally:
        worker.stop()
        await asyncio.wait_for(run, DEADLINE)


async def _complete(ctx: TaskContext) -> None:
    """What a plain function that ignores the cancel would do: complete its job with its own
    writes, in one transaction, on a connection of its own."""
    from pgenough.core import open_pool

    assert isinstance(ctx.pool.conninfo, str)
    pool = await open_pool(ctx.pool.conninfo, min_size=1, max_size=1)
    try:
        async with pool.connection() as conn, conn.transaction():
            await complete(conn, ctx.job)
    finally:
        await pool.close()


async def test_without_a_listener_the_heartbeat_delivers_the_cancel(
    db: AsyncConnectionPool,
) -> None:
    """``run(until_idle=True)`` starts no listener: the heartbeat (every lease / 3) finds the
    job it could not extend cancelled, and stops its handler."""
    started = asyncio.Event()

    async def hang(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()

    async with db.connection() as conn:
        job_id = await enqueue(conn, "hang", {})
    assert job_id is not None
    worker = Worker(db, {"hang": hang}, WorkerConfig(lease=1.5, maintenance=None))
    run = asyncio.create_task(worker.run(until_idle=True))
    await asyncio.wait_for(started.wait(), DEADLINE)
    async with db.connection() as conn:
        await discard_job(conn, job_id)
    stats = await asyncio.wait_for(run, DEADLINE)  # idle once the handler stopped
    assert (stats.lost, stats.failed, stats.completed) == (1, 0, 0)
    assert await _state(db, job_id) == ("cancelled", [])
