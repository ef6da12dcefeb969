"""Every producer-side call on a psycopg *sync* connection, in the caller's transaction, and
the transaction rules both kinds of connection share (nothing here commits the caller's)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgenough.core import (
    App,
    NewJob,
    WorkerConfig,
    advisory_lock,
    advisory_xact_lock,
    enqueue,
    enqueue_many,
    get_job,
    publish,
    repair,
    subscribe,
)
from pgenough.core.admin import discard_job, list_jobs, queue_stats, retry_job
from pgenough.core.errors import JobNotFound, LockNotAcquired
from pgenough.core.pubsub import MAX_INLINE_BYTES

pytestmark = pytest.mark.db

FAST = WorkerConfig(poll_interval=0.05, maintenance=None)


@pytest.fixture
def url(db: AsyncConnectionPool, database_url: str) -> str:
    """The test database, emptied (``db``), for sync connections of the test's own."""
    return database_url


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A sync connection in psycopg's default mode (not autocommit), as ORMs use them."""
    with psycopg.connect(url) as c:
        yield c


def count_jobs(url: str, where: str = "true") -> int:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(f"SELECT count(*) FROM pgenough.jobs WHERE {where}").fetchone()
        assert row is not None
        return int(row[0])


def test_enqueue_commits_and_rolls_back_with_the_callers_transaction(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    job_id = enqueue(conn, "mail", {"to": "ann"}, queue="q")
    assert isinstance(job_id, int)
    assert count_jobs(url) == 0  # not visible before the commit
    conn.rollback()
    assert count_jobs(url) == 0
    job_id = enqueue(conn, "mail", {"to": "bob"}, queue="q")
    conn.commit()
    record = get_job(conn, job_id)
    assert record is not None and record.payload == {"to": "bob"} and record.queue == "q"


@pytest.mark.parametrize("dedupe", [False, True], ids=["copy", "copy-dedupe"])
def test_enqueue_many_as_the_first_statement_stays_in_the_callers_transaction(
    url: str, conn: psycopg.Connection[Any], dedupe: bool
) -> None:
    """Idle in non-autocommit mode (Django's atomic() before its first query), psycopg's
    transaction() would BEGIN and COMMIT: the jobs would outlive the caller's rollback."""
    jobs = [NewJob("k", {"n": n}, dedupe_key=f"d{n}" if dedupe else None) for n in range(5)]
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert enqueue_many(conn, jobs) == 5
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    conn.rollback()
    assert count_jobs(url) == 0
    assert enqueue_many(conn, jobs) == 5
    conn.commit()
    assert count_jobs(url) == 5


async def test_enqueue_many_as_the_first_statement_on_an_async_connection(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url) as aconn:
        assert await enqueue_many(aconn, [NewJob("k", n) for n in range(3)]) == 3
        await aconn.rollback()
    assert count_jobs(url) == 0


def test_a_failed_enqueue_many_leaves_the_callers_transaction_usable(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("INSERT INTO effects (job_id) VALUES (1)")
    # jsonb refuses the NUL character: the COPY fails after the first row went in.
    bad = [NewJob("k", {"n": 1}), NewJob("k", {"n": "a\x00b"})]
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        enqueue_many(conn, bad)
    conn.execute("INSERT INTO effects (job_id) VALUES (2)")  # still usable: a savepoint
    conn.commit()
    assert count_jobs(url) == 0
    with psycopg.connect(url) as other:
        rows = other.execute("SELECT job_id FROM effects ORDER BY 1").fetchall()
    assert rows == [(1,), (2,)]


def test_enqueue_many_on_an_autocommit_connection_is_all_or_nothing(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        with pytest.raises(psycopg.errors.UntranslatableCharacter):
            enqueue_many(c, [NewJob("k", 1), NewJob("k", "\x00")])
        assert count_jobs(url) == 0
        assert enqueue_many(c, [NewJob("k", 1), NewJob("k", 2)]) == 2
    assert count_jobs(url) == 2


def test_tasks_enqueued_from_sync_code_are_run_by_a_worker(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    app = App()
    seen: list[tuple[str, int]] = []

    @app.task(queue="sync-q")
    def send(to: str, n: int = 0) -> None:  # a plain def: run in a thread by the worker
        seen.append((to, n))

    assert isinstance(send.enqueue(conn, "ann", n=1), int)
    assert send.enqueue_many(conn, [{"to": "bob"}, send.using(priority=5).job("cy", n=3)]) == 2
    conn.commit()

    async def drain() -> None:
        async with AsyncConnectionPool(url, kwargs={"autocommit": True}) as pool:
            await app.worker(pool, config=FAST).run(until_idle=True)

    asyncio.run(drain())
    assert sorted(seen) == [("ann", 1), ("bob", 0), ("cy", 3)]
    assert count_jobs(url) == 0


async def test_publish_from_sync_code_arrives_after_commit_only(url: str) -> None:
    large = "x" * (MAX_INLINE_BYTES + 10)  # stored in pgenough.messages, sent by reference

    def publish_both(commit: bool) -> None:
        with psycopg.connect(url) as c:
            publish(c, "sync-ch", "small" if commit else "rolled back")
            publish(c, "sync-ch", large if commit else large.upper())
            if commit:
                c.commit()
            else:
                c.rollback()

    async with subscribe(url, "sync-ch") as sub:
        await asyncio.to_thread(publish_both, False)
        await asyncio.to_thread(publish_both, True)
        got = []
        async for item in sub:
            got.append(item.payload)  # type: ignore[union-attr]
            if len(got) == 2:
                break
    assert got == ["small", large]  # the rolled-back pair never arrived first


def test_a_sync_pool_holds_an_advisory_lock_against_async_and_sync_takers(url: str) -> None:
    with ConnectionPool(url, kwargs={"autocommit": True}, min_size=2) as pool:
        with advisory_lock(pool, "sync-lock") as lock:
            assert lock.still_held()

            async def async_taker() -> None:
                async with AsyncConnectionPool(url, kwargs={"autocommit": True}) as apool:
                    with pytest.raises(LockNotAcquired):
                        async with advisory_lock(apool, "sync-lock", wait=False):
                            pass

            asyncio.run(async_taker())
            started = time.monotonic()
            with pytest.raises(LockNotAcquired), advisory_lock(pool, "sync-lock", wait=0.2):
                pass
            assert 0.15 < time.monotonic() - started < 5
        assert not lock.still_held()
        with advisory_lock(pool, "sync-lock", wait=False) as again:
            assert again.still_held()


def test_advisory_lock_refuses_a_bare_connection(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(TypeError, match="advisory_xact_lock"):
        advisory_lock(conn, "x")  # type: ignore[call-overload]


def test_advisory_xact_lock_is_held_until_the_callers_transaction_ends(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("SET LOCAL lock_timeout = '5s'")
    advisory_xact_lock(conn, "order-7")
    with psycopg.connect(url) as other:
        with pytest.raises(LockNotAcquired):
            advisory_xact_lock(other, "order-7", wait=False)
        started = time.monotonic()
        with pytest.raises(LockNotAcquired):
            advisory_xact_lock(other, "order-7", wait=0.2)
        assert 0.15 < time.monotonic() - started < 5
        # The failed waits left the other transaction usable, its lock_timeout its own.
        assert other.execute("SHOW lock_timeout").fetchone() == ("0",)
        other.rollback()
        # Ours is unchanged by the lock taken in it.
        assert conn.execute("SHOW lock_timeout").fetchone() == ("5s",)
        conn.commit()  # released with the transaction
        advisory_xact_lock(other, "order-7", wait=False)
        other.execute("SET LOCAL lock_timeout = '7s'")
        advisory_xact_lock(other, "order-8", wait=1.0)
        assert other.execute("SHOW lock_timeout").fetchone() == ("7s",)


async def test_advisory_xact_lock_on_an_async_connection(url: str) -> None:
    async with (
        await psycopg.AsyncConnection.connect(url) as a,
        await psycopg.AsyncConnection.connect(url) as b,
    ):
        await advisory_xact_lock(a, "async-order")
        with pytest.raises(LockNotAcquired):
            await advisory_xact_lock(b, "async-order", wait=0.1)
        await a.rollback()
        await advisory_xact_lock(b, "async-order", wait=False)


def test_advisory_xact_lock_refuses_autocommit_outside_a_transaction(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        with pytest.raises(ValueError, match="open transaction"):
            advisory_xact_lock(c, "x")
        with c.transaction():
            advisory_xact_lock(c, "x")


def test_operator_actions_and_stats_on_a_sync_connection(
    url: str, conn: psycopg.Connection[Any]
) -> None:
    app = App()

    @app.task(queue="ops", max_attempts=1)
    async def boom(n: int) -> None:
        raise RuntimeError(f"boom {n}")

    ids = [boom.enqueue(conn, n=n) for n in range(3)]
    conn.commit()

    async def drain() -> None:
        async with AsyncConnectionPool(url, kwargs={"autocommit": True}) as pool:
            await app.worker(pool, config=FAST).run(until_idle=True)

    asyncio.run(drain())
    dead = list_jobs(conn, state="dead", queue="ops")
    assert sorted(j.id for j in dead) == sorted(i for i in ids if i is not None)
    assert dead[0].last_error is not None and "boom" in dead[0].last_error
    stats = {s.queue: s for s in queue_stats(conn)}
    assert stats["ops"].dead == 3
    first, second, third = (i for i in ids if i is not None)
    assert repair.retry(conn, first).state == "ready"
    assert repair.discard(conn, second).state == "cancelled"
    assert repair.retry_all_dead(conn, "ops") == 1
    conn.commit()
    retry_job(conn, second)
    discard_job(conn, third)
    conn.rollback()  # these two were the caller's to roll back
    assert {j.id: j.state for j in list_jobs(conn, queue="ops")} == {
        first: "ready",
        second: "cancelled",
        third: "ready",
    }
    with pytest.raises(JobNotFound):
        repair.retry(conn, 10**12)
    conn.rollback()
    conn.execute(
        "UPDATE pgenough.jobs SET state = 'running', lease_until = now() - interval '1 s',"
        " attempts = attempts + 1, worker = 'gone' WHERE id = %s",
        (third,),
    )
    conn.commit()
    rescued = repair.requeue_stuck(conn)
    conn.commit()
    assert (rescued.retried, rescued.dead) == (0, 1)  # max_attempts 1, spent


def test_calls_refuse_what_is_not_a_psycopg_connection(url: str) -> None:
    with ConnectionPool(url, min_size=1) as pool, pytest.raises(TypeError, match="orm"):
        enqueue(pool, "k")  # type: ignore[call-overload]


async def test_the_async_connection_runs_the_same_plans(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
        job_id = await enqueue(aconn, "k", {"a": 1}, queue="same")
        assert job_id is not None
        record = await get_job(aconn, job_id)
        assert record is not None and record.payload == {"a": 1}
        assert [s.queue for s in await queue_stats(aconn)] == ["same"]
        assert (await repair.discard(aconn, job_id)).state == "cancelled"
