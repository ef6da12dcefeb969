"""Helper processes for tests that need real, killable processes.

    python -m tests.helpers.proc MODE [options]      (DATABASE_URL in the environment)

Modes print one line per event on stdout (flushed), so tests wait on lines, not on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgenough.core import Job, Periodic, Worker, WorkerConfig, advisory_lock, complete, open_pool
from pgenough.core.maintenance import MaintenanceConfig


def say(*parts: Any) -> None:
    print(*parts, flush=True)


async def effects(args: argparse.Namespace) -> None:
    """Drain the queue; each job records its effect and completes in one transaction."""
    pool = await open_pool(os.environ["DATABASE_URL"], max_size=args.concurrency + 4)
    invocations = 0

    async def handler(job: Job) -> None:
        nonlocal invocations
        invocations += 1
        if args.record_starts:
            async with pool.connection() as conn:  # committed at once, whatever follows
                await conn.execute("INSERT INTO starts (job_id) VALUES (%s)", (job.id,))
        if args.work:
            await asyncio.sleep(args.work)
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, %s, %s)",
                (job.id, job.attempts, worker.name),
            )
            await complete(conn, job)

    config = WorkerConfig(
        queue=args.queue,
        concurrency=args.concurrency,
        batch_size=args.batch,
        lease=args.lease,
        poll_interval=0.2,
        maintenance=MaintenanceConfig(rescue_interval=max(0.2, args.lease / 2)),
    )
    worker = Worker(pool, {"effect": handler}, config)
    say("ready")
    if args.until_idle:
        stats = await worker.run(until_idle=True)
    else:
        stats = await worker.run(handle_signals=True)
    say(
        json.dumps(
            {
                "invocations": invocations,
                "completed": stats.completed,
                "failed": stats.failed,
                "lost": stats.lost,
            }
        )
    )
    await pool.close()


async def hold(args: argparse.Namespace) -> None:
    """Claim jobs and never finish them: the process is meant to be killed."""
    pool = await open_pool(os.environ["DATABASE_URL"], max_size=4)

    async def handler(job: Job) -> None:
        say("claimed", job.id, job.attempts)
        await asyncio.Event().wait()

    config = WorkerConfig(
        concurrency=args.concurrency,
        batch_size=args.batch,
        lease=args.lease,
        poll_interval=0.2,
        maintenance=None,
    )
    await Worker(pool, {"effect": handler, "crash": handler}, config).run()


async def crash(args: argparse.Namespace) -> None:
    """Every job kills this process: the poison-job scenario."""
    pool = await open_pool(os.environ["DATABASE_URL"], max_size=4)

    async def handler(job: Job) -> None:
        say("crashing", job.id, job.attempts)
        os.kill(os.getpid(), signal.SIGKILL)

    config = WorkerConfig(
        concurrency=1,
        batch_size=1,
        lease=args.lease,
        poll_interval=0.2,
        maintenance=MaintenanceConfig(rescue_interval=max(0.2, args.lease / 2)),
    )
    say("ready")
    await Worker(pool, {"crash": handler}, config).run()


async def slow(args: argparse.Namespace) -> None:
    """Jobs take --seconds; SIGTERM must let running ones finish or release them."""
    pool = await open_pool(os.environ["DATABASE_URL"], max_size=args.concurrency + 4)

    async def handler(job: Job) -> None:
        say("started", job.id)
        await asyncio.sleep(args.seconds)
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, %s, 'slow')",
                (job.id, job.attempts),
            )
            await complete(conn, job)
        say("finished", job.id)

    config = WorkerConfig(
        concurrency=args.concurrency,
        batch_size=args.batch,
        lease=args.lease,
        poll_interval=0.2,
        shutdown_timeout=args.shutdown_timeout,
        maintenance=None,
    )
    say("ready")
    stats = await Worker(pool, {"effect": handler}, config).run(handle_signals=True)
    say("stopped", json.dumps({"completed": stats.completed}))
    await pool.close()


async def lock(args: argparse.Namespace) -> None:
    """Take the named lock (waiting), say so, and hold it until killed."""
    pool = await open_pool(os.environ["DATABASE_URL"], max_size=2)
    say("waiting")
    async with advisory_lock(pool, args.name, wait=True) as held:
        say("acquired", held.conn.info.backend_pid)
        await asyncio.Event().wait()


async def periodic(args: argparse.Namespace) -> None:
    """Run a periodic task for --seconds, each run recorded in the ticks table."""
    pool = await open_pool(os.environ["DATABASE_URL"], max_size=3)
    runner = Periodic(pool)

    async def tick() -> None:
        async with pool.connection() as conn:
            await conn.execute(
                "INSERT INTO ticks (task, period, replica) VALUES (%s, "
                "floor(extract(epoch FROM now()) / %s)::bigint, %s)",
                (args.name, args.period, runner.replica),
            )

    runner.every(args.period, args.name, tick)
    await _run_for(pool, runner, args.seconds)


async def cron(args: argparse.Namespace) -> None:
    """Run a cron task for --seconds, each run recorded in the ticks table with its tick."""
    pool = await open_pool(os.environ["DATABASE_URL"], max_size=3)
    runner = Periodic(pool)

    async def tick() -> None:
        # The tick this run claimed is the task's period while the row names this replica:
        # a later tick claimed meanwhile by another replica records nothing, never a wrong tick.
        async with pool.connection() as conn:
            await conn.execute(
                "INSERT INTO ticks (task, period, replica) SELECT name, period, claimed_by"
                " FROM pgenough.periodic WHERE name = %s AND claimed_by = %s",
                (args.name, runner.replica),
            )

    runner.cron(args.expr, args.name, tick)
    await _run_for(pool, runner, args.seconds)


async def _run_for(pool: AsyncConnectionPool, runner: Periodic, seconds: float) -> None:
    """Run ``runner``'s tasks for ``seconds`` between a "ready" and a "done" line."""
    say("ready")
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(seconds)
    runner.stop()
    await task
    say("done")
    await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "mode", choices=["effects", "hold", "crash", "slow", "lock", "periodic", "cron"]
    )
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--until-idle", action="store_true")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--work", type=float, default=0.0, help="effects: seconds a job runs")
    parser.add_argument(
        "--record-starts", action="store_true", help="effects: each start into table starts"
    )
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--shutdown-timeout", type=float, default=30.0)
    parser.add_argument("--name", default="test-lock")
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--expr", default="* * * * * *")
    args = parser.parse_args()
    asyncio.run(globals()[args.mode](args))


if __name__ == "__main__":
    sys.exit(main())
