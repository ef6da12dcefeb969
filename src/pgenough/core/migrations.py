"""Versioned schema migrations: numbered ``migrations/NNNN_name.sql`` files.

``migrate`` applies the missing ones in order, in one transaction, under a transaction-level
advisory lock, so replicas that start together are safe: the first applies, the others wait
and then find nothing left to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, LiteralString

import psycopg

from pgenough.core.errors import MigrationError
from pgenough.core.locks import lock_key

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
MIGRATION_LOCK = "pgenough.migrate"

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS pgenough;
CREATE TABLE IF NOT EXISTS pgenough.schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: LiteralString


def available() -> list[Migration]:
    """Every migration shipped with this version of pgenough, in order."""
    found = []
    for entry in resources.files("pgenough.core").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            text: LiteralString = entry.read_text("utf-8")
            found.append(Migration(int(match[1]), match[2], text))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration numbers must run 1..n without gaps: {versions}")
    return found


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The highest applied migration, 0 for a database pgenough has never touched."""
    cur = await conn.execute("SELECT to_regclass('pgenough.schema_migrations') IS NOT NULL")
    row = await cur.fetchone()
    if not row or not row[0]:
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) FROM pgenough.schema_migrations")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def migrate(conn: psycopg.AsyncConnection[Any]) -> list[Migration]:
    """Bring the schema up to date; return the migrations this call applied."""
    migrations = available()
    applied: list[Migration] = []
    try:
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%(key)s)", {"key": lock_key(MIGRATION_LOCK)}
            )
            await conn.execute(_BOOTSTRAP)
            cur = await conn.execute("SELECT version FROM pgenough.schema_migrations")
            done = {int(r[0]) for r in await cur.fetchall()}
            if done and max(done) > migrations[-1].version:
                raise MigrationError(
                    f"database schema version {max(done)} is newer than this pgenough "
                    f"({migrations[-1].version}); upgrade pgenough"
                )
            for migration in migrations:
                if migration.version in done:
                    continue
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO pgenough.schema_migrations (version, name)"
                    " VALUES (%(version)s, %(name)s)",
                    {"version": migration.version, "name": migration.name},
                )
                applied.append(migration)
    except psycopg.Error as exc:
        raise MigrationError(f"migration failed: {exc}") from exc
    return applied
