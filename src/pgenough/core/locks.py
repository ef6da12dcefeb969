"""Named advisory locks.

A name maps to a stable signed 64-bit key (the first 8 bytes of its BLAKE2b digest; never
Python's per-process ``hash()``). The lock is session-scoped: it is held on a connection kept
for the whole critical section, and PostgreSQL releases it when that session ends - also when
its process is killed.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core._sql import load
from pgenough.core.errors import LockNotAcquired, translate_db_errors

_Q = load("locks")


def lock_key(name: str) -> int:
    """The advisory-lock key of ``name``: stable across processes, versions and hosts."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass
class Lock:
    """A held advisory lock and the connection that holds it."""

    name: str
    key: int
    conn: psycopg.AsyncConnection[Any]

    async def still_held(self) -> bool:
        """Whether this session still holds the lock (False if the connection was lost)."""
        try:
            cur = await self.conn.execute(_Q["lock_held"], {"key": self.key})
            row = await cur.fetchone()
        except psycopg.OperationalError:
            return False
        return bool(row and row[0])


@asynccontextmanager
async def advisory_lock(
    pool: AsyncConnectionPool, name: str, *, wait: bool | float = True
) -> AsyncIterator[Lock]:
    """Hold the advisory lock ``name`` for the body of the ``async with``.

    ``wait=False`` raises ``LockNotAcquired`` at once when another session holds it;
    ``wait=True`` waits as long as it takes; a number waits at most that many seconds, then
    raises ``LockNotAcquired``. The connection stays out of the pool for the critical
    section, and is closed rather than returned if the lock cannot be released cleanly.
    """
    key = lock_key(name)
    with translate_db_errors(f"advisory lock {name!r}"):
        conn = await pool.getconn()
    try:
        if not await _acquire(conn, key, wait):
            raise LockNotAcquired(name)
        try:
            yield Lock(name=name, key=key, conn=conn)
        finally:
            await _unlock(conn, key)
    finally:
        await pool.putconn(conn)


async def _acquire(conn: psycopg.AsyncConnection[Any], key: int, wait: bool | float) -> bool:
    if wait is False:
        cur = await conn.execute(_Q["lock_try"], {"key": key})
        row = await cur.fetchone()
        return bool(row and row[0])
    if wait is True:
        await conn.execute(_Q["lock_wait"], {"key": key})
        return True
    try:
        async with conn.transaction():
            # SET LOCAL bounds this wait only; the lock itself is session-level and
            # survives the transaction.
            await conn.execute(_Q["lock_timeout"], {"ms": f"{max(1, int(wait * 1000))}ms"})
            await conn.execute(_Q["lock_wait"], {"key": key})
    except psycopg.errors.LockNotAvailable:
        return False
    return True


async def _unlock(conn: psycopg.AsyncConnection[Any], key: int) -> None:
    try:
        cur = await conn.execute(_Q["lock_release"], {"key": key})
        row = await cur.fetchone()
        released = bool(row and row[0])
    except psycopg.Error:
        released = False
    if not released:
        # Either the session died (the server already released the lock) or the unlock
        # failed: never hand a connection that may still hold the lock back to the pool.
        await conn.close()
