"""The network timeouts every connection carries (``pgenough.core.db.with_network_timeout``):
libpq's on our side, the server's on direct sessions, none of the server's through a pooler,
and what the URL says always first. Their effect on a cut link is shown by the multi-host
tests (tests/core/test_partition.py); here, what reaches libpq and the server."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgenough.core import open_pool
from pgenough.core.db import (
    DEFAULT_NETWORK_TIMEOUT,
    KEEPALIVE_PROBES,
    with_network_timeout,
)
from pgenough.core.dburl import POOLER_HINT
from pgenough.core.errors import DatabaseError
from pgenough.settings import Settings
from tests.helpers.pgbouncer import bouncer

SERVER_SIDE = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")


def test_libpq_gets_keepalives_a_user_timeout_and_a_connect_timeout() -> None:
    params = conninfo_to_dict(with_network_timeout("host=db dbname=app", 20.0))
    assert params == {
        "host": "db",
        "dbname": "app",
        "keepalives": "1",
        "keepalives_idle": "10",
        "keepalives_interval": "3",
        "keepalives_count": str(KEEPALIVE_PROBES),
        "tcp_user_timeout": "20000",
        "connect_timeout": "10",
    }
    # A cut peer is noticed within the setting: idle wait plus the probes.
    idle, interval = int(params["keepalives_idle"]), int(params["keepalives_interval"])
    assert idle + KEEPALIVE_PROBES * interval <= 20


def test_what_the_url_sets_wins_and_is_never_repeated() -> None:
    url = (
        "postgresql://u@db/app?keepalives_idle=60&connect_timeout=3"
        "&options=-c%20statement_timeout%3D5000%20-c%20tcp_user_timeout%3D1000"
    )
    params = conninfo_to_dict(with_network_timeout(url, 20.0, server_side=True))
    assert params["keepalives_idle"] == "60"
    assert params["connect_timeout"] == "3"
    options = params["options"]
    assert options.startswith("-c statement_timeout=5000 -c tcp_user_timeout=1000")
    assert options.count("tcp_user_timeout") == 1
    assert all(f"-c {name}=" in options for name in SERVER_SIDE)
    # Applied twice (a settings URL handed to open_pool): the same URL.
    once = with_network_timeout(url, 20.0, server_side=True)
    twice = with_network_timeout(once, 20.0, server_side=True)
    assert conninfo_to_dict(twice) == conninfo_to_dict(once)


def test_libpq_environment_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "7")
    monkeypatch.setenv("PGOPTIONS", "-c search_path=app")
    params = conninfo_to_dict(with_network_timeout("host=db", 20.0, server_side=True))
    assert "connect_timeout" not in params  # libpq reads PGCONNECT_TIMEOUT
    # options in the URL would hide PGOPTIONS from libpq: it is carried over.
    assert params["options"].startswith("-c search_path=app -c tcp_keepalives_idle=10")


def test_zero_or_less_leaves_the_url_alone() -> None:
    assert with_network_timeout("host=db", 0) == "host=db"


def test_settings_add_the_server_side_only_on_direct_urls() -> None:
    direct = Settings.model_construct(database_url="host=db", network_timeout=8.0)
    params = conninfo_to_dict(direct.resolve_database_url())
    assert params["tcp_user_timeout"] == "8000"
    assert "-c tcp_user_timeout=8000" in params["options"]
    pooled = Settings.model_construct(
        database_url="host=pgbouncer port=6432", direct_database_url="host=db"
    )
    params = conninfo_to_dict(pooled.resolve_database_url())
    assert "options" not in params  # PgBouncer refuses it
    assert params["keepalives_idle"] == str(round(DEFAULT_NETWORK_TIMEOUT / 2))
    session = pooled.session_url()
    assert session is not None and "tcp_keepalives_idle" in conninfo_to_dict(session)["options"]


@pytest.mark.db
async def test_a_direct_session_asks_the_server_for_its_side(database_url: str) -> None:
    """The server takes the options: over TCP it reads them back; over a unix socket
    (the embedded server) PostgreSQL ignores them and reads 0, and the session still works."""
    url = Settings.model_construct(
        database_url=database_url, network_timeout=12.0
    ).resolve_database_url()
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_user_timeout'),"
            " inet_server_addr() IS NOT NULL"
        )
        idle, user_timeout, tcp = (await cur.fetchone()) or (None, None, None)
    if tcp:
        assert (idle, user_timeout) == ("6", "12000")  # milliseconds
    else:
        assert (idle, user_timeout) == ("0", "0")


@pytest.mark.db
async def test_session_options_through_a_pooler_fail_with_the_way_out(
    server_url: str, database_url: str
) -> None:
    """A DATABASE_URL that is a pooler undeclared: the server-side options are refused by
    PgBouncer, and the error says what to set."""
    dbname = conninfo_to_dict(database_url)["dbname"]
    with bouncer(server_url) as pgb:
        url = with_network_timeout(pgb.url(dbname), server_side=True)
        with pytest.raises(DatabaseError, match="PGENOUGH_DIRECT_DATABASE_URL") as raised:
            await open_pool(url, timeout=10)
        assert POOLER_HINT in str(raised.value)
        # Without the server's side, the same pooler serves.
        pool = await open_pool(pgb.url(dbname), prepared_statements=False, timeout=10)
        async with pool.connection() as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
        await pool.close()
