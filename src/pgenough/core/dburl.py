"""The database URL: the forms accepted, the servers it names, and what a failure to reach
them says.

A URL is what libpq reads - ``postgresql://`` or ``postgres://``, or ``host=... dbname=...``
pairs - and SQLAlchemy's form of the same URL, ``postgresql+psycopg://`` (``+psycopg2``,
``+asyncpg`` ...), which an application may share with pgenough: the driver is SQLAlchemy's
business, the rest is the libpq URL, so the suffix is dropped (``libpq_url``).

A failure to connect says where it tried and why, first and short: ``127.0.0.1:5999:
connection refused``, ``db1:5432: no such host; db2:5432: timed out (no answer within 5 s)``.
Never the URL itself: pgenough adds options to it (keepalives, timeouts, ``options``), which
would bury the cause, and its password must never be shown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, timeout_from_conninfo

from pgenough.core.errors import DatabaseError, first_line

SQLALCHEMY_DRIVERS: Final = frozenset(
    {"psycopg", "psycopg_async", "psycopg2", "psycopg2cffi", "asyncpg", "pg8000"}
)
"""SQLAlchemy's PostgreSQL drivers, as they follow the dialect (``postgresql+psycopg://``)."""

ACCEPTED: Final = (
    "postgresql://user@host:port/dbname (or postgres://, postgresql+psycopg://, +psycopg2,"
    ' +asyncpg) or "host=... dbname=..."'
)
"""What a database URL may be, for the message that refuses one."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_LIBPQ_SCHEMES: Final = ("postgresql", "postgres")
_QUOTED = re.compile(r'"([^"]*)"')
_AT_SERVER = re.compile(
    r'^connection to server (?:at "[^"]*"(?: \([^)]*\))?, port \d+|on socket "[^"]*") failed: '
)
_SOCKET = re.compile(r'connection to server on socket "([^"]*)"')
_PREFIXES: Final = ("connection failed: ", "connection is bad: ")
_TRAILERS: Final = ("\n\t", "\nDETAIL:", "\nHINT:", "\nMultiple connection attempts failed")
"""Where the message of a failed connection ends and libpq's hints, the server's details or
psycopg's list of the attempts begin."""
_NO_SUCH_HOST: Final = (
    "not known",  # glibc: Name or service not known
    "no address associated",  # glibc: No address associated with hostname
    "nodename nor servname",  # BSD, macOS
    "no such host",  # Windows
)
POOLER_HINT: Final = (
    "a transaction pooler such as PgBouncer refuses session options: name the server itself"
    " as the direct URL beside it (PGENOUGH_DIRECT_DATABASE_URL)"
)


def libpq_url(url: str) -> str:
    """``url`` as libpq reads it: SQLAlchemy's ``postgresql+DRIVER://`` (and
    ``postgres+DRIVER://``) without the driver; anything else as it is."""
    match = _SCHEME.match(url)
    if match is None:
        return url
    dialect, _, driver = match.group(1).partition("+")
    if dialect in _LIBPQ_SCHEMES and driver in SQLALCHEMY_DRIVERS:
        return f"{dialect}://{url[match.end() :]}"
    return url


def parse(url: str) -> dict[str, str]:
    """The connection parameters of ``url`` (``libpq_url``'s forms); a ``DatabaseError``
    naming the forms accepted, and never the password, when it is none of them."""
    try:
        params = conninfo_to_dict(libpq_url(url))
    except psycopg.ProgrammingError as exc:
        # libpq's message quotes the string, password included: neither it nor the chained
        # exception may reach a log or a traceback.
        raise invalid(url, exc) from None
    return {key: str(value) for key, value in params.items() if value is not None}


def invalid(url: str, exc: Exception) -> DatabaseError:
    """The error for ``url``, which libpq could not read (``exc``): its scheme when that is
    not PostgreSQL's; else libpq's reason with what it quotes of the URL left out, and the
    forms accepted when ``url`` is not even a URL."""
    match = _SCHEME.match(url)
    if match is not None and libpq_url(url).partition("://")[0] not in _LIBPQ_SCHEMES:
        return DatabaseError(f"unsupported database url scheme {match.group(1)}://: use {ACCEPTED}")
    secrets = _passwords(url)

    def quoted(found: re.Match[str]) -> str:
        text = found.group(1)
        hidden = "@" in text or "://" in text or any(s in text for s in secrets)
        return '"…"' if hidden else found.group(0)

    reason = _QUOTED.sub(quoted, first_line(exc))
    for secret in secrets:  # whatever libpq says, the password stays unsaid
        reason = reason.replace(secret, "***")
    accepted = f"; use {ACCEPTED}" if match is None else ""
    return DatabaseError(f"invalid database url: {reason}{accepted}")


def _passwords(url: str) -> list[str]:
    """The passwords ``url`` seems to hold (a URL's user info, a ``password`` parameter),
    even when it does not parse: what a message about it must not repeat."""
    found = re.findall(r"://[^@/?#\s]*?:([^@/?#\s]*)@", url)
    found += re.findall(r"[?&]password=([^&#]*)", url)
    for quoted, plain in re.findall(r"password\s*=\s*(?:'((?:[^'\\]|\\.)*)'?|(\S+))", url):
        found.append(quoted or plain)
    return [secret for secret in found if secret]


@dataclass(frozen=True)
class Target:
    """One server a URL names: a host and port, or a Unix socket."""

    where: str
    """``host:port``, ``[::1]:port``, or the socket's path, for messages."""
    params: dict[str, str]
    """The URL's parameters with this server only."""
    socket: bool
    """A Unix-domain socket: its path is libpq's to tell when the URL names no host."""


def targets(params: dict[str, str]) -> list[Target]:
    """Each server of ``params`` in the order libpq tries them: the hosts (and their
    ``hostaddr``) of a multi-host URL with their ports, or the one server, from the URL or
    else libpq's environment (``PGHOST``, ``PGPORT``) and defaults."""
    effective = {**_libpq_defaults(), **params}
    hosts = _split(effective.get("host"))
    addrs = _split(effective.get("hostaddr"))
    ports = _split(effective.get("port"))
    count = max(len(hosts), len(addrs), 1)
    if len(ports) == 1:
        ports = ports * count
    fits = all(len(values) in (0, count) for values in (hosts, addrs, ports))
    if not fits:  # libpq refuses such a URL, and says why
        return [Target(_describe(hosts or addrs, ports), params, socket=False)]
    found = []
    for i in range(count):
        host = hosts[i] if hosts else ""
        addr = addrs[i] if addrs else ""
        port = ports[i] if ports else ""
        one = dict(params)
        for key, value in (("host", host), ("hostaddr", addr), ("port", port)):
            if value:
                one[key] = value
            else:
                one.pop(key, None)
        socket = not addr and (not host or host.startswith(("/", "@")))
        found.append(Target(_where(host or addr, port, socket), one, socket))
    return found


def _libpq_defaults() -> dict[str, str]:
    """Where libpq connects when the URL does not say: its environment, then its defaults."""
    wanted = {b"host", b"hostaddr", b"port"}
    return {
        option.keyword.decode(): option.val.decode(errors="replace")
        for option in pq.Conninfo.get_defaults()
        if option.keyword in wanted and option.val
    }


def _split(value: str | None) -> list[str]:
    return [] if not value else [part.strip() for part in value.split(",")]


def _where(host: str, port: str, socket: bool) -> str:
    if socket:
        name = f".s.PGSQL.{port or '5432'}"
        return f"{host}/{name}" if host else name
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port or '5432'}"


def _describe(hosts: Sequence[str], ports: Sequence[str]) -> str:
    return f"{','.join(hosts) or 'localhost'}:{','.join(ports) or '5432'}"


def where(url: str) -> str:
    """Every server ``url`` names, for a message (``host:port, host:port``)."""
    try:
        params = parse(url)
    except DatabaseError:
        return "<invalid database url>"
    return ", ".join(target.where for target in targets(params))


def cannot_connect(failures: Sequence[tuple[Target, Exception]]) -> DatabaseError:
    """The error of a connection that no server of its URL accepted: each server with its
    reason (``Target.where``: ``reason``), those that failed alike together, in the order
    tried."""
    reasons: dict[str, list[str]] = {}
    for target, exc in failures:
        place = target.where
        if target.socket:
            # The socket libpq tried (its default directory when the URL names none).
            tried = _SOCKET.search(str(exc))
            place = tried.group(1) if tried else place
        reasons.setdefault(reason(exc, target.params), []).append(place)
    text = "; ".join(f"{', '.join(places)}: {why}" for why, places in reasons.items())
    return DatabaseError(text)


def reason(exc: Exception, params: dict[str, str] | None = None) -> str:
    """Why a connection failed, in a few words: connection refused, no such host, timed
    out, or the server's own reason (a database or role that does not exist, an
    authentication that failed)."""
    if isinstance(exc, psycopg.errors.ConnectionTimeout) or "timeout expired" in str(exc):
        try:
            return f"timed out (no answer within {timeout_from_conninfo(dict(params or {}))} s)"
        except psycopg.Error:  # a connect_timeout that is no number: libpq's to refuse
            return "timed out"
    text = _message(exc)
    if text.startswith("failed to resolve host") or "could not translate host name" in text:
        detail = text.rpartition("]")[2].strip() or text
        if any(sign in detail.lower() for sign in _NO_SUCH_HOST):
            return "no such host"
        return f"cannot resolve the host name: {detail}"
    for prefix in _PREFIXES:
        text = text.removeprefix(prefix)
    text = _AT_SERVER.sub("", text).removeprefix("FATAL:").strip()
    if text == "No such file or directory":
        return "no such socket: is PostgreSQL running there?"
    if text.startswith("fe_sendauth: no password supplied"):
        return "the server asks for a password and the URL gives none"
    if "unsupported startup parameter" in text:
        return f"{text} ({POOLER_HINT})"
    if text[:1].isupper() and text[1:2].islower():  # libpq's strerror: Connection refused
        text = text[0].lower() + text[1:]
    return text or type(exc).__name__


def _message(exc: Exception, limit: int = 300) -> str:
    """``exc``'s message without what follows it (``_TRAILERS``): not merely its first line,
    since a name in it (a database, a socket directory) may hold a line break."""
    text = str(exc).strip()
    for trailer in _TRAILERS:
        text = text.partition(trailer)[0]
    return text.strip()[:limit] or type(exc).__name__
