"""Migrations: concurrent replicas are safe, the version is queryable."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from pgenough.core import migrate
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.core.errors import MigrationError
from pgenough.core.migrations import available, schema_version

pytestmark = pytest.mark.db


async def test_concurrent_migrate_applies_each_migration_once(server_url: str) -> None:
    name = f"pgenough_mig_{uuid.uuid4().hex[:8]}"
    create_database(server_url, name)
    url = with_database(server_url, name)
    try:
        conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(4)]
        assert await schema_version(conns[0]) == 0
        applied = await asyncio.gather(*(migrate(c) for c in conns))
        latest = available()[-1].version
        assert sorted(len(a) for a in applied) == [0, 0, 0, len(available())]
        assert [await schema_version(c) for c in conns] == [latest] * 4
        assert await migrate(conns[0]) == []
        # A database migrated by a newer pgenough is refused, not silently downgraded.
        await conns[0].execute(
            "INSERT INTO pgenough.schema_migrations (track, version, name)"
            " VALUES ('core', 9999, 'future')"
        )
        with pytest.raises(MigrationError, match="newer than this pgenough"):
            await migrate(conns[1])
        for c in conns:
            await c.close()
    finally:
        drop_database(server_url, name)


def test_migrate_on_a_sync_connection_joins_its_transaction(server_url: str) -> None:
    """A Django migration runs on Django's sync connection, in its own transaction: the
    schema commits with it, or not at all."""
    name = f"pgenough_mig_{uuid.uuid4().hex[:8]}"
    create_database(server_url, name)
    url = with_database(server_url, name)
    try:
        with psycopg.connect(url) as conn:  # not autocommit: the caller's transaction
            assert schema_version(conn) == 0
            assert len(migrate(conn)) == len(available())
            assert schema_version(conn) == available()[-1].version
            conn.rollback()
            assert schema_version(conn) == 0
            migrate(conn)
            conn.commit()
        with psycopg.connect(url, autocommit=True) as conn:
            assert schema_version(conn) == available()[-1].version
            assert migrate(conn) == []
            conn.execute(
                "INSERT INTO pgenough.schema_migrations (track, version, name)"
                " VALUES ('core', 9999, 'future')"
            )
            with pytest.raises(MigrationError, match="newer than this pgenough"):
                migrate(conn)
    finally:
        drop_database(server_url, name)
