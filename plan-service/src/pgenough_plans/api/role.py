"""The API's least-privilege role: it may connect, see schema ``plans``, read
``plans.plans`` and the secret that signs cursors (``plans.api_secrets``), and write its
read pressure in ``plans.read_pressure`` (a row per API process that ingestion paces by),
nothing more (LISTEN, for cache invalidation, needs no privilege).

``grant_api_role`` is idempotent and tightens on every run: whatever else the role was
granted in schema ``plans`` or in the queue's schema ``pgenough`` is revoked. What PUBLIC may
do in the database (by default since PostgreSQL 15: TEMP, and EXECUTE on functions) is left as
the administrator set it.
It refuses a role that already exists with more power (superuser, CREATEDB, CREATEROLE,
REPLICATION, BYPASSRLS, or membership of other roles) rather than demote it.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pgenough.core.errors import DatabaseError

_ROLE = """
SELECT r.rolsuper OR r.rolcreatedb OR r.rolcreaterole OR r.rolreplication OR r.rolbypassrls,
       EXISTS (SELECT FROM pg_auth_members m WHERE m.member = r.oid)
FROM pg_roles r WHERE r.rolname = %(name)s
"""

_GRANTS = [
    "REVOKE ALL ON ALL TABLES IN SCHEMA plans, pgenough FROM {role}",
    "REVOKE ALL ON ALL SEQUENCES IN SCHEMA plans, pgenough FROM {role}",
    "REVOKE ALL ON SCHEMA plans, pgenough FROM {role}",
    "GRANT CONNECT ON DATABASE {database} TO {role}",
    "GRANT USAGE ON SCHEMA plans TO {role}",
    "GRANT SELECT ON plans.plans TO {role}",
    # The deployment's secret that signs /search cursors (api migration 0001).
    "GRANT SELECT ON plans.api_secrets TO {role}",
    # Its read pressure, for ingestion to yield to /search (plans/pacing.py).
    "GRANT SELECT, INSERT, UPDATE, DELETE ON plans.read_pressure TO {role}",
]


async def grant_api_role(
    conn: psycopg.AsyncConnection[Any], name: str, password: str | None = None
) -> bool:
    """Create (if missing) login role ``name`` that may only read the plans; set its password
    when one is given. True when the role was created. Run it as the schema's owner, with
    CREATEROLE, after ``migrate``."""
    if not name:
        raise ValueError("the API role needs a name")
    role = sql.Identifier(name)
    created = False
    try:
        async with conn.transaction():
            cur = await conn.execute(_ROLE, {"name": name})
            row = await cur.fetchone()
            if row is None:
                await conn.execute(
                    sql.SQL(
                        "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"
                        " NOREPLICATION NOBYPASSRLS"
                    ).format(role)
                )
                created = True
            elif row[0] or row[1]:
                raise DatabaseError(
                    f"role {name!r} exists with more than read access (an elevated attribute"
                    " or membership of other roles); choose another name for the API's role"
                )
            if password is not None:
                await conn.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, sql.Literal(password))
                )
            cur = await conn.execute("SELECT current_database()")
            db_row = await cur.fetchone()
            assert db_row is not None
            database = sql.Identifier(db_row[0])
            for statement in _GRANTS:
                await conn.execute(sql.SQL(statement).format(role=role, database=database))
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot set up the API role {name!r}: {exc}") from exc
    return created
