"""Add-to-start latency: one idle worker process per system, single jobs enqueued on their own
connections in a shuffled order, each timed from just before its enqueue call to its handler's
first line (``run_latency``, ``measure_latency``)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.synchronize import Event as MPEvent
from typing import Any, Literal, TypeAlias, TypeVar

import psycopg
from bench.harness.report import percentile_99
from bench.harness.systems.base import (
    BARRIER_TIMEOUT,
    KIND,
    OURS_POOL_SIZE,
    PROCRASTINATE_CONCURRENCY,
    QUEUE,
)
from bench.harness.systems.ours import run_as_the_cli, setup_ours
from bench.harness.systems.pgqueuer import asyncpg_params, setup_pgqueuer
from bench.harness.systems.procrastinate import procrastinate_app, setup_procrastinate

from pgenough.core import Job, Worker, WorkerConfig, enqueue, open_pool

LATENCY_WARMUP = 10
LATENCY_PAUSE = (0.010, 0.040)
LatencySystem: TypeAlias = Literal["ours", "pgqueuer", "procrastinate"]


@dataclass
class Timed:
    """Add-to-start latency samples (``run_latency``) and their figures."""

    samples: list[float]
    """Seconds from just before the enqueue call to the handler's first line."""
    enqueue_samples: list[float]
    """Seconds the enqueue call itself took (statement and commit), same jobs."""

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        return percentile_99(self.samples)

    @property
    def enqueue_p50(self) -> float:
        return statistics.median(self.enqueue_samples)


@dataclass
class LatencyResult(Timed):
    system: LatencySystem = "ours"
    busy_before: float | None = None

    @property
    def after_enqueue_p50(self) -> float:
        """From the enqueue call's return to the handler: notification, claim, dispatch."""
        return statistics.median(
            total - call for total, call in zip(self.samples, self.enqueue_samples, strict=True)
        )


LATENCY_SYSTEMS: tuple[LatencySystem, ...] = ("ours", "pgqueuer", "procrastinate")
LATENCY_SETUP: dict[LatencySystem, Callable[[str], None]] = {
    "ours": setup_ours,
    "pgqueuer": setup_pgqueuer,
    "procrastinate": setup_procrastinate,
}


def latency_worker_main(
    system: LatencySystem,
    url: str,
    ready: MPEvent,
    stop: MPEvent,
    starts: MPQueue[tuple[int, float]],
) -> None:
    """Entry point of the latency worker process: one idle worker reporting handler starts."""

    def started(n: int) -> None:
        starts.put((n, time.time()))

    async def wait_stop() -> None:
        ready.set()
        await asyncio.to_thread(stop.wait)

    async def ours() -> None:
        pool = await open_pool(url, min_size=2, max_size=OURS_POOL_SIZE, name="bench-latency")

        async def handler(job: Job) -> None:
            started(job.payload["n"])

        worker = Worker(pool, {KIND: handler}, WorkerConfig(queue=QUEUE, maintenance=None))
        task = asyncio.create_task(worker.run())
        await worker.wait_listening()
        await wait_stop()
        worker.stop()
        await task
        await pool.close()

    async def pgqueuer() -> None:
        import asyncpg
        from pgqueuer import PgQueuer
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.models import Job as PgqJob

        conn = await asyncpg.connect(**asyncpg_params(url))
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(KIND)
        async def handler(job: PgqJob) -> None:
            started(int(job.payload or b"-1"))

        task = asyncio.create_task(pgq.run())
        await asyncio.sleep(1.0)  # no "listening" signal: give it time to LISTEN
        await wait_stop()
        pgq.shutdown.set()
        await task
        await conn.close()

    async def procrastinate() -> None:
        app = procrastinate_app(url, started)
        async with app.open_async():
            task = asyncio.create_task(
                app.run_worker_async(
                    queues=[QUEUE],
                    concurrency=PROCRASTINATE_CONCURRENCY,
                    wait=True,
                    delete_jobs="successful",
                    listen_notify=True,
                    install_signal_handlers=False,
                )
            )
            await asyncio.sleep(1.0)  # no "listening" signal: give it time to LISTEN
            await wait_stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    if system == "pgqueuer":
        import uvloop

        uvloop.run(pgqueuer())
    else:
        run_as_the_cli(ours) if system == "ours" else asyncio.run(procrastinate())


@contextlib.asynccontextmanager
async def single_enqueuer(
    system: LatencySystem, url: str
) -> AsyncIterator[Callable[[int], Awaitable[object]]]:
    """A function enqueueing one job on its own autocommit connection."""
    if system == "ours":
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:

            def one(n: int) -> Awaitable[object]:
                return enqueue(conn, KIND, {"n": n}, queue=QUEUE)

            yield one
    elif system == "pgqueuer":
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        apg = await asyncpg.connect(**asyncpg_params(url))
        queries = Queries(AsyncpgDriver(apg))
        try:

            def one(n: int) -> Awaitable[object]:
                return queries.enqueue(KIND, str(n).encode())

            yield one
        finally:
            await apg.close()
    else:
        app = procrastinate_app(url, lambda n: None)
        async with app.open_async():
            task = app.tasks[KIND]

            def one(n: int) -> Awaitable[object]:
                return task.defer_async(n=n)  # type: ignore[no-any-return]

            yield one


Enqueue: TypeAlias = Callable[[int], Awaitable[object]]
K = TypeVar("K", bound=str)
Timings: TypeAlias = tuple[list[float], list[float]]
"""Seconds from just before each enqueue call to its handler's first line, and the seconds the
call itself took, same jobs."""
LatencyWorker: TypeAlias = tuple[Callable[..., None], tuple[Any, ...]]
"""An idle worker process's target and its first arguments (ready, stop and the starts queue
follow)."""


async def time_starts(
    enqueuers: Callable[[K], contextlib.AbstractAsyncContextManager[Enqueue]],
    systems: Sequence[K],
    samples: int,
    starts: dict[K, MPQueue[tuple[int, float]]],
) -> dict[K, Timings]:
    """Enqueue single jobs for every system in turn (a shuffled order each round, so that
    every system sees the same machine), timing each until its handler starts."""
    rng = random.Random(1)
    results: dict[K, Timings] = {system: ([], []) for system in systems}
    async with contextlib.AsyncExitStack() as stack:
        enqueue_of = {
            system: await stack.enter_async_context(enqueuers(system)) for system in systems
        }
        order = list(systems)
        for n in range(LATENCY_WARMUP + samples):
            rng.shuffle(order)
            for system in order:
                await asyncio.sleep(rng.uniform(*LATENCY_PAUSE))
                t0 = time.time()
                await enqueue_of[system](n)
                t1 = time.time()
                got, started = await asyncio.to_thread(starts[system].get, True, 30)
                if got != n:
                    raise RuntimeError(f"{system}: expected job {n} to start, got {got}")
                if n >= LATENCY_WARMUP:
                    results[system][0].append(started - t0)
                    results[system][1].append(t1 - t0)
    return results


def run_latency(
    ctx: SpawnContext,
    workers: dict[K, LatencyWorker],
    enqueuers: Callable[[K], contextlib.AbstractAsyncContextManager[Enqueue]],
    samples: int,
) -> dict[K, Timings]:
    """One idle worker process per system, all at once, then ``time_starts``."""
    stop = ctx.Event()
    ready = {system: ctx.Event() for system in workers}
    starts: dict[K, MPQueue[tuple[int, float]]] = {s: ctx.Queue() for s in workers}
    procs = [
        ctx.Process(target=target, args=(*args, ready[system], stop, starts[system]), daemon=True)
        for system, (target, args) in workers.items()
    ]
    for p in procs:
        p.start()
    try:
        for system, event in ready.items():
            if not event.wait(BARRIER_TIMEOUT):
                raise RuntimeError(f"{system}: latency worker did not start")
        return asyncio.run(time_starts(enqueuers, list(workers), samples, starts))
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
                p.join(5)


def measure_latency(
    ctx: SpawnContext, urls: dict[LatencySystem, str], samples: int
) -> dict[LatencySystem, LatencyResult]:
    """One idle worker process per system (``latency_worker_main``), ``run_latency``."""
    timings = run_latency(
        ctx,
        {system: (latency_worker_main, (system, url)) for system, url in urls.items()},
        lambda system: single_enqueuer(system, urls[system]),
        samples,
    )
    return {system: LatencyResult(*timed, system=system) for system, timed in timings.items()}
