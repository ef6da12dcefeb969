"""Versioned schema migrations: numbered ``migrations/NNNN_name.sql`` files per track.

A *track* is one package's schema: the core's (``core``, the queue's tables) and, above it,
each layer that brings its own tables (the plan service registers ``plans``). Versions count
per track, so a layer's schema evolves without the core knowing it exists.

``migrate`` applies the missing migrations of the given tracks in order, in one transaction,
under a transaction-level advisory lock, so replicas that start together are safe: the first
applies, the others wait and then find nothing left to do. Both calls take a sync or an async
psycopg connection (``statements.dual``): Django's migrations run on its sync one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import LiteralString

import psycopg

from pgenough.core.errors import MigrationError
from pgenough.core.locks import lock_key
from pgenough.core.statements import Atomic, Query, Steps, dual

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
MIGRATION_LOCK = "pgenough.migrate"

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS pgenough;
CREATE TABLE IF NOT EXISTS pgenough.schema_migrations (
    track       text NOT NULL,
    version     integer NOT NULL,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (track, version)
)
"""


@dataclass(frozen=True)
class MigrationSet:
    """The ``migrations/`` folder of an importable package, versioned as ``track``."""

    track: str
    package: str


CORE = MigrationSet("core", "pgenough.core")


@dataclass(frozen=True)
class Migration:
    track: str
    version: int
    name: str
    sql: LiteralString


def available(source: MigrationSet = CORE) -> list[Migration]:
    """Every migration ``source`` ships, in order."""
    found = []
    for entry in resources.files(source.package).joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            text: LiteralString = entry.read_text("utf-8")
            found.append(Migration(source.track, int(match[1]), match[2], text))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(
            f"{source.track} migration numbers must run 1..n without gaps: {versions}"
        )
    return found


@dual
def schema_version(track: str = CORE.track) -> Steps[int]:
    """The highest applied migration of ``track``; 0 where pgenough has never migrated."""
    found = yield Query("SELECT to_regclass('pgenough.schema_migrations') IS NOT NULL")
    if not found.rows or not found.rows[0][0]:
        return 0
    result = yield Query(
        "SELECT coalesce(max(version), 0) FROM pgenough.schema_migrations WHERE track = %(t)s",
        {"t": track},
    )
    return int(result.rows[0][0]) if result.rows else 0


@dual
def migrate(layers: Sequence[MigrationSet] = ()) -> Steps[list[Migration]]:
    """Bring the core's schema, then each layer's, up to date; return what was applied.

    On a sync connection it runs now, on an async one it returns a coroutine (as every
    producer-side call does). In autocommit mode (pgenough's pools) it is a transaction of
    its own; inside the caller's transaction (a Django migration's) it is a savepoint of it,
    and the migration lock is then held until the caller commits."""
    try:
        applied: list[Migration] = yield Atomic(_migrate_all(layers))
    except psycopg.Error as exc:
        raise MigrationError(f"migration failed: {exc}") from exc
    return applied


def _migrate_all(layers: Sequence[MigrationSet]) -> Steps[list[Migration]]:
    yield Query("SELECT pg_advisory_xact_lock(%(key)s)", {"key": lock_key(MIGRATION_LOCK)})
    yield Query(_BOOTSTRAP)
    applied: list[Migration] = []
    for source in (CORE, *layers):
        applied.extend((yield from _migrate_track(source)))
    return applied


def _migrate_track(source: MigrationSet) -> Steps[list[Migration]]:
    migrations = available(source)
    result = yield Query(
        "SELECT version FROM pgenough.schema_migrations WHERE track = %(t)s",
        {"t": source.track},
    )
    done = {int(r[0]) for r in result.rows}
    latest = migrations[-1].version if migrations else 0
    if done and max(done) > latest:
        raise MigrationError(
            f"database schema {source.track} version {max(done)} is newer than this "
            f"pgenough ({latest}); upgrade pgenough"
        )
    applied = []
    for migration in migrations:
        if migration.version in done:
            continue
        yield Query(migration.sql)
        yield Query(
            "INSERT INTO pgenough.schema_migrations (track, version, name)"
            " VALUES (%(track)s, %(version)s, %(name)s)",
            {"track": source.track, "version": migration.version, "name": migration.name},
        )
        applied.append(migration)
    return applied


__all__ = [
    "MigrationSet",
    "migrate",
    "schema_version",
]
