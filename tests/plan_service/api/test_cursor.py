"""The ``after`` cursor (``api/cursor.py``): signed with the deployment's key, so a forged one
is a 400; never a way to read before ``starts_at``, even when signed; one key for every
replica on a database, or the one ``api_cursor_secret`` gives."""

from __future__ import annotations

import base64
import hashlib
import struct
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgenough.core.errors import DatabaseError
from pgenough_plans.api import ApiConfigError, cursor, grant_api_role, prepare_database
from pgenough_plans.api.cursor import Cursor
from pgenough_plans.api.errors import InvalidRequest
from pgenough_plans.api.search import SearchQuery, fetch_page
from tests.plan_service.api.helpers import (
    Plan,
    add_plans,
    api_settings,
    api_start_error,
    events,
    serving,
)
from tests.plan_service.api.helpers import state as api_state

KEY = cursor.key_of(b"this deployment")
OTHER_KEY = cursor.key_of(b"another deployment")
SECRET = "a-cursor-secret-of-32-characters!"
JUNE_1 = datetime(2021, 6, 1, tzinfo=UTC)
JUNE_15 = datetime(2021, 6, 15, tzinfo=UTC)
NIL = uuid.UUID(int=0)


def unkeyed_v1(value: Cursor, starts_at: datetime | None, ends_at: datetime | None) -> str:
    """A cursor as pgenough made them before they were signed: anyone could compute one."""

    def digest(data: bytes, size: int) -> bytes:
        return hashlib.blake2b(data, digest_size=size, person=b"pgenough-after").digest()

    text = f"{starts_at.isoformat() if starts_at else ''}/{ends_at.isoformat() if ends_at else ''}"
    micros = (value.starts_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    key = struct.pack(">Bq16s8s", 1, micros, value.id.bytes, digest(text.encode(), 8))
    return base64.urlsafe_b64encode(key + digest(key, 8)).rstrip(b"=").decode()


# --- the module, pure -------------------------------------------------------------------------

instants = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
bounds = st.tuples(st.none() | instants, st.none() | instants)


@given(start=instants, ident=st.uuids(), bound=bounds)
def test_a_cursor_decodes_to_what_was_encoded_with_the_same_key(
    start: datetime, ident: uuid.UUID, bound: tuple[datetime | None, datetime | None]
) -> None:
    value = cursor.encode(Cursor(start, ident), *bound, KEY)
    assert cursor.decode(value, *bound, KEY) == Cursor(start, ident)
    with pytest.raises(InvalidRequest, match="not a cursor this API made"):
        cursor.decode(value, *bound, OTHER_KEY)


@given(start=instants, ident=st.uuids(), bound=bounds, data=st.data())
def test_any_changed_character_is_refused(
    start: datetime,
    ident: uuid.UUID,
    bound: tuple[datetime | None, datetime | None],
    data: st.DataObject,
) -> None:
    value = cursor.encode(Cursor(start, ident), *bound, KEY)
    at = data.draw(st.integers(0, len(value) - 1))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    other = data.draw(st.sampled_from(alphabet).filter(lambda c: c != value[at]))
    changed = value[:at] + other + value[at + 1 :]
    try:
        decoded = cursor.decode(changed, *bound, KEY)
    except InvalidRequest:
        return
    # The last character may carry padding bits only base64 ignores: the same bytes.
    assert base64.urlsafe_b64decode(changed + "==") == base64.urlsafe_b64decode(value + "==")
    assert decoded == Cursor(start, ident)


def test_an_unsigned_cursor_of_an_older_pgenough_is_refused() -> None:
    old = unkeyed_v1(Cursor(JUNE_1, NIL), JUNE_15, None)
    with pytest.raises(InvalidRequest, match="not a cursor this API made"):
        cursor.decode(old, JUNE_15, None, KEY)


def test_a_secret_too_short_or_empty_is_no_key() -> None:
    with pytest.raises(ApiConfigError, match="at least 32 characters"):
        cursor.key_of_setting("short")
    assert cursor.key_of_setting(SECRET) == cursor.key_of(SECRET.encode())
    with pytest.raises(ValueError, match="needs a secret"):
        cursor.key_of(b"")
    with pytest.raises(ValueError, match="needs a key"):
        cursor.encode(Cursor(JUNE_1, NIL), None, None, b"")


def test_the_lower_bound_is_the_later_of_the_cursor_and_starts_at() -> None:
    query = SearchQuery(starts_at=JUNE_15)
    early = query.sql_params(Cursor(JUNE_1, uuid.uuid4()), 0)
    assert (early["after_start"], early["after_id"]) == (JUNE_15, NIL)
    later = Cursor(JUNE_15 + timedelta(days=1), uuid.uuid4())
    params = query.sql_params(later, 0)
    assert (params["after_start"], params["after_id"]) == (later.starts_at, later.id)
    same = Cursor(JUNE_15, uuid.uuid4())  # ties: the cursor's id is past the nil one
    params = query.sql_params(same, 0)
    assert (params["after_start"], params["after_id"]) == (JUNE_15, same.id)
    unbounded = SearchQuery().sql_params(Cursor(JUNE_1, NIL), 0)
    assert unbounded["after_start"] == JUNE_1


# --- the API, on the real database ------------------------------------------------------------

JUNE = [
    Plan("early", "2021-06-01 10:00:00+00", "2021-06-01 12:00:00+00"),
    Plan("mid", "2021-06-10 10:00:00+00", "2021-06-10 12:00:00+00"),
    Plan("late", "2021-06-20 10:00:00+00", "2021-06-20 12:00:00+00"),
]


def after_of(response: httpx.Response) -> str:
    target = response.headers["link"].split(";")[0].strip("<>")
    return parse_qs(urlsplit(target).query)["after"][0]


async def get(client: httpx.AsyncClient, **params: Any) -> httpx.Response:
    return await client.get("/search", params=params)


@pytest.mark.db
async def test_no_cursor_reads_before_starts_at(db: AsyncConnectionPool) -> None:
    """Whatever cursor reaches the query (a signed one included), the page starts at
    starts_at at the earliest: the SQL's bound, against the real index."""
    await add_plans(db, *JUNE)
    query = SearchQuery(starts_at=JUNE_15, limit=10)
    async with db.connection() as conn:
        page = await fetch_page(conn, query, Cursor(JUNE_1, NIL), 0)
    assert "2021-06-01" not in page.events and "2021-06-10" not in page.events
    assert page.events.count('"id"') == 1 and "2021-06-20" in page.events


@pytest.mark.db
async def test_forged_cursors_are_400_and_a_signed_early_one_reads_nothing_early(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, *JUNE)
    async with serving(api_settings(database_url)) as (app, client):
        key = api_state(app).cursor_key
        june_15 = {"starts_at": "2021-06-15", "limit": "5"}
        forged = [
            unkeyed_v1(Cursor(JUNE_1, NIL), JUNE_15, None),  # the old checksum, computable
            cursor.encode(Cursor(JUNE_1, NIL), JUNE_15, None, OTHER_KEY),  # another key
        ]
        for after in forged:
            response = await get(client, **june_15, after=after)
            assert response.status_code == 400, response.text
            assert "not a cursor this API made" in response.json()["error"]["message"]

        signed = cursor.encode(Cursor(JUNE_1, NIL), JUNE_15, None, key)
        found = events(await get(client, **june_15, after=signed))
        assert [e["start_date"] for e in found] == ["2021-06-20"]


@pytest.mark.db
async def test_replicas_without_the_setting_share_the_database_key(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, *JUNE)
    settings = api_settings(database_url)
    async with serving(settings) as (a, on_a), serving(settings) as (b, on_b):
        assert api_state(a).cursor_key == api_state(b).cursor_key
        first = await get(on_a, starts_at="2021-06-01", limit="1")
        after = after_of(first)
        found = events(await get(on_b, starts_at="2021-06-01", limit="1", after=after))
        assert [e["id"] for e in found] == [JUNE[1].id]
    async with db.connection() as conn:
        cur = await conn.execute("SELECT secret FROM plans.api_secrets WHERE name = 'cursor'")
        row = await cur.fetchone()
    assert row is not None and len(bytes(row[0])) == 32
    assert api_state(a).cursor_key == cursor.key_of(bytes(row[0]))


@pytest.mark.db
async def test_the_setting_is_the_key_and_other_deployments_cursors_are_refused(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await add_plans(db, *JUNE)
    configured = api_settings(database_url, api_cursor_secret=SECRET)
    async with (
        serving(configured) as (a, on_a),
        serving(configured) as (_, on_b),
        serving(api_settings(database_url)) as (_, from_database),
    ):
        assert api_state(a).cursor_key == cursor.key_of_setting(SECRET)
        after = after_of(await get(on_a, starts_at="2021-06-01", limit="1"))
        assert len(events(await get(on_b, starts_at="2021-06-01", limit="1", after=after))) == 1
        refused = await get(from_database, starts_at="2021-06-01", limit="1", after=after)
        assert refused.status_code == 400, refused.text


def test_a_short_cursor_secret_is_one_line_and_exit_2(worker_env: dict[str, str]) -> None:
    env = dict(worker_env, PGENOUGH_API_CURSOR_SECRET="short")
    assert api_start_error(env) == (
        "error: invalid configuration: api_cursor_secret must be at least 32 characters"
        " (such as the output of `openssl rand -hex 32`), or unset for the database's"
    )


@pytest.mark.db
async def test_a_role_that_may_not_read_the_secret_is_told_what_to_do(
    db: AsyncConnectionPool, database_url: str
) -> None:
    role = f"pgenough_api_{uuid.uuid4().hex[:8]}"
    url = make_conninfo(database_url, user=role, password="pw")
    try:
        async with db.connection() as conn:
            await grant_api_role(conn, role, "pw")
            await conn.execute(
                sql.SQL("REVOKE SELECT ON plans.api_secrets FROM {}").format(sql.Identifier(role))
            )
        with pytest.raises(DatabaseError, match="may not read the cursor secret"):
            await prepare_database(url, migrate_schema=False)
        # With the secret in the settings, the database's is not needed.
        await prepare_database(url, migrate_schema=False, read_cursor_secret=False)
        async with serving(api_settings(url, api_cursor_secret=SECRET)) as (_, client):
            assert (await client.get("/search")).status_code == 200
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
