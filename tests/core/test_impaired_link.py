"""Workers on other hosts, over a link with latency, stalls and resets (issue 25): what a
fault on the path does to a worker, through the proxy of tests/helpers/netproxy.py, whose
stalls are black holes (no packet crosses: the peers' own TCP timers decide, and
``PGENOUGH_NETWORK_TIMEOUT`` sets ours).

- One connection dies silently under the heartbeat: the worker keeps its claims.
- A periodic task whose connection is reset: one warning line, and it runs again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    Job,
    MaintenanceConfig,
    Periodic,
    Worker,
    WorkerConfig,
    complete,
    enqueue,
    open_pool,
)
from pgenough.core.db import with_network_timeout
from tests.helpers.netproxy import Proxy

pytestmark = [pytest.mark.db, pytest.mark.slow]


async def _scalar(pool: AsyncConnectionPool, query: str, *params: Any) -> Any:
    async with pool.connection() as conn:
        row = await (await conn.execute(query, params or None)).fetchone()
    return row[0] if row else None


def loop_time() -> float:
    return asyncio.get_running_loop().time()


HEARTBEAT = b"SET lease_until = now()"
"""The heartbeat statement's text (``queue.sql``, sent unprepared every time)."""


async def test_a_heartbeat_stuck_on_a_dead_connection_does_not_cost_the_claims(
    db: AsyncConnectionPool, database_url: str
) -> None:
    """One connection of a healthy worker dies silently (a NAT forgot it, a stall on its
    flow only) just as the heartbeat uses it: the heartbeat must not wait for the network
    timeout to give up on it while the leases run out. With a network timeout longer than
    what the lease leaves after a heartbeat interval (here 6 s against 3 - 1 s; with the
    defaults, 20 s against 30 - 10 s: no margin), the claims of jobs still running would
    expire and run again elsewhere."""
    lease, network_timeout, job_s = 3.0, 6.0, 7.0
    link = Proxy(database_url)
    runs: list[int] = []
    async with link.running():
        assert link.url is not None
        pool = await open_pool(
            with_network_timeout(link.url, network_timeout),
            min_size=2,
            max_size=6,
            prepared_statements=False,
            name="heartbeat-stall",
        )

        async def slow(job: Job) -> None:
            runs.append(job.attempts)
            await asyncio.sleep(job_s)
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, %s, 'slow')",
                    (job.id, job.attempts),
                )
                await complete(conn, job)

        config = WorkerConfig(
            concurrency=1,
            batch_size=1,
            lease=lease,
            poll_interval=0.2,
            maintenance=MaintenanceConfig(rescue_interval=0.25),
        )
        worker = Worker(pool, {"slow": slow}, config)
        link.stall_when(HEARTBEAT, seconds=60)  # the first heartbeat's connection: dead
        async with db.connection() as conn:
            await enqueue(conn, "slow", {})
        task = asyncio.create_task(worker.run())
        try:
            deadline = loop_time() + 3 * job_s
            while await _scalar(db, "SELECT count(*) FROM effects") == 0:
                assert loop_time() < deadline, f"no effect after {3 * job_s:g} s (runs {runs})"
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await task
            await pool.close()
    assert [e.kind for e in link.events] == ["stall"]  # the heartbeat's connection was hit
    attempts = await _scalar(db, "SELECT attempts FROM effects")
    assert (runs, attempts, worker.stats.lost) == ([1], 1, 0)


async def test_a_periodic_task_whose_connection_fails_says_so_in_one_line(
    db: AsyncConnectionPool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A reset under a periodic duty (the rescuer's, the cleaner's, yours) is the network's
    doing, not a bug of the task: one warning line with the reason, no traceback, and the
    next tick runs it again."""
    marker = b"periodic-reset-marker"
    link = Proxy(database_url)
    ran: list[float] = []
    async with link.running():
        assert link.url is not None
        pool = await open_pool(link.url, max_size=2, name="periodic-reset")
        runner = Periodic(pool)

        async def tick() -> None:
            async with pool.connection() as conn:
                await conn.execute(f"SELECT '{marker.decode()}'")
            ran.append(loop_time())

        runner.every(0.2, "link.reset-tick", tick)
        link.reset_when(marker)
        task = asyncio.create_task(runner.run())
        try:
            deadline = loop_time() + 10
            while not ran:
                assert loop_time() < deadline, "the task did not run after the reset"
                await asyncio.sleep(0.05)
        finally:
            runner.stop()
            await task
            await pool.close()
    assert [e.kind for e in link.events] == ["reset"]
    failed = [r for r in caplog.records if "link.reset-tick failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in caplog.records]
    assert failed[0].levelno == logging.WARNING and failed[0].exc_info is None
    assert "it runs again at its next tick" in failed[0].getMessage()
