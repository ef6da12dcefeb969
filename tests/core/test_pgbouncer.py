"""The core behind a real PgBouncer in transaction pooling mode (tests/helpers/pgbouncer.py):
claims, enqueues, completions, heartbeats, periodic claims and transaction-scoped advisory
locks through the pooler; the workers' listener on a direct connection.

Many workers through a small pool keep the server's backends at the pool's size and lose
and duplicate nothing; the listener still wakes idle workers; the pooler restarted mid-run
costs a few seconds, not a restart of the workers. Every wait is on an event or a polled
condition with a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    Job,
    NewJob,
    Periodic,
    Worker,
    WorkerConfig,
    advisory_xact_lock,
    complete,
    enqueue,
    enqueue_many,
    open_pool,
)
from pgenough.core.maintenance import MaintenanceConfig
from pgenough.core.worker._listener import LISTENER_APPLICATION_PREFIX
from tests.helpers.pgbouncer import Bouncer, bouncer
from tests.helpers.procs import wait_until

pytestmark = [pytest.mark.db, pytest.mark.slow]
POOL_SIZE = 5
"""PgBouncer's ``default_pool_size``: the most server connections it opens for the database."""
WORKERS = 4
CONNECTIONS = 10
"""Pool connections per worker: WORKERS x CONNECTIONS = 40 client connections to PgBouncer."""
APP = "pgb-worker"
"""``application_name`` prefix of the workers' pools (PgBouncer sets it on the server
connection that runs each of their transactions)."""
WAIT = 60.0
DOWN = 16.0
"""Seconds the pooler stays down in the restart test: long enough that psycopg_pool's own
reconnect backoff (1, 2, 4, 8, 16 s: the next attempt 31 s after the loss) would keep the
workers waiting some 15 s after the pooler is back."""
RESUME = 8.0
"""Seconds after the pooler is back within which the workers must be committing again."""


@pytest.fixture
def pgb(server_url: str) -> Iterator[Bouncer]:
    with bouncer(server_url, pool_size=POOL_SIZE) as b:
        yield b


@pytest.fixture
def pooled_url(pgb: Bouncer, database_url: str) -> str:
    """The test database through the pooler."""
    return pgb.url(conninfo_to_dict(database_url)["dbname"])


async def pooled_pool(url: str, name: str, size: int = CONNECTIONS) -> AsyncConnectionPool:
    # Transaction pooling in PgBouncer < 1.21 cannot carry prepared statements.
    return await open_pool(url, min_size=size, max_size=size, name=name, prepared_statements=False)


async def backends(db: AsyncConnectionPool) -> tuple[int, int]:
    """(server backends of this database other than the listeners and the tests' own,
    the listeners' direct sessions)."""
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE application_name NOT LIKE %(listener)s),"
            "       count(*) FILTER (WHERE application_name LIKE %(listener)s)"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name <> 'pgenough-tests'",
            {"listener": LISTENER_APPLICATION_PREFIX + "%"},
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def effects(db: AsyncConnectionPool) -> tuple[int, int, int]:
    """(effects, of those run more than once, jobs left)."""
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT (SELECT count(*) FROM effects),"
            " (SELECT count(*) FROM effects WHERE attempts > 1),"
            " (SELECT count(*) FROM pgenough.jobs)"
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


class Fleet:
    """WORKERS workers, each with its own pool through the pooler and its listener direct."""

    def __init__(
        self, pooled_url: str, direct_url: str, config: WorkerConfig, connections: int = CONNECTIONS
    ) -> None:
        self.connections = connections
        self.pooled_url = pooled_url
        self.direct_url = direct_url
        self.config = config
        self.pools: list[AsyncConnectionPool] = []
        self.workers: list[Worker] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.done_at: list[float] = []
        """When each effect committed (monotonic), in order."""

    def handler(self, pool: AsyncConnectionPool, name: str) -> Any:
        async def effect(job: Job) -> None:
            # Transactional completion: the effect and the job's completion commit together.
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, 1, %s)"
                    " ON CONFLICT (job_id) DO UPDATE SET attempts = effects.attempts + 1",
                    (job.id, name),
                )
                await complete(conn, job)
            self.done_at.append(time.monotonic())

        return effect

    async def __aenter__(self) -> Fleet:
        for n in range(WORKERS):
            name = f"{APP}-{n}"
            pool = await pooled_pool(self.pooled_url, name, self.connections)
            self.pools.append(pool)
            worker = Worker(
                pool,
                {"effect": self.handler(pool, name)},
                self.config,
                name=name,
                listen_url=self.direct_url,
            )
            self.workers.append(worker)
            self.tasks.append(asyncio.create_task(worker.run()))
        for worker in self.workers:
            await worker.wait_listening(WAIT)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for worker in self.workers:
            worker.stop()
        await asyncio.wait_for(asyncio.gather(*self.tasks, return_exceptions=True), WAIT)
        for pool in self.pools:
            await pool.close()


@pytest.fixture
async def producer(pooled_url: str) -> AsyncIterator[AsyncConnectionPool]:
    """A pool that enqueues through the pooler."""
    pool = await pooled_pool(pooled_url, "pgb-producer", size=2)
    yield pool
    await pool.close()


async def test_many_workers_through_a_small_pool_bounded_backends_nothing_lost_or_twice(
    db: AsyncConnectionPool,
    database_url: str,
    pooled_url: str,
    producer: AsyncConnectionPool,
) -> None:
    jobs = 2000
    config = WorkerConfig(concurrency=20, batch_size=10, poll_interval=30.0)
    async with Fleet(pooled_url, database_url, config) as fleet:
        seen: list[tuple[int, int]] = []
        async with producer.connection() as conn, conn.transaction():
            await enqueue_many(conn, [NewJob("effect", {"n": n}) for n in range(jobs)])

        async def drained() -> bool:
            seen.append(await backends(db))
            return (await effects(db))[0] == jobs

        await wait_until(drained, WAIT, "every job's effect")
        assert await effects(db) == (jobs, 0, 0)
        pooled = max(n for n, _ in seen)
        # 40 client connections, at most POOL_SIZE server connections behind them.
        assert 0 < pooled <= POOL_SIZE, seen
        assert {listeners for _, listeners in seen} == {WORKERS}, seen

        # Idle now, polling every 30 s: only the listener (direct) can wake them at once.
        before = len(fleet.done_at)
        start = time.monotonic()
        async with producer.connection() as conn:
            await enqueue(conn, "effect", {"n": "late"})
        await wait_until(
            lambda: _async_true(len(fleet.done_at) > before), 10.0, "an idle worker woken"
        )
        assert time.monotonic() - start < 5.0
    assert await effects(db) == (jobs + 1, 0, 0)


async def _async_true(value: bool) -> bool:
    return value


@pytest.mark.serial
async def test_the_pooler_restarted_mid_run_every_job_done_once_workers_resume(
    db: AsyncConnectionPool,
    database_url: str,
    pooled_url: str,
    pgb: Bouncer,
    producer: AsyncConnectionPool,
) -> None:
    jobs = 1000
    # A short lease and rescue interval: a claim whose worker could not record its outcome
    # while the pooler was down comes back within seconds.
    config = WorkerConfig(
        concurrency=2,
        batch_size=2,
        lease=6.0,
        poll_interval=1.0,
        maintenance=MaintenanceConfig(rescue_interval=1.0),
    )
    async with producer.connection() as conn, conn.transaction():
        await enqueue_many(conn, [NewJob("effect", {"n": n}) for n in range(jobs)])
    # Small pools (a claim loop, two handlers, the heartbeat and the duties on 4
    # connections): every connection of a pool is lost at the same moment, and replaced on
    # the same schedule.
    async with Fleet(pooled_url, database_url, config, connections=4) as fleet:
        await wait_until(
            lambda: _async_true(len(fleet.done_at) >= jobs // 5), WAIT, "a fifth of the jobs"
        )
        # Down for a while, as a real restart or a failover of the pooler is: every
        # connection attempt of the workers' pools is refused meanwhile.
        await asyncio.to_thread(pgb.restart, DOWN)
        restarted = time.monotonic()
        done_before = len(fleet.done_at)
        await wait_until(
            lambda: _async_true(len(fleet.done_at) > done_before + 50),
            WAIT,
            "work going on after the restart",
        )
        resumed = next(t for t in fleet.done_at[done_before:] if t > restarted) - restarted
        # Soon after the pooler's return, without restarting anything.
        assert resumed < RESUME, f"workers resumed {resumed:.1f} s after the pooler came back"

        async def drained() -> bool:
            return (await effects(db))[0] == jobs and (await effects(db))[2] == 0

        await wait_until(drained, WAIT, "every job done")
        assert await effects(db) == (jobs, 0, 0)
    assert pgb.restarts == 1


async def test_transaction_advisory_locks_exclude_through_the_pooler(
    db: AsyncConnectionPool, pooled_url: str
) -> None:
    pool = await pooled_pool(pooled_url, "pgb-locks", size=10)
    try:
        async with db.connection() as conn:
            await conn.execute("DROP TABLE IF EXISTS pgb_counter")
            await conn.execute("CREATE TABLE pgb_counter (n int NOT NULL)")
            await conn.execute("INSERT INTO pgb_counter VALUES (0)")

        async def bump() -> None:
            for _ in range(10):
                async with pool.connection() as conn, conn.transaction():
                    await advisory_xact_lock(conn, "pgb-counter")
                    cur = await conn.execute("SELECT n FROM pgb_counter")
                    row = await cur.fetchone()
                    assert row is not None
                    # Read, then write what was read plus one: a lost update without the lock.
                    await conn.execute("SELECT pg_sleep(0.002)")
                    await conn.execute("UPDATE pgb_counter SET n = %s", (row[0] + 1,))

        await asyncio.wait_for(asyncio.gather(*(bump() for _ in range(20))), WAIT)
        async with db.connection() as conn:
            cur = await conn.execute("SELECT n FROM pgb_counter")
            assert await cur.fetchone() == (200,)
    finally:
        await pool.close()


async def test_periodic_claims_through_the_pooler_run_a_tick_once(
    db: AsyncConnectionPool, pooled_url: str
) -> None:
    pools = [await pooled_pool(pooled_url, f"pgb-periodic-{n}", size=2) for n in range(3)]
    try:
        runs: list[str] = []
        replicas = [Periodic(pool, replica=f"r{n}") for n, pool in enumerate(pools)]
        for n, periodic in enumerate(replicas):

            async def tick(n: int = n) -> None:
                runs.append(f"r{n}")

            periodic.every(3600.0, name="pgb-hourly")(tick)
        # Each replica claims the same tick many times (more than psycopg's prepare
        # threshold): the hour's tick runs on exactly one of them.
        for _ in range(8):
            await asyncio.gather(*(p.run_once(p._tasks["pgb-hourly"]) for p in replicas))
        assert len(runs) == 1, runs
    finally:
        for pool in pools:
            await pool.close()


async def test_prepared_statements_break_through_the_pooler_unless_turned_off(
    server_url: str, database_url: str
) -> None:
    """The rule of docs/operations/index.md: PgBouncer < 1.21 in transaction mode cannot carry
    psycopg's automatic prepared statements; ``prepared_statements=False`` can.

    Made certain rather than left to the pooler's choice of server connection: on a pooler
    of two server connections, the client prepares its statement on one (inside a
    transaction, so it holds it), another client holds the second while the first is handed
    to a third, then the first client's next transaction can only get the server that never
    saw its statement."""
    dbname = conninfo_to_dict(database_url)["dbname"]
    with bouncer(server_url, pool_size=2) as small:
        url = small.url(dbname)

        async def hop(prepared: bool) -> None:
            options: dict[str, Any] = {"autocommit": True}
            if not prepared:
                options["prepare_threshold"] = None
            client = await psycopg.AsyncConnection.connect(url, **options)
            holder = await psycopg.AsyncConnection.connect(url, autocommit=True)
            third = await psycopg.AsyncConnection.connect(url, autocommit=True)
            try:
                if prepared:
                    client.prepare_threshold = 0  # prepared at its first execution
                async with client.transaction():
                    await client.execute("SELECT %s::int + 1", (1,))  # server A, held
                    await holder.execute("BEGIN")
                    await holder.execute("SELECT 1")  # server B, held
                await third.execute("BEGIN")
                await third.execute("SELECT 1")  # the only free server: A
                await holder.execute("COMMIT")  # B free, and the only one
                await client.execute("SELECT %s::int + 1", (2,))  # on B
            finally:
                for conn in (client, holder, third):
                    await conn.close()

        await asyncio.wait_for(hop(prepared=False), WAIT)
        with pytest.raises(psycopg.errors.Error, match="prepared statement"):
            await asyncio.wait_for(hop(prepared=True), WAIT)
