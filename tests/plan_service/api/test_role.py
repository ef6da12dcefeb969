"""Least privilege: the API's role may connect, use schema plans and read plans.plans;
/search, readiness and cache invalidation work with it, and PostgreSQL refuses it anything
else."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgenough.core.errors import DatabaseError
from pgenough_plans.api import grant_api_role, prepare_database
from tests.plan_service.api.helpers import Plan, add_plans, api_settings, events, serving, state

pytestmark = pytest.mark.db

PASSWORD = "read-only-pw"
PRESSURE = "read_pressure"


@pytest.fixture
async def api_role(db: AsyncConnectionPool) -> AsyncIterator[str]:
    name = f"pgenough_api_{uuid.uuid4().hex[:8]}"
    yield name
    async with db.connection() as conn:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (name,)
        )
        exists = await (
            await conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
        ).fetchone()
        if exists:
            await conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            await conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def as_role(database_url: str, role: str) -> str:
    return make_conninfo(database_url, user=role, password=PASSWORD)


async def test_the_api_works_under_its_read_only_role(
    db: AsyncConnectionPool, database_url: str, api_role: str
) -> None:
    async with db.connection() as conn:
        assert await grant_api_role(conn, api_role, PASSWORD) is True
        assert await grant_api_role(conn, api_role, PASSWORD) is False  # idempotent
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    url = as_role(database_url, api_role)
    await prepare_database(url, migrate_schema=False)
    settings = api_settings(url, api_cache_ttl=3600.0)
    async with serving(settings) as (app, client):
        assert len(events(await client.get("/search"))) == 1
        assert (await client.get("/health/ready")).status_code == 200
        # The cache's LISTEN needs no privilege: a new snapshot still invalidates it.
        cache = state(app).cache
        assert cache.listening
        seen = cache.invalidations
        await add_plans(
            db, Plan("p2", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"), notify=True
        )
        await asyncio.wait_for(cache.wait_invalidations(seen + 1), 30)
        assert len(events(await client.get("/search"))) == 2
        async with state(app).pool.connection() as conn:
            cur = await conn.execute("SELECT current_user")
            assert await cur.fetchone() == (api_role,)


WRITES = [
    "INSERT INTO plans.plans (provider, base_plan_id, plan_id, id, title, sell_mode,"
    " starts_at, ends_at, sold_out, min_price, max_price, ever_online) VALUES ('x', 'x', 'x',"
    " gen_random_uuid(), 'x', 'online', now(), now(), false, 1, 1, true)",
    "DELETE FROM plans.plans",
    "UPDATE plans.plans SET title = 'hacked'",
    "TRUNCATE plans.plans",
    "SELECT * FROM plans.runs",
    "SELECT * FROM pgenough.jobs",
    "SELECT * FROM plans.plan_seen",
    "CREATE TABLE pgenough.mine (x int)",
    "CREATE TABLE plans.mine (x int)",
]


async def test_postgresql_refuses_the_role_anything_else(
    db: AsyncConnectionPool, database_url: str, api_role: str
) -> None:
    async with db.connection() as conn:
        await grant_api_role(conn, api_role, PASSWORD)
    await add_plans(db, Plan("p1", "2030-01-01 00:00:00+00", "2030-01-02 00:00:00+00"))
    async with await psycopg.AsyncConnection.connect(
        as_role(database_url, api_role), autocommit=True
    ) as conn:
        cur = await conn.execute("SELECT count(*) FROM plans.plans")
        assert await cur.fetchone() == (1,)
        for statement in WRITES:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(statement)
    async with db.connection() as conn:
        cur = await conn.execute("SELECT title FROM plans.plans")
        assert await cur.fetchall() == [("A plan",)]


async def test_the_role_cannot_migrate_and_says_what_to_do(
    db: AsyncConnectionPool, database_url: str, api_role: str
) -> None:
    async with db.connection() as conn:
        await grant_api_role(conn, api_role, PASSWORD)
    with pytest.raises(DatabaseError, match="PGENOUGH_API_MIGRATE=0"):
        await prepare_database(as_role(database_url, api_role), migrate_schema=True)


async def test_a_role_without_the_grant_is_refused_at_start_up(
    db: AsyncConnectionPool, database_url: str, api_role: str
) -> None:
    async with db.connection() as conn:
        await conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(api_role), sql.Literal(PASSWORD)
            )
        )
    with pytest.raises(DatabaseError, match=r"may not read plans\.plans"):
        await prepare_database(as_role(database_url, api_role), migrate_schema=False)


async def test_grants_beyond_read_are_revoked_and_powerful_roles_refused(
    db: AsyncConnectionPool, api_role: str
) -> None:
    role = sql.Identifier(api_role)
    async with db.connection() as conn:
        await grant_api_role(conn, api_role)
        await conn.execute(sql.SQL("GRANT INSERT ON plans.plans TO {}").format(role))
        await conn.execute(sql.SQL("GRANT SELECT ON plans.runs TO {}").format(role))
        await grant_api_role(conn, api_role)  # tightens again
        cur = await conn.execute(
            "SELECT table_name, privilege_type FROM information_schema.role_table_grants"
            " WHERE grantee = %s ORDER BY 1, 2",
            (api_role,),
        )
        # Besides reading the plans and the cursor secret, only its read pressure
        # (plans/pacing.py) is its to write.
        assert await cur.fetchall() == [
            ("api_secrets", "SELECT"),
            ("plans", "SELECT"),
            *((PRESSURE, p) for p in ("DELETE", "INSERT", "SELECT", "UPDATE")),
        ]
        await conn.execute(sql.SQL("ALTER ROLE {} CREATEDB").format(role))
        with pytest.raises(DatabaseError, match="more than read access"):
            await grant_api_role(conn, api_role)
