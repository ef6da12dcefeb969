"""A logout ends the session for real, on every replica sharing the token (revoked in
PostgreSQL), and guessing the token is throttled per client address: real uvicorn servers on
a real database (``pgenough/dashboard/sessions.py``, ``throttle.py``)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.dashboard.auth import SESSION_COOKIE
from pgenough.dashboard.sessions import CLOCK_MARGIN
from pgenough.dashboard.throttle import FREE_FAILURES
from tests.dashboard.helpers import TOKEN, ui_settings
from tests.dashboard.server import UiServer

pytestmark = pytest.mark.db

DEADLINE = 20.0
MAX_BACKOFF = 6


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" (?:value|content)="([^"]+)"', page)
    assert match, "the page has no CSRF field"
    return match.group(1)


@asynccontextmanager
async def client_of(
    server: UiServer, local_address: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.AsyncHTTPTransport(local_address=local_address)
    async with httpx.AsyncClient(base_url=server.url, transport=transport, timeout=20) as c:
        yield c


async def login(client: httpx.AsyncClient, token: str = TOKEN) -> httpx.Response:
    csrf = csrf_of((await client.get("/ui/login")).text)
    return await client.post("/ui/login", data={"csrf": csrf, "token": token, "next": "/ui/"})


def signed_in_with(cookie: str) -> dict[str, str]:
    return {"cookie": f"{SESSION_COOKIE}={cookie}"}


async def test_logout_revokes_the_session_on_every_replica(
    db: AsyncConnectionPool, database_url: str
) -> None:
    settings = ui_settings(database_url, ui_token=TOKEN)
    with UiServer(settings) as a, UiServer(settings) as b:
        async with client_of(a) as on_a, client_of(b) as on_b:
            assert (await login(on_a)).status_code == 303
            cookie = on_a.cookies[SESSION_COOKIE]
            for client in (on_a, on_b):  # replicas share the token, so the session
                page = await client.get("/ui/failures", headers=signed_in_with(cookie))
                assert page.status_code == 200

            page = (await on_a.get("/ui/")).text
            out = await on_a.post("/ui/logout", data={"csrf": csrf_of(page)})
            assert out.status_code == 303 and out.headers["location"] == "/ui/login"
            assert SESSION_COOKIE not in on_a.cookies

            # The cookie as it was before the logout, replayed: refused by both replicas.
            for client in (on_a, on_b):
                client.cookies.clear()
                page = await client.get("/ui/failures", headers=signed_in_with(cookie))
                assert page.status_code == 303, client.base_url
                assert page.headers["location"].startswith("/ui/login")
                api = await client.get("/ui/api/overview", headers=signed_in_with(cookie))
                assert api.status_code == 401
                form = await client.get("/ui/login", headers=signed_in_with(cookie))
                assert form.status_code == 200  # the login form, not a redirect past it

            # A new login is a new session, unaffected.
            assert (await login(on_b)).status_code == 303
            assert (await on_b.get("/ui/failures")).status_code == 200
            assert (await on_a.get("/ui/failures", headers=signed_in_with(cookie))).is_redirect

    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT extract(epoch FROM expires_at - now()) FROM pgenough.ui_revoked_sessions"
        )
        rows = await cur.fetchall()
    assert len(rows) == 1
    assert 12 * 3600 - 60 < rows[0][0] <= 12 * 3600  # kept until the cookie would expire


async def test_a_logout_purges_long_expired_revocations(
    db: AsyncConnectionPool, database_url: str
) -> None:
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO pgenough.ui_revoked_sessions (session_id, expires_at) VALUES"
            " ('old', now() - make_interval(secs => %(old)s)),"
            " ('recent', now() - make_interval(secs => %(recent)s))",
            {"old": CLOCK_MARGIN + 60, "recent": CLOCK_MARGIN - 60},
        )
    with UiServer(ui_settings(database_url, ui_token=TOKEN)) as server:
        async with client_of(server) as client:
            await login(client)
            csrf = csrf_of((await client.get("/ui/")).text)
            assert (await client.post("/ui/logout", data={"csrf": csrf})).status_code == 303
    async with db.connection() as conn:
        cur = await conn.execute("SELECT session_id FROM pgenough.ui_revoked_sessions")
        kept = {r[0] for r in await cur.fetchall()}
    assert "old" not in kept and "recent" in kept and len(kept) == 2


async def until_not_throttled(client: httpx.AsyncClient) -> httpx.Response:
    """Log in with the right token, as soon as the backoff lets this client try."""
    deadline = time.monotonic() + DEADLINE
    while True:
        response = await login(client)
        if response.status_code != 429 or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.1)


async def test_wrong_tokens_earn_a_backoff_per_client_address(
    db: AsyncConnectionPool, database_url: str
) -> None:
    # A backoff of up to 6 s: the 21 guesses below must all fall within it, and on CI's loaded
    # passes 21 requests once took longer than a 2 s one.
    settings = ui_settings(database_url, ui_token=TOKEN, ui_login_max_backoff=MAX_BACKOFF)
    with UiServer(settings) as server:
        async with client_of(server) as guesser, client_of(server, "127.0.0.2") as operator:
            for _ in range(FREE_FAILURES):
                response = await login(guesser, "guess")
                assert response.status_code == 401
            started = time.monotonic()
            statuses = [(await login(guesser, f"guess-{n}")).status_code for n in range(20)]
            assert statuses.count(429) >= 19, statuses  # guessing slowed to a crawl
            refused = await login(guesser, "guess")
            assert refused.status_code == 429
            assert 1 <= int(refused.headers["retry-after"]) <= MAX_BACKOFF
            assert "too many wrong tokens" in refused.text

            # Meanwhile the right token is not even compared from that address...
            assert (await login(guesser)).status_code == 429
            # ...but another client is not held back by someone else's guesses.
            assert (await login(operator)).status_code == 303
            assert (await operator.get("/ui/failures")).status_code == 200

            # A wrong Bearer token is a guess too, answered in the API's envelope.
            wrong = {"authorization": "Bearer guess"}
            api = await guesser.get("/ui/api/overview", headers=wrong)
            assert api.status_code == 429 and api.headers["retry-after"]
            assert api.json()["error"]["code"] == "TOO_MANY_ATTEMPTS"

            # The backoff ends: the guesser's next right token gets in, and clears it.
            ok = await until_not_throttled(guesser)
            assert ok.status_code == 303
            assert time.monotonic() - started < MAX_BACKOFF + 2  # at most the backoff, plus slack
            guesser.cookies.clear()
            assert (await login(guesser, "guess")).status_code == 401  # free again


async def test_bearer_guesses_count_like_login_guesses(
    db: AsyncConnectionPool, database_url: str
) -> None:
    with UiServer(ui_settings(database_url, ui_token=TOKEN)) as server:
        async with client_of(server) as client:
            wrong = {"authorization": "Bearer guess"}
            right = {"authorization": f"Bearer {TOKEN}"}
            for _ in range(FREE_FAILURES):
                assert (await client.get("/ui/api/overview", headers=wrong)).status_code == 401
            assert (await client.get("/ui/api/overview", headers=right)).status_code == 429
            assert (await login(client)).status_code == 429
            page = await client.get("/ui/", headers=wrong)
            assert page.status_code == 429 and "Too many attempts" in page.text
