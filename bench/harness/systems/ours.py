"""pgenough's work queue (*ours*): its schema, its bulk enqueue, and a drain by its worker in
one of its completion modes (``ours-batched``, ``ours-tx``, ``ours-batch-tx``), on the event
loop ``pgenough worker`` runs on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from multiprocessing.synchronize import Barrier
from typing import Any, TypeVar

import psycopg
from bench.harness.systems.base import BARRIER_TIMEOUT, KIND, QUEUE, DrainSpec

from pgenough import eventloop
from pgenough.core import (
    BatchHandler,
    Handler,
    Job,
    NewJob,
    Worker,
    WorkerConfig,
    complete,
    enqueue_many,
    migrate,
    open_pool,
)

T = TypeVar("T")


def setup_ours(url: str) -> None:
    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn)

    asyncio.run(go())


def enqueue_ours(url: str, n: int) -> float:
    jobs = [NewJob(KIND, {"n": i}, queue=QUEUE) for i in range(n)]

    async def go() -> float:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            start = time.perf_counter()
            inserted = await enqueue_many(conn, jobs)
            elapsed = time.perf_counter() - start
        assert inserted == n, (inserted, n)
        return elapsed

    return asyncio.run(go())


async def drain_ours(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    pool = await open_pool(
        spec.url, min_size=spec.pool_size, max_size=spec.pool_size, name="bench-ours"
    )
    try:

        async def noop(job: Job) -> None:
            pass

        async def transactional(job: Job) -> None:
            async with pool.connection() as conn, conn.transaction():
                await complete(conn, job)

        async def noop_batch(conn: psycopg.AsyncConnection[Any], jobs: Sequence[Job]) -> None:
            pass

        handler: Handler | BatchHandler = noop
        if spec.system == "ours-tx":
            handler = transactional
        elif spec.system == "ours-batch-tx":
            handler = BatchHandler(noop_batch)  # the worker completes them in its transaction
        config = WorkerConfig(
            queue=QUEUE,
            batch_size=spec.batch,
            concurrency=spec.concurrency,
            maintenance=None,
        )
        worker = Worker(pool, {KIND: handler}, config)
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        stats = await worker.run(until_idle=True)
        return time.time(), stats.completed
    finally:
        await pool.close()


def run_as_the_cli(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Ours on the event loop ``pgenough worker`` runs on by default (pgenough.eventloop:
    uvloop when installed), as a deployment runs it."""
    return eventloop.run(main)
