"""Connection errors name the server, never the password; pools and prepared statements."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core.db import open_pool, probe
from pgenough.core.errors import DatabaseError


@pytest.mark.parametrize(
    "url",
    [
        "postgresql//app:s3cret@127.0.0.1:1/nope",  # unparsable: libpq's error quotes it
        "postgresql://app:s3cret@127.0.0.1:1/nope?connect_timeout=1",
    ],
)
async def test_probe_errors_do_not_carry_the_password(url: str) -> None:
    with pytest.raises(DatabaseError) as caught:
        await probe(url, timeout=1)
    assert "s3cret" not in "".join(traceback.format_exception(caught.value))


@pytest.mark.db
@pytest.mark.parametrize("prepared", [True, False])
async def test_pools_prepare_repeated_statements_unless_told_not_to(
    database_url: str, prepared: bool
) -> None:
    """Off, nothing is prepared server-side: what a transaction-pooling PgBouncer < 1.21 needs
    (a prepared statement lives on one server session, the next transaction may get another)."""
    pool = await open_pool(database_url, max_size=1, prepared_statements=prepared)
    try:
        async with pool.connection() as conn:
            for i in range(10):  # psycopg prepares after 5 runs of one query
                await conn.execute("SELECT %s::int + 1", (i,))
            cur = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
            row = await cur.fetchone()
        assert row is not None
        assert (row[0] > 0) is prepared
    finally:
        await pool.close()


@pytest.mark.db
async def test_a_connection_the_server_ended_is_never_handed_out(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's check skips the round trip for a healthy idle connection and runs it when
    the server ended the connection (its socket turned readable): the caller gets a new one."""
    full_checks: list[int] = []
    full_check = AsyncConnectionPool.check_connection

    async def counted(conn: psycopg.AsyncConnection[Any]) -> None:
        full_checks.append(conn.info.backend_pid)
        await full_check(conn)

    monkeypatch.setattr(AsyncConnectionPool, "check_connection", staticmethod(counted))
    pool = await open_pool(database_url, min_size=1, max_size=1)
    try:
        async with pool.connection() as conn:
            first = conn.info.backend_pid
        for _ in range(3):
            async with pool.connection() as conn:
                assert conn.info.backend_pid == first
        assert full_checks == []  # healthy and idle: no round trip before each checkout
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as other:
            await other.execute("SELECT pg_terminate_backend(%s)", (first,))
            # Wait for the backend to be gone: its FATAL and EOF are then on the socket.
            for _ in range(500):
                cur = await other.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (first,)
                )
                if await cur.fetchone() == (0,):
                    break
                await asyncio.sleep(0.01)
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT pg_backend_pid()")
            row = await cur.fetchone()
        assert row is not None and row[0] != first
        assert full_checks[0] == first  # the ended connection was checked, then replaced
    finally:
        await pool.close()
