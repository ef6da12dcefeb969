"""Named advisory locks.

A name maps to a stable signed 64-bit key (the first 8 bytes of its BLAKE2b digest; never
Python's per-process ``hash()``). Two scopes, as PostgreSQL has:

- ``advisory_lock(pool, name)``: held for the body of a ``with``/``async with`` on a
  connection taken from the pool for that long (session-level); PostgreSQL releases it when
  that session ends - also when its process is killed. The pool may be sync or async.
- ``advisory_xact_lock(conn, name)``: held until the caller's transaction on ``conn`` ends,
  commit or rollback; what ORM code wants (a Django ``atomic()`` block, a SQLAlchemy
  session), since it can never outlive the transaction nor leak to the next user of the
  connection.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass
from typing import Any, overload

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgenough.core._sql import load
from pgenough.core.errors import LockNotAcquired, translate_db_errors
from pgenough.core.statements import (
    AnyConnection,
    Atomic,
    Query,
    Steps,
    dual,
    not_a_connection,
    run_async,
    run_sync,
)

log = logging.getLogger(__name__)
_Q = load("locks")

Wait = bool | float
"""``False``: fail at once when taken; ``True``: wait as long as it takes; a number: wait at
most that many seconds, then fail."""


def lock_key(name: str) -> int:
    """The advisory-lock key of ``name``: stable across processes, versions and hosts."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass
class Lock:
    """A held session-level advisory lock and the (async) connection that holds it."""

    name: str
    key: int
    conn: psycopg.AsyncConnection[Any]

    async def still_held(self) -> bool:
        """Whether this session still holds the lock (False if the connection was lost)."""
        try:
            return await lock_held(self.conn, self.key)
        except psycopg.OperationalError:
            return False


@dataclass
class SyncLock:
    """``Lock`` for a sync pool."""

    name: str
    key: int
    conn: psycopg.Connection[Any]

    def still_held(self) -> bool:
        try:
            return lock_held(self.conn, self.key)
        except psycopg.OperationalError:
            return False


@overload
def advisory_lock(
    pool: AsyncConnectionPool, name: str, *, wait: Wait = True
) -> AbstractAsyncContextManager[Lock]: ...


@overload
def advisory_lock(
    pool: ConnectionPool, name: str, *, wait: Wait = True
) -> AbstractContextManager[SyncLock]: ...


def advisory_lock(
    pool: AsyncConnectionPool | ConnectionPool, name: str, *, wait: Wait = True
) -> AbstractAsyncContextManager[Lock] | AbstractContextManager[SyncLock]:
    """Hold the advisory lock ``name`` for the body of the ``async with`` (an async pool) or
    ``with`` (a sync pool).

    ``wait`` as ``Wait`` says; failing raises ``LockNotAcquired``. The connection stays out
    of the pool for the critical section, and is closed rather than returned if the lock
    cannot be released cleanly.
    """
    if isinstance(pool, AsyncConnectionPool):
        return _async_lock(pool, name, wait)
    if isinstance(pool, ConnectionPool):
        return _sync_lock(pool, name, wait)
    raise TypeError(
        f"advisory_lock holds its lock on a connection of a pool, not on a"
        f" {type(pool).__name__}; inside your transaction, use advisory_xact_lock(conn, name)"
    )


@asynccontextmanager
async def _async_lock(pool: AsyncConnectionPool, name: str, wait: Wait) -> AsyncIterator[Lock]:
    key = lock_key(name)
    with translate_db_errors(f"advisory lock {name!r}"):
        conn = await pool.getconn()
    try:
        if not await run_async(conn, _acquire(key, wait, session=True)):
            raise LockNotAcquired(name)
        try:
            yield Lock(name=name, key=key, conn=conn)
        finally:
            try:
                released = await run_async(conn, _release(key))
            except psycopg.Error:
                released = False
            if not released:
                # Either the session died (the server already released the lock) or the
                # unlock failed: never hand a connection that may still hold it to the pool.
                await conn.close()
    finally:
        await pool.putconn(conn)


@contextmanager
def _sync_lock(pool: ConnectionPool, name: str, wait: Wait) -> Iterator[SyncLock]:
    key = lock_key(name)
    with translate_db_errors(f"advisory lock {name!r}"):
        conn = pool.getconn()
    try:
        if not run_sync(conn, _acquire(key, wait, session=True)):
            raise LockNotAcquired(name)
        try:
            yield SyncLock(name=name, key=key, conn=conn)
        finally:
            try:
                released = run_sync(conn, _release(key))
            except psycopg.Error:
                released = False
            if not released:
                conn.close()  # as above
    finally:
        pool.putconn(conn)


@overload
def advisory_xact_lock(
    conn: psycopg.AsyncConnection[Any], name: str, *, wait: Wait = True
) -> Coroutine[Any, Any, None]: ...


@overload
def advisory_xact_lock(conn: psycopg.Connection[Any], name: str, *, wait: Wait = True) -> None: ...


def advisory_xact_lock(conn: AnyConnection, name: str, *, wait: Wait = True) -> Any:
    """Take the advisory lock ``name`` until the transaction open on ``conn`` ends.

    ``wait`` as ``Wait`` says; failing raises ``LockNotAcquired`` and leaves the transaction
    usable. On an autocommit connection outside a transaction the lock would end with the
    statement, so that is refused.
    """
    if not isinstance(conn, psycopg.Connection | psycopg.AsyncConnection):
        raise not_a_connection(conn)
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise ValueError(
            "advisory_xact_lock needs an open transaction on the connection"
            " (in autocommit mode, enter conn.transaction() first)"
        )
    return _take_xact_lock(conn, name, wait=wait)


@dual
def _take_xact_lock(name: str, *, wait: Wait) -> Steps[None]:
    if not (yield from _acquire(lock_key(name), wait, session=False)):
        raise LockNotAcquired(name)


@dual
def lock_held(key: int) -> Steps[bool]:
    """Whether the session of ``conn`` holds the session-level lock ``key``."""
    return bool((yield Query(_Q["lock_held"], {"key": key})).rows[0][0])


def _acquire(key: int, wait: Wait, *, session: bool) -> Steps[bool]:
    try_, wait_ = ("lock_try", "lock_wait") if session else ("xact_lock_try", "xact_lock_wait")
    if wait is False:
        return bool((yield Query(_Q[try_], {"key": key})).rows[0][0])
    if wait is True:
        yield Query(_Q[wait_], {"key": key})
        return True
    try:
        # A savepoint (or, in autocommit, a transaction of its own) bounds this wait only:
        # a failed wait rolls back to it, leaving the caller's transaction usable.
        yield Atomic(_timed_wait(_Q[wait_], key, wait))
    except psycopg.errors.LockNotAvailable:
        return False
    return True


def _timed_wait(query: Any, key: int, seconds: float) -> Steps[None]:
    ms = f"{max(1, int(seconds * 1000))}ms"
    previous = (yield Query(_Q["lock_timeout"], {"ms": ms})).rows[0][0]
    yield Query(query, {"key": key})
    # SET LOCAL outlives a released savepoint: give the caller's transaction its own back.
    yield Query(_Q["restore_lock_timeout"], {"previous": previous})


def _release(key: int) -> Steps[bool]:
    return bool((yield Query(_Q["lock_release"], {"key": key})).rows[0][0])


__all__ = [
    "Lock",
    "SyncLock",
    "advisory_lock",
    "advisory_xact_lock",
    "lock_key",
]
