"""Retries with backoff, dead letters, operator retry, handler outcomes, wake-up, heartbeats,
graceful shutdown."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from datetime import timedelta

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    Backoff,
    GiveUp,
    Job,
    NewJob,
    RetryIn,
    ThreadHandler,
    Worker,
    WorkerConfig,
    enqueue,
    enqueue_many,
    get_job,
)
from pgenough.core.admin import retry_dead, retry_job
from pgenough.core.maintenance import MaintenanceConfig
from tests.helpers.procs import Proc

pytestmark = pytest.mark.db


async def make_due(pool: AsyncConnectionPool) -> None:
    """Skip the backoff wait: the backoff itself was checked before this is called."""
    async with pool.connection() as conn:
        await conn.execute("UPDATE pgenough.jobs SET run_at = now() WHERE state = 'ready'")


async def test_failures_back_off_then_dead_letter_then_operator_retry(
    db: AsyncConnectionPool,
) -> None:
    backoff = Backoff(base=10.0, cap=3600.0)
    async with db.connection() as conn:
        job_id = await enqueue(conn, "flaky", {"x": 1}, max_attempts=3)
    assert job_id is not None
    succeed = False
    calls: list[int] = []

    async def flaky(job: Job) -> None:
        calls.append(job.attempts)
        if not succeed:
            raise ValueError(f"boom {job.attempts}")

    config = WorkerConfig(backoff=backoff, maintenance=None)
    for attempt in (1, 2):
        await Worker(db, {"flaky": flaky}, config).run(until_idle=True)
        async with db.connection() as conn:
            record = await get_job(conn, job_id)
            cur = await conn.execute(
                "SELECT extract(epoch FROM run_at - (errors -> -1 ->> 'at')::timestamptz)"
                " FROM pgenough.jobs WHERE id = %s",
                (job_id,),
            )
            row = await cur.fetchone()
        assert record is not None
        assert (record.state, record.attempts) == ("ready", attempt)
        assert record.last_error == f"ValueError: boom {attempt}"
        assert row is not None
        delay = float(row[0])
        ceiling = backoff.ceiling(attempt)
        assert ceiling / 2 <= delay <= ceiling, (attempt, delay)
        await make_due(db)

    await Worker(db, {"flaky": flaky}, config).run(until_idle=True)
    async with db.connection() as conn:
        record = await get_job(conn, job_id)
    assert record is not None
    assert (record.state, record.attempts) == ("dead", 3)
    assert record.finished_at is not None
    assert [e.error for e in record.errors] == [f"ValueError: boom {n}" for n in (1, 2, 3)]
    assert calls == [1, 2, 3]

    # Dead jobs are not claimed...
    await Worker(db, {"flaky": flaky}, config).run(until_idle=True)
    assert calls == [1, 2, 3]
    # ...until an operator retries them; a spent job gets one more attempt.
    succeed = True
    async with db.connection() as conn:
        await retry_job(conn, job_id)
        record = await get_job(conn, job_id)
    assert record is not None and (record.state, record.max_attempts) == ("ready", 4)
    await Worker(db, {"flaky": flaky}, config).run(until_idle=True)
    assert calls == [1, 2, 3, 4]
    async with db.connection() as conn:
        assert await get_job(conn, job_id) is None  # completed


async def test_retry_in_and_give_up(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        later = await enqueue(conn, "later", None)
        hopeless = await enqueue(conn, "hopeless", None, max_attempts=10)

    async def retry_later(job: Job) -> None:
        raise RetryIn(120, "provider asked us to wait")

    async def give_up(job: Job) -> None:
        raise GiveUp("record is malformed")

    await Worker(
        db, {"later": retry_later, "hopeless": give_up}, WorkerConfig(maintenance=None)
    ).run(until_idle=True)
    async with db.connection() as conn:
        r_later = await get_job(conn, later)  # type: ignore[arg-type]
        r_hopeless = await get_job(conn, hopeless)  # type: ignore[arg-type]
        cur = await conn.execute(
            "SELECT extract(epoch FROM run_at - now()) FROM pgenough.jobs WHERE id = %s", (later,)
        )
        row = await cur.fetchone()
    assert r_later is not None and r_later.state == "ready"
    assert r_later.last_error == "provider asked us to wait (retry in 120s)"
    assert row is not None and 100 < float(row[0]) <= 120
    assert r_hopeless is not None and (r_hopeless.state, r_hopeless.attempts) == ("dead", 1)
    assert r_hopeless.last_error == "gave up: record is malformed"
    async with db.connection() as conn:
        assert await retry_dead(conn) == 1


async def test_idle_worker_wakes_on_notify_not_polling(db: AsyncConnectionPool) -> None:
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()

    # A poll interval far beyond the wait below: only the notification can explain a start.
    worker = Worker(db, {"t": handler}, WorkerConfig(poll_interval=600, maintenance=None))
    run = asyncio.create_task(worker.run())
    try:
        await worker.wait_listening()
        await asyncio.sleep(0.2)  # let the first (empty) claim finish so the worker is idle
        async with db.connection() as conn:
            await enqueue(conn, "t", None)
        await asyncio.wait_for(started.wait(), 30)
    finally:
        worker.stop()
        await run


class Running:
    """Jobs whose handler has started and not returned, counted from the event loop's thread
    or from handler threads; ``reached(n)`` waits (on events, with a deadline) for n at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = self.finished = 0
        self.changed = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        self.loop.call_soon_threadsafe(self.changed.set)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1
            self.finished += 1
        self.loop.call_soon_threadsafe(self.changed.set)

    async def reached(self, n: int, what: str, timeout: float = 30.0) -> None:
        await self._until(lambda: self.now >= n, f"{what}: {n} running", timeout)

    async def ended(self, n: int, timeout: float = 30.0) -> None:
        await self._until(lambda: self.finished >= n, f"{n} finished", timeout)

    async def _until(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        async def wait() -> None:
            while not done():
                self.changed.clear()
                await self.changed.wait()

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            counts = f"{self.now} running, {self.finished} done"
            pytest.fail(f"not {what} after {timeout:g} s ({counts})")


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_every_free_slot_takes_a_ready_job(db: AsyncConnectionPool, kind: str) -> None:
    """A queue of concurrency 12 claiming 10 at a time runs 12 jobs at once, not 10 with 2
    slots idle (``--queue q=12``, plain functions and coroutines alike). The poll interval is
    far beyond the deadlines: the claim loop itself must take the last two."""
    running = Running()
    release = threading.Event()
    released = asyncio.Event()

    def blocking(job: Job) -> None:
        running.enter()
        try:
            release.wait(60)
        finally:
            running.leave()

    async def waiting(job: Job) -> None:
        running.enter()
        try:
            await released.wait()
        finally:
            running.leave()

    async with db.connection() as conn:
        await enqueue_many(conn, [NewJob("j", i) for i in range(24)])
    handler = ThreadHandler(blocking) if kind == "sync" else waiting
    config = WorkerConfig(concurrency=12, batch_size=10, poll_interval=600, maintenance=None)
    worker = Worker(db, {"j": handler}, config)
    run = asyncio.create_task(worker.run())
    try:
        await running.reached(12, "12 slots, 24 ready jobs")
        release.set()
        released.set()
        await running.ended(24)
    finally:
        release.set()
        released.set()
        worker.stop()
        await run
    assert running.most == 12
    assert worker.stats.completed == 24


async def test_short_jobs_take_the_free_slots_beside_long_ones(db: AsyncConnectionPool) -> None:
    """With the defaults (10 slots, claims of 10), 6 long jobs running and 4 short ones
    enqueued: the short ones run at once in the 4 free slots (woken by the enqueue's
    notification), not when a long one ends."""
    running = Running()
    release = asyncio.Event()
    short_done: list[int] = []
    all_short = asyncio.Event()

    async def long_job(job: Job) -> None:
        running.enter()
        try:
            await release.wait()
        finally:
            running.leave()

    async def short_job(job: Job) -> None:
        short_done.append(job.id)
        if len(short_done) == 4:
            all_short.set()

    worker = Worker(
        db,
        {"long": long_job, "short": short_job},
        WorkerConfig(poll_interval=600, maintenance=None),
    )
    run = asyncio.create_task(worker.run())
    try:
        await worker.wait_listening()
        async with db.connection() as conn:
            await enqueue_many(conn, [NewJob("long", i) for i in range(6)])
        await running.reached(6, "6 long jobs")
        async with db.connection() as conn:
            await enqueue_many(conn, [NewJob("short", i) for i in range(4)])
        try:
            await asyncio.wait_for(all_short.wait(), 30)
        except TimeoutError:
            pytest.fail(f"{len(short_done)} of 4 short jobs ran in 30 s beside 6 long ones")
        assert running.now == 6  # the long ones still run: the short ones did not wait
    finally:
        release.set()
        worker.stop()
        await run
    assert worker.stats.completed == 10


async def test_heartbeat_keeps_a_long_job_from_being_reclaimed(db: AsyncConnectionPool) -> None:
    async with db.connection() as conn:
        job_id = await enqueue(conn, "long", None)
    attempts: list[int] = []

    async def long_job(job: Job) -> None:
        attempts.append(job.attempts)
        await asyncio.sleep(5.0)  # two and a half leases long

    # A 2 s lease beats every 0.67 s: a beat may come 1.3 s late before the lease lapses. With a
    # 1 s lease (0.67 s of slack) the job was once reclaimed on CI's loaded 5432 pass.
    config = WorkerConfig(
        lease=2.0,
        poll_interval=0.2,
        maintenance=MaintenanceConfig(rescue_interval=0.2),
    )
    worker = Worker(db, {"long": long_job}, config)
    run = asyncio.create_task(worker.run())
    try:

        async def gone() -> None:
            while True:
                async with db.connection() as conn:
                    if await get_job(conn, job_id) is None:  # type: ignore[arg-type]
                        return
                await asyncio.sleep(0.1)

        await asyncio.wait_for(gone(), 30)
    finally:
        worker.stop()
        await run
    assert attempts == [1]


@pytest.mark.slow
def test_sigterm_lets_running_jobs_finish(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        for _ in range(4):
            conn.execute("INSERT INTO pgenough.jobs (kind) VALUES ('effect')")
    proc = Proc(worker_env, "slow", "--seconds", "1.5", "--concurrency", "2", "--batch", "1")
    try:
        proc.expect("started")
        proc.expect("started")
        proc.popen.send_signal(signal.SIGTERM)
        proc.expect("stopped", timeout=30)
        assert proc.wait() == 0
    finally:
        proc.kill()
    assert sum(line.startswith("finished") for line in proc.lines) == 2
    with psycopg.connect(database_url) as conn:
        states = conn.execute(
            "SELECT state::text, attempts FROM pgenough.jobs ORDER BY id"
        ).fetchall()
        effects = conn.execute("SELECT count(*) FROM effects").fetchone()
    assert effects == (2,)
    assert states == [("ready", 0), ("ready", 0)]  # never claimed, untouched


@pytest.mark.slow
def test_shutdown_timeout_releases_unfinished_jobs(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO pgenough.jobs (kind) VALUES ('effect')")
    proc = Proc(worker_env, "slow", "--seconds", "600", "--shutdown-timeout", "0.5")
    try:
        proc.expect("started")
        proc.popen.send_signal(signal.SIGTERM)
        proc.expect("stopped", timeout=30)
    finally:
        proc.kill()
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT state::text, attempts, worker, last_error, run_at <= now() FROM pgenough.jobs"
        ).fetchone()
    assert row == (
        "ready",
        1,
        None,
        "interrupted: the worker shut down before the handler finished",
        True,
    )


def test_worker_config_rejects_impossible_values() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        WorkerConfig(concurrency=0)
    with pytest.raises(ValueError, match="lease"):
        WorkerConfig(lease=0)
    with pytest.raises(ValueError, match="backoff"):
        Backoff(base=0)
    assert timedelta(seconds=Backoff().ceiling(100)) == timedelta(hours=1)
