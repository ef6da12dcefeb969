"""Procrastinate (psycopg): an app with the benchmark's one task, its schema, its batch
defer, and a drain by its worker (no LISTEN/NOTIFY, ``wait=False``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from typing import Any

from bench.harness.systems.base import (
    BARRIER_TIMEOUT,
    KIND,
    PROCRASTINATE_POOL_SIZE,
    QUEUE,
    DrainSpec,
)


def procrastinate_app(
    url: str, on_run: Callable[[int], None], pool_size: int = PROCRASTINATE_POOL_SIZE
) -> Any:
    """A Procrastinate app with the benchmark's one task (``noop(n)``)."""
    import procrastinate

    # It warns when the app lives in ``__main__`` (for its CLI's sake); we register tasks here.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=url, min_size=pool_size, max_size=pool_size
        )
    )

    @app.task(name=KIND, queue=QUEUE)
    async def noop(n: int) -> None:
        on_run(n)

    return app


def setup_procrastinate(url: str) -> None:
    async def go() -> None:
        app = procrastinate_app(url, lambda n: None)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(go())


def enqueue_procrastinate(url: str, n: int) -> float:
    async def go() -> float:
        app = procrastinate_app(url, lambda n: None)
        async with app.open_async():
            task = app.tasks[KIND]
            kwargs = [{"n": i} for i in range(n)]
            start = time.perf_counter()
            ids = await task.batch_defer_async(*kwargs)
            elapsed = time.perf_counter() - start
        assert len(ids) == n
        return float(elapsed)

    return asyncio.run(go())


async def drain_procrastinate(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    done = 0

    def count(n: int) -> None:
        nonlocal done
        done += 1

    app = procrastinate_app(spec.url, count, spec.pool_size)
    async with app.open_async():
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        await app.run_worker_async(
            queues=[QUEUE],
            concurrency=spec.concurrency,
            wait=False,
            delete_jobs="successful",
            listen_notify=False,
            install_signal_handlers=False,
        )
        return time.time(), done
