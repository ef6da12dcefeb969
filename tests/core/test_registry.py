"""Live workers (``pgenough.workers``): a worker is listed from its start to its stop with
the jobs it runs; one killed without stopping stays listed, gone, until the cleaner forgets
it. On real PostgreSQL, with real workers (in-process, and a ``pgenough worker run`` process
killed with SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Job, Worker, WorkerConfig, enqueue
from pgenough.core.admin import WorkerInfo, list_workers
from pgenough.core.maintenance import MaintenanceConfig, clean
from pgenough.core.registry import ALIVE_AFTER, GONE_RETENTION
from tests.helpers.procs import WORKER_STARTED, Proc, wait_until
from tests.test_cli_inspect import cli, cli_json

pytestmark = pytest.mark.db
WAIT = 30.0


async def workers(db: AsyncConnectionPool) -> list[WorkerInfo]:
    async with db.connection() as conn:
        return await list_workers(conn)


async def test_a_running_worker_is_listed_with_the_jobs_it_runs_then_gone_at_its_stop(
    db: AsyncConnectionPool, database_url: str
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Job) -> None:
        started.set()
        await release.wait()

    async with db.connection() as conn:
        held = await enqueue(conn, "hold", queue="slow")
    worker = Worker(
        db,
        {"hold": hold},
        WorkerConfig(queue="slow", maintenance=None),
        WorkerConfig(queue="fast", maintenance=None),
        name="lister",
    )
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(started.wait(), WAIT)
        [me] = await workers(db)
        assert (me.name, me.host, me.pid, me.queues) == (
            "lister",
            socket.gethostname(),
            os.getpid(),
            ["slow", "fast"],
        )
        assert me.alive and me.seen_ago < ALIVE_AFTER
        # The job is held by the worker's executor of its queue (lister/slow).
        assert me.running_count == 1
        assert [(j.id, j.kind, j.queue) for j in me.running] == [(held, "hold", "slow")]
        # `pgenough status` shows it, and what it runs.
        status = await cli_json(database_url, "status")
        assert [(w["name"], w["running_count"]) for w in status["workers"]] == [("lister", 1)]
        table = await cli(database_url, "status")
        assert re.search(rf"lister .* slow, fast .* 1 +{held} hold", table.stdout), table.stdout
    finally:
        release.set()
        worker.stop()
        await asyncio.wait_for(run, WAIT)
    assert await workers(db) == []


async def test_a_worker_killed_without_stopping_stays_listed_as_gone_until_cleaned(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    proc = Proc.pgenough(worker_env, "worker", "run", "tests.helpers.taskapp:app")
    try:
        proc.expect(lambda line: WORKER_STARTED.search(line) is not None, timeout=WAIT)

        async def listed() -> bool:
            return any(w.pid == proc.popen.pid for w in await workers(db))

        await wait_until(listed, WAIT, "the worker process listed")
    finally:
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(WAIT)
    [dead] = [w for w in await workers(db) if w.pid == proc.popen.pid]
    # Its heartbeat stopped: once older than ALIVE_AFTER it reads as gone (made so here
    # rather than waited for), and the cleaner forgets it past the retention.
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE pgenough.workers SET last_seen_at = now() - %s * interval '1 second'"
            " WHERE name = %s",
            [ALIVE_AFTER + 1, dead.name],
        )
    [gone] = await workers(db)
    assert not gone.alive and gone.seen_ago > ALIVE_AFTER
    async with db.connection() as conn:
        assert (await clean(conn, MaintenanceConfig())).workers_forgotten == 0
        await conn.execute(
            "UPDATE pgenough.workers SET last_seen_at = now() - %s * interval '1 second'",
            [GONE_RETENTION + 1],
        )
        assert (await clean(conn, MaintenanceConfig())).workers_forgotten == 1
    assert await workers(db) == []
