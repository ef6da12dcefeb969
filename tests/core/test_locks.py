"""Named advisory locks: stable keys, try/wait/timeout, and release when the holder dies."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import advisory_lock
from pgenough.core.errors import LockNotAcquired
from pgenough.core.locks import lock_key
from tests.helpers.procs import Proc, wait_for


def test_lock_key_is_stable_and_signed_64_bit() -> None:
    # Pinned: a changed key would let old and new replicas hold "the same" lock at once.
    assert lock_key("pgenough.migrate") == -3467313045718671186
    assert lock_key("provider:fever") == 6117236879970670784
    assert lock_key("a") != lock_key("b")
    assert all(-(2**63) <= lock_key(str(n)) < 2**63 for n in range(1000))


@pytest.mark.db
async def test_try_wait_and_timeout(db: AsyncConnectionPool) -> None:
    async with advisory_lock(db, "job:42", wait=False) as held:
        assert await held.still_held()
        with pytest.raises(LockNotAcquired, match="'job:42' is held"):
            async with advisory_lock(db, "job:42", wait=False):
                pass
        with pytest.raises(LockNotAcquired):
            async with advisory_lock(db, "job:42", wait=0.2):
                pass
        async with advisory_lock(db, "job:43", wait=False):
            pass  # another name is another lock

        entered = asyncio.Event()

        async def waiter() -> None:
            async with advisory_lock(db, "job:42", wait=True):
                entered.set()

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.3)
        assert not entered.is_set()
    await asyncio.wait_for(task, 10)
    assert entered.is_set()


@pytest.mark.db
@pytest.mark.slow
def test_two_processes_one_holder_and_kill_9_hands_over(
    db: AsyncConnectionPool, worker_env: dict[str, str], database_url: str
) -> None:
    key = lock_key("test-lock")
    first = Proc(worker_env, "lock", "--name", "test-lock")
    second: Proc | None = None
    try:
        holder_pid = int(first.expect("acquired").split()[1])
        second = Proc(worker_env, "lock", "--name", "test-lock")
        second.expect("waiting")

        def waiting_sessions() -> list[tuple[int, bool]]:
            with psycopg.connect(database_url) as conn:
                return conn.execute(  # type: ignore[return-value]
                    "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory'"
                    " AND database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                    " AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = %s",
                    (key,),
                ).fetchall()

        wait_for(lambda: len(waiting_sessions()) == 2, what="the second process to queue")
        sessions = dict(waiting_sessions())
        assert sessions[holder_pid] is True
        assert sorted(sessions.values()) == [False, True]  # exactly one holder
        assert not any(line.startswith("acquired") for line in second.lines)

        first.kill()
        second.expect("acquired", timeout=30)
    finally:
        first.kill()
        if second is not None:
            second.kill()
