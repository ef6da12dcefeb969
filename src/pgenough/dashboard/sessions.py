"""Who is signed in to the dashboard: the request's credentials checked against the token,
the login throttle and the sessions a logout revoked.

A session cookie is verified without the database (``auth``), but a logout must end it for
every replica sharing the token, for the rest of its life: ``revoke`` records its id in
``pgenough.ui_revoked_sessions`` (the ``ui`` migration track, ``schema.py``), and
``signed_in`` asks there on every request that comes with a cookie. Rows are kept until the
cookie would have expired (plus ``CLOCK_MARGIN``), then purged in batches by later logouts.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from fastapi import Request

from pgenough.core.db import named_queries
from pgenough.dashboard.auth import SESSION_COOKIE, Session
from pgenough.dashboard.errors import DashboardError
from pgenough.dashboard.state import DashboardState, connection
from pgenough.dashboard.throttle import client_key

CLOCK_MARGIN: Final = 3600.0
"""Seconds a revocation outlives its cookie, in case the database's clock runs ahead."""
PURGE_BATCH: Final = 1000

_Q = named_queries("pgenough.dashboard", "sessions")

AnyConn = psycopg.AsyncConnection[Any]


async def is_revoked(conn: AnyConn, session: Session) -> bool:
    cur = await conn.execute(_Q["is_revoked"], {"session_id": session.id})
    row = await cur.fetchone()
    return bool(row and row[0])


async def revoke(conn: AnyConn, session: Session) -> None:
    """End ``session`` for every replica, and forget sessions long expired."""
    async with conn.transaction():
        await conn.execute(
            _Q["revoke"], {"session_id": session.id, "expires_at": session.expires_at}
        )
        await conn.execute(_Q["purge_revoked"], {"margin": CLOCK_MARGIN, "limit": PURGE_BATCH})


def client_of(request: Request) -> str:
    return client_key(request.client.host if request.client else None)


def too_many_attempts(retry_after: int) -> DashboardError:
    return DashboardError(
        429,
        "TOO_MANY_ATTEMPTS",
        f"too many wrong tokens from this address: try again in {retry_after} s",
        "Too many attempts",
        headers={"retry-after": str(retry_after)},
    )


def check_throttle(ui: DashboardState, request: Request) -> str:
    """The client's key, once it may try a token; else ``DashboardError`` 429 with Retry-After."""
    client = client_of(request)
    retry_after = ui.throttle.retry_after(client)
    if retry_after is not None:
        raise too_many_attempts(retry_after)
    return client


def bearer_signed_in(ui: DashboardState, request: Request) -> bool:
    """The request carries the right Bearer token. A wrong one counts against its client
    like a wrong login; a throttled client's is not even compared (429)."""
    if not ui.auth.bearer_given(request):
        return False
    client = check_throttle(ui, request)
    # No await from the check to the record: concurrent guesses cannot slip between them.
    if ui.auth.bearer(request):
        return True
    ui.throttle.failed(client)
    return False


async def signed_in(ui: DashboardState, request: Request) -> bool:
    """The request may see the dashboard: no token is set, or it carries the right Bearer
    token, or a session cookie we issued, unexpired and not revoked."""
    if not ui.auth.required:
        return True
    if bearer_signed_in(ui, request):
        return True
    session = ui.auth.session(request.cookies.get(SESSION_COOKIE))
    if session is None:
        return False
    async with connection(ui) as conn:
        return not await is_revoked(conn, session)
