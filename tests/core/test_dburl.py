"""What a database URL may be, and what a failure to reach its servers says: where it tried
and why, first and short; never the options pgenough adds to every URL, never a password
(``pgenough.core.dburl``, through ``open_pool`` as an application calls it)."""

from __future__ import annotations

import socket
import traceback
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgenough.core import enqueue, open_pool
from pgenough.core.dburl import libpq_url, targets, where
from pgenough.core.errors import DatabaseError
from tests.test_cli import free_port

OUR_OPTIONS = ("keepalives", "options", "tcp_user_timeout", "connect_timeout", "application_name")


async def failure(url: str, timeout: float = 5) -> str:
    """The message of ``open_pool(url)``'s ``DatabaseError``, checked for what it must never
    say, in it or in its traceback."""
    with pytest.raises(DatabaseError) as caught:
        await open_pool(url, timeout=timeout)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 150, message
    assert not any(option in message for option in OUR_OPTIONS), message
    assert "s3cret" not in "".join(traceback.format_exception(caught.value))
    return message


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a host that drops the session)."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        yield listening.getsockname()[1]


async def test_a_wrong_port_is_where_then_connection_refused() -> None:
    port = free_port()
    message = await failure(f"postgresql://app:s3cret@127.0.0.1:{port}/app")
    assert message == f"127.0.0.1:{port}: connection refused"


async def test_a_server_that_never_answers_is_a_timeout(silent_port: int) -> None:
    message = await failure(f"postgresql://app:s3cret@127.0.0.1:{silent_port}/app", timeout=2)
    assert message == f"127.0.0.1:{silent_port}: timed out (no answer within 2 s)"


async def test_an_unknown_host_says_so() -> None:
    message = await failure("postgresql://app:s3cret@no-such-host.invalid:5433/app")
    # "no such host" where the resolver answers; its reason where it cannot be asked.
    assert message.startswith("no-such-host.invalid:5433: "), message
    assert message.endswith(": no such host") or "resolve" in message, message


async def test_a_missing_socket_names_its_path() -> None:
    message = await failure("host=/nonexistent/pg port=5999 password=s3cret")
    assert message == "/nonexistent/pg/.s.PGSQL.5999: no such socket: is PostgreSQL running there?"


def _server(server_url: str, **override: str) -> str:
    params = {k: str(v) for k, v in conninfo_to_dict(server_url).items() if v is not None}
    return f"postgresql://?{urlencode({**params, **override})}"


@pytest.mark.db
async def test_the_servers_refusals_are_its_own_words(server_url: str) -> None:
    here = where(server_url)
    message = await failure(_server(server_url, dbname="pgenough_no_such_db"))
    assert message == f'{here}: database "pgenough_no_such_db" does not exist'
    message = await failure(_server(server_url, user="pgenough_no_such_role", password="s3cret"))
    assert message.startswith(f"{here}: "), message
    # A trusting server knows no such role; one that asks for passwords says it failed.
    assert 'role "pgenough_no_such_role" does not exist' in message or (
        'authentication failed for user "pgenough_no_such_role"' in message
    )


async def test_each_host_of_a_multi_host_url_is_named_with_its_reason() -> None:
    first, second = free_port(), free_port()
    message = await failure(f"postgresql://app:s3cret@127.0.0.1:{first},127.0.0.1:{second}/app")
    assert message == f"127.0.0.1:{first}, 127.0.0.1:{second}: connection refused"
    mixed = f"postgresql://no-such-host.invalid:5432,127.0.0.1:{second}/app?password=s3cret"
    message = await failure(mixed)
    assert message.startswith("no-such-host.invalid:5432: "), message
    assert message.endswith(f"; 127.0.0.1:{second}: connection refused"), message


@pytest.mark.db
@pytest.mark.parametrize("scheme", ["postgresql+psycopg", "postgresql+asyncpg"])
async def test_an_application_enqueues_through_its_sqlalchemy_url(
    database_url: str, db: object, scheme: str
) -> None:
    """The URL a FastAPI app already has for SQLAlchemy opens pgenough's pool as it is."""
    url = _server(database_url).replace("postgresql://", f"{scheme}://", 1)
    pool = await open_pool(url, max_size=1)
    try:
        async with pool.connection() as conn:
            assert await enqueue(conn, "sqlalchemy-url", {"n": 1}) is not None
    finally:
        await pool.close()


@pytest.mark.parametrize(
    ("url", "libpq"),
    [
        ("postgresql+psycopg://u@h/d", "postgresql://u@h/d"),
        (
            "postgresql+psycopg2://u:p@h:1/d?sslmode=require",
            "postgresql://u:p@h:1/d?sslmode=require",
        ),
        ("postgres+asyncpg://u@h/d", "postgres://u@h/d"),
        ("postgresql://u@h/d", "postgresql://u@h/d"),
        ("host=h dbname=d", "host=h dbname=d"),
        ("postgresql+foo://u@h/d", "postgresql+foo://u@h/d"),  # refused when used
        ("mysql+psycopg://u@h/d", "mysql+psycopg://u@h/d"),
    ],
)
def test_only_sqlalchemys_postgresql_drivers_are_dropped(url: str, libpq: str) -> None:
    assert libpq_url(url) == libpq


@pytest.mark.parametrize(
    ("url", "servers"),
    [
        ("postgresql://h1:5432,h2:5433/d", ["h1:5432", "h2:5433"]),
        ("postgresql://h1,h2/d", ["h1:5432", "h2:5432"]),
        ("postgresql://h1:6000,h2/d", ["h1:6000", "h2:5432"]),  # libpq's empty port: default
        ("postgresql://[::1]:5433,h2/d", ["[::1]:5433", "h2:5432"]),
        ("host=/run/a,/run/b port=5432,5433", ["/run/a/.s.PGSQL.5432", "/run/b/.s.PGSQL.5433"]),
        ("hostaddr=10.0.0.1 port=6432", ["10.0.0.1:6432"]),
    ],
)
def test_every_server_of_a_url_is_named(url: str, servers: list[str]) -> None:
    found = targets({k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None})
    assert [t.where for t in found] == servers
    assert where(url) == ", ".join(servers)
