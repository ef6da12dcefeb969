"""``pgenough-plans worker fetch`` behind a real PgBouncer in transaction pooling mode
(tests/helpers/pgbouncer.py), as operators run it: ``DATABASE_URL`` the pooler,
``PGENOUGH_DIRECT_DATABASE_URL`` the server.

The provider's lock is a session lock held for the whole fetch: through a pooler with one
server connection, two fetchers would both get it (the server session that holds it grants
it again to whichever client's transaction runs on it). On the direct URL the second
fetcher skips the provider, as without a pooler.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.ingest.fetch import lock_name
from pgenough_plans.sim.data import render_snapshot
from tests.helpers.pgbouncer import Bouncer, bouncer
from tests.helpers.procs import ROOT
from tests.plan_service.ingest.badprovider import BadProvider, trickle
from tests.plan_service.ingest.pipeline import advisory_holders, until_phase

pytestmark = [pytest.mark.db, pytest.mark.slow]
PGENOUGH = str(Path(sys.executable).parent / "pgenough-plans")
DOCUMENT = b"".join(render_snapshot(seed=6, version=1, plans=200))


@pytest.fixture
def pgb(server_url: str) -> Iterator[Bouncer]:
    with bouncer(server_url, pool_size=1) as b:
        yield b


@pytest.fixture
def env(worker_env: dict[str, str], pgb: Bouncer, database_url: str) -> dict[str, str]:
    return dict(
        worker_env,
        DATABASE_URL=pgb.url(conninfo_to_dict(database_url)["dbname"]),
        PGENOUGH_DIRECT_DATABASE_URL=database_url,
        PGENOUGH_LOG_LEVEL="INFO",
    )


@pytest.fixture
def bad() -> Iterator[BadProvider]:
    with BadProvider() as server:
        yield server


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PGENOUGH, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


async def test_a_second_fetcher_through_the_pooler_skips_a_provider_being_fetched(
    db: AsyncConnectionPool, env: dict[str, str], bad: BadProvider
) -> None:
    bad["/trickle"] = trickle(DOCUMENT, per_second=1, first=300)
    provider = f"slow={bad.url('/trickle')}"
    first = start(env, "worker", "fetch", "--interval", "60", "--provider", provider)
    try:

        def alive() -> None:
            assert first.poll() is None, first.communicate()

        await until_phase(db, "slow", "streaming the body", alive)
        second = await asyncio.to_thread(
            subprocess.run,
            [PGENOUGH, "worker", "fetch", "--once", "--provider", provider],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert "being fetched by another worker; skipped" in second.stderr
        [holder] = await advisory_holders(db, lock_name("slow"))
        async with db.connection() as conn:
            cur = await conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE pid = %s", (holder,)
            )
            row = await cur.fetchone()
        # The lock's session is the fetch worker's own direct one, not the pooler's.
        assert row is not None and row[0].endswith("-session"), row
    finally:
        first.send_signal(signal.SIGTERM)
        code = first.wait(30)
    assert code == 0, first.communicate()
    assert await advisory_holders(db, lock_name("slow")) == []
    async with db.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM plans.runs WHERE provider = 'slow'")
        assert await cur.fetchone() == (1,)  # the second fetcher opened no run
