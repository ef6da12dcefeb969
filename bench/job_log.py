"""What the worker's line per finished job costs: drains of no-op jobs with the logging of
``pgenough worker run`` (one INFO line per job on ``pgenough.jobs``, to a file, the handler
flushing each line as it does to stderr), with that line quieted (``--quiet`` /
``PGENOUGH_LOG_JOBS=0``: the logger at WARNING), and with no logging at all (as
``python -m bench.queue`` drains: the ceiling), side by side in one run.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres python -m bench.job_log
    python -m bench.job_log --jobs 40000 --batches 10,100 --repeat 3

Each drain: ``--jobs`` no-op jobs loaded with ``enqueue_many``, ``VACUUM ANALYZE`` and
``CHECKPOINT``, then one worker (this process, on the event loop the CLI runs on) drains them
with ``until_idle``; the clock covers the drain only. The modes are interleaved round by
round, so a neighbour's load weighs on all of them alike; medians of ``--repeat`` rounds, the
CPU time of this process per job beside each (the line's cost is CPU: formatting and the
write), and each mode's rate against the no-logging ceiling. Needs a fresh database: it makes
one on ``DATABASE_URL``'s server (or the embedded one) and drops it at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, Literal

from bench.harness.drain import prepare_drain
from bench.harness.machine import refuse_if_busy
from bench.harness.systems.base import KIND, QUEUE
from bench.harness.systems.ours import enqueue_ours, setup_ours

from pgenough import eventloop, logs
from pgenough.core import Job, Worker, WorkerConfig, database_url, open_pool
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.core.worker import JOBS_LOGGER

Mode = Literal["logged", "quiet", "none"]
MODES: Final[tuple[Mode, ...]] = ("none", "logged", "quiet")


@dataclass(frozen=True)
class Drain:
    mode: Mode
    batch: int
    seconds: float
    cpu: float
    jobs: int

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu / self.jobs * 1e6


@contextmanager
def logging_as(mode: Mode, path: str) -> Iterator[None]:
    """The root logger as ``pgenough worker run`` sets it up (``logs.setup``, INFO, text),
    writing to ``path``; or quieted; or none at all."""
    root = logging.getLogger()
    jobs = logging.getLogger(JOBS_LOGGER)
    saved = (list(root.handlers), root.level, jobs.level)
    root.handlers.clear()
    try:
        if mode == "none":
            root.setLevel(logging.WARNING)
            yield
            return
        with open(path, "a", encoding="utf-8") as stream:
            logs.setup("INFO", "text", stream=stream)
            jobs.setLevel(logging.WARNING if mode == "quiet" else logging.NOTSET)
            yield
            for handler in root.handlers:
                handler.flush()
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        jobs.setLevel(saved[2])


async def drain(url: str, batch: int) -> int:
    pool = await open_pool(url, min_size=4, max_size=10, name="bench-job-log")
    try:

        async def noop(job: Job) -> None:
            pass

        config = WorkerConfig(
            queue=QUEUE, batch_size=batch, concurrency=max(10, batch), maintenance=None
        )
        stats = await Worker(pool, {KIND: noop}, config).run(until_idle=True)
        return stats.completed
    finally:
        await pool.close()


def one(url: str, mode: Mode, batch: int, jobs: int, log_path: str) -> Drain:
    enqueue_ours(url, jobs)
    prepare_drain(url)
    with logging_as(mode, log_path):
        cpu0, start = time.process_time(), time.perf_counter()
        done = eventloop.run(lambda: drain(url, batch))
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    assert done == jobs, (done, jobs)
    return Drain(mode, batch, seconds, cpu, jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--batches", default="10,100")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    refuse_if_busy("bench.job_log")
    batches = [int(b) for b in args.batches.split(",")]

    server = database_url(os.environ.get("DATABASE_URL"), None)
    name = f"bench_job_log_{uuid.uuid4().hex[:8]}"
    admin = with_database(server, "postgres")
    create_database(admin, name)
    url = with_database(server, name)
    results: list[Drain] = []
    try:
        setup_ours(url)
        with tempfile.TemporaryDirectory() as tmp:
            log_path = os.path.join(tmp, "worker.log")
            for round_ in range(args.repeat):
                for batch in batches:
                    for mode in MODES:
                        d = one(url, mode, batch, args.jobs, log_path)
                        results.append(d)
                        print(
                            f"round {round_ + 1} batch {batch:>3} {mode:<6}"
                            f" {d.rate:>9,.0f} jobs/s  {d.cpu_us:6.1f} us CPU/job",
                            flush=True,
                        )
            with open(log_path, encoding="utf-8") as written:
                lines = sum(1 for _ in written)
    finally:
        drop_database(admin, name)
    print(f"\n{lines:,} lines written by the logged drains\n")
    print("batch  mode     jobs/s (median)   CPU us/job (median)   vs no logging")
    for batch in batches:
        ceiling = statistics.median(
            d.rate for d in results if d.batch == batch and d.mode == "none"
        )
        for mode in MODES:
            cell = [d for d in results if d.batch == batch and d.mode == mode]
            rate = statistics.median(d.rate for d in cell)
            cpu = statistics.median(d.cpu_us for d in cell)
            print(f"{batch:>5}  {mode:<7} {rate:>13,.0f}   {cpu:>18.1f}   {rate / ceiling:>12.2f}x")


if __name__ == "__main__":
    main()
