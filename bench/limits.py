"""What a fleet-wide limit costs the claim: one worker (this process) drains ``--jobs`` no-op
jobs at each batch size with the queue unlimited (the plain claim) and with a limit that never
binds (``--limit``, far above the worker's concurrency: every claim is the limited one, in its
transaction with the queue's advisory lock, the acknowledgements and the count of running
jobs), in ABBA order per round. Jobs/s per drain, and limited / plain from the medians; the
concurrency is ``max(10, batch)`` as in ``python -m bench.queue``.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.limits
    python -m bench.limits --jobs 20000 --batches 10,100 --repeat 4

Needs a fresh database: it makes one on ``DATABASE_URL``'s server (or the embedded one) and
drops it at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from typing import Final

import psycopg
from bench.claims import drain
from bench.harness.arguments import int_list
from bench.harness.drain import prepare_drain
from bench.harness.machine import refuse_if_busy
from bench.harness.systems.base import QUEUE
from bench.harness.systems.ours import enqueue_ours, setup_ours

from pgenough import eventloop
from pgenough.core import database_url
from pgenough.core.admin import clear_queue_limit, set_queue_limit
from pgenough.core.db import create_database, drop_database, with_database

MODES: Final = ("plain", "limited")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batches", type=int_list, default=(10, 100))
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--limit", type=int, default=10_000)
    args = parser.parse_args()
    refuse_if_busy("bench.limits")
    server = database_url(os.environ.get("DATABASE_URL"), None)
    name = f"bench_limits_{uuid.uuid4().hex[:8]}"
    admin = with_database(server, "postgres")
    create_database(admin, name)
    url = with_database(server, name)
    rates: dict[tuple[int, str], list[float]] = {}
    try:
        setup_ours(url)
        for round_ in range(args.repeat):
            order = MODES if round_ % 2 == 0 else MODES[::-1]
            for batch in args.batches:
                for mode in order:
                    enqueue_ours(url, args.jobs)
                    prepare_drain(url)
                    with psycopg.connect(url, autocommit=True) as conn:
                        if mode == "limited":
                            set_queue_limit(conn, QUEUE, args.limit)
                        else:
                            clear_queue_limit(conn, QUEUE)
                    start = time.perf_counter()
                    done = eventloop.run(lambda b=batch: drain(url, b, "no-op"))
                    rate = done / (time.perf_counter() - start)
                    assert done == args.jobs, (done, args.jobs)
                    rates.setdefault((batch, mode), []).append(rate)
                    print(
                        f"round {round_ + 1} batch {batch:>3} {mode:<8} {rate:>9,.0f} jobs/s",
                        flush=True,
                    )
    finally:
        drop_database(admin, name)
    print("\nbatch  plain jobs/s (median)  limited jobs/s (median)  limited / plain")
    for batch in args.batches:
        plain = statistics.median(rates[(batch, "plain")])
        limited = statistics.median(rates[(batch, "limited")])
        print(f"{batch:>5}  {plain:>21,.0f}  {limited:>23,.0f}  {limited / plain:>15.3f}")


if __name__ == "__main__":
    main()
