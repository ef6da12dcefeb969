"""How many claims a drain takes: one worker (this process) drains ``--jobs`` jobs with
``until_idle`` at each batch size, its claim statements counted (``pgenough.core.queue.claim``
wrapped), with no-op handlers and with handlers that sleep a random 0-2 ms (so they finish
one by one, as real ones do, and the claim loop meets partly free slots). Jobs per claim and
jobs/s per cell, the median of ``--repeat`` rounds; the concurrency is ``max(10, batch)`` as in
``python -m bench.queue``. Compare commits by running it in each tree
(``make bench-ab`` runs the drain headline only).

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.claims
    python -m bench.claims --jobs 20000 --batches 10,100 --repeat 3

Needs a fresh database: it makes one on ``DATABASE_URL``'s server (or the embedded one) and
drops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
import uuid
from typing import Any, Final

from bench.harness.arguments import int_list
from bench.harness.drain import prepare_drain
from bench.harness.machine import refuse_if_busy
from bench.harness.systems.base import KIND, QUEUE
from bench.harness.systems.ours import enqueue_ours, setup_ours

from pgenough import eventloop
from pgenough.core import Job, Worker, WorkerConfig, database_url, open_pool
from pgenough.core import queue as core_queue
from pgenough.core.db import create_database, drop_database, with_database

HANDLERS: Final = ("no-op", "sleep 0-2 ms")


class Counted:
    """``queue.claim`` wrapped: the claims that asked for jobs (not the final acknowledgement)."""

    def __init__(self) -> None:
        self.claims = 0
        self._claim = core_queue.claim

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("limit"):
            self.claims += 1
        return await self._claim(*args, **kwargs)


async def drain(url: str, batch: int, handler: str) -> int:
    pool = await open_pool(url, min_size=4, max_size=10, name="bench-claims")
    rng = random.Random(batch)
    try:

        async def run(job: Job) -> None:
            if handler != "no-op":
                await asyncio.sleep(rng.uniform(0, 0.002))

        config = WorkerConfig(
            queue=QUEUE, batch_size=batch, concurrency=max(10, batch), maintenance=None
        )
        stats = await Worker(pool, {KIND: run}, config).run(until_idle=True)
        return stats.completed
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batches", type=int_list, default=(10, 100))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    refuse_if_busy("bench.claims")
    server = database_url(os.environ.get("DATABASE_URL"), None)
    name = f"bench_claims_{uuid.uuid4().hex[:8]}"
    admin = with_database(server, "postgres")
    create_database(admin, name)
    url = with_database(server, name)
    counted = Counted()
    core_queue.claim = counted  # type: ignore[assignment]
    cells: dict[tuple[int, str], list[tuple[float, float]]] = {}
    try:
        setup_ours(url)
        for round_ in range(args.repeat):
            for batch in args.batches:
                for handler in HANDLERS:
                    enqueue_ours(url, args.jobs)
                    prepare_drain(url)
                    counted.claims = 0
                    start = time.perf_counter()
                    done = eventloop.run(lambda b=batch, h=handler: drain(url, b, h))
                    seconds = time.perf_counter() - start
                    assert done == args.jobs, (done, args.jobs)
                    per_claim, rate = done / counted.claims, done / seconds
                    cells.setdefault((batch, handler), []).append((per_claim, rate))
                    print(
                        f"round {round_ + 1} batch {batch:>3} {handler:<13}"
                        f" {counted.claims:>6,} claims  {per_claim:6.2f} jobs/claim"
                        f"  {rate:>9,.0f} jobs/s",
                        flush=True,
                    )
    finally:
        core_queue.claim = counted._claim  # type: ignore[method-assign]
        drop_database(admin, name)
    print("\nbatch  handler        jobs/claim (median)   jobs/s (median)")
    for (batch, handler), runs in cells.items():
        per_claim = statistics.median(r[0] for r in runs)
        rate = statistics.median(r[1] for r in runs)
        print(f"{batch:>5}  {handler:<13} {per_claim:>19.2f}   {rate:>15,.0f}")


if __name__ == "__main__":
    main()
