"""``/search``: its query parameters, parsed and checked (pure), and the one SQL statement
that returns the whole response body, built by PostgreSQL.

Parameters (anything else is refused; each at most once; an empty value counts as absent):

* ``starts_at``, ``ends_at``: ISO-8601 ``YYYY-MM-DDTHH:MM[:SS[.ffffff]]`` with an optional
  offset (``Z``, ``+02:00``, ``+0200``, ``+02``); without one, UTC. ``T`` may be ``t`` or a
  space. A space before the offset is read as ``+`` (an unencoded ``+`` in a query string
  arrives as a space). A plain date ``YYYY-MM-DD`` means midnight UTC at its start: as
  ``ends_at`` it excludes events ending later that day.
* ``limit``: 1..500, default 50. ``offset``: 0..100000, default 0. Decimal digits only.

An event matches when ``starts_at <= event start`` and ``event end <= ends_at``; an event
without an end matches only when ``ends_at`` is absent. Only plans ever seen online; ordered by
start, then id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgenough.api import metrics
from pgenough.api.errors import InvalidRequest, TooBusy, Unavailable
from pgenough.core import named_queries

Q: Final = named_queries("pgenough.api", "search")

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
MAX_OFFSET: Final = 100_000
PARAMETERS: Final = ("starts_at", "ends_at", "limit", "offset")

_INSTANT: Final = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})"
    r"(?:[Tt ](?P<time>\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)"
    r"(?P<offset>[Zz]|[+\- ]\d{2}(?::?\d{2})?)?)?"
)
_DIGITS: Final = re.compile(r"-?[0-9]+")
_SHOWN: Final = 40  # characters of a bad value quoted back in an error message


@dataclass(frozen=True)
class SearchQuery:
    starts_at: datetime | None = None
    """UTC, or None for no lower bound."""
    ends_at: datetime | None = None
    limit: int = DEFAULT_LIMIT
    offset: int = 0

    @property
    def cache_key(self) -> tuple[datetime | None, datetime | None, int] | None:
        """First pages only: the normalised bounds and the limit."""
        return (self.starts_at, self.ends_at, self.limit) if self.offset == 0 else None

    def sql_params(self) -> dict[str, Any]:
        return {
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
            "limit": self.limit,
            "offset": self.offset,
        }


def _show(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


def parse_instant(name: str, value: str) -> datetime:
    """An ISO-8601 date-time (or date) as an aware UTC datetime; ``InvalidRequest`` if not."""
    match = _INSTANT.fullmatch(value)
    problem = "is not an ISO-8601 date-time (such as 2021-06-30T20:00:00Z) or date (2021-06-30)"
    if match is None:
        raise InvalidRequest(f"{name}: {_show(value)} {problem}")
    text = match["date"]
    if match["time"]:
        offset = match["offset"] or ""
        if offset.startswith(" "):
            offset = "+" + offset[1:]
        text = f"{text}T{match['time']}{offset.upper()}"
    try:
        instant = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidRequest(f"{name}: {_show(value)} is not a valid date-time: {exc}") from None
    if instant.tzinfo is None:
        return instant.replace(tzinfo=UTC)
    try:
        return instant.astimezone(UTC)
    except OverflowError:
        raise InvalidRequest(f"{name}: {_show(value)} is out of range") from None


def parse_int(name: str, value: str, low: int, high: int) -> int:
    if _DIGITS.fullmatch(value) is None:
        raise InvalidRequest(f"{name}: {_show(value)} is not an integer")
    number = int(value) if len(value) <= 12 else high + 1
    if not low <= number <= high:
        raise InvalidRequest(f"{name}: must be between {low} and {high}, not {_show(value)}")
    return number


def parse_query(items: Iterable[tuple[str, str]]) -> SearchQuery:
    """The search a query string asks for; ``InvalidRequest`` says what is wrong with it."""
    given: dict[str, str] = {}
    for name, value in items:
        if name not in PARAMETERS:
            raise InvalidRequest(
                f"unknown parameter {_show(name)}; /search takes {', '.join(PARAMETERS)}"
            )
        if name in given:
            raise InvalidRequest(f"parameter {name} given more than once")
        given[name] = value
    starts = given.get("starts_at") or None
    ends = given.get("ends_at") or None
    limit = given.get("limit") or None
    offset = given.get("offset") or None
    query = SearchQuery(
        starts_at=parse_instant("starts_at", starts) if starts else None,
        ends_at=parse_instant("ends_at", ends) if ends else None,
        limit=parse_int("limit", limit, 1, MAX_LIMIT) if limit else DEFAULT_LIMIT,
        offset=parse_int("offset", offset, 0, MAX_OFFSET) if offset else 0,
    )
    if query.starts_at and query.ends_at and query.ends_at < query.starts_at:
        raise InvalidRequest(
            f"ends_at ({query.ends_at.isoformat()}) is before starts_at"
            f" ({query.starts_at.isoformat()})"
        )
    return query


async def run_search(
    pool: AsyncConnectionPool,
    query: SearchQuery,
    *,
    pool_timeout: float,
    search_timeout: float,
    delay: float = 0.0,
) -> bytes:
    """The response body of ``query``, from PostgreSQL. The connection's statement_timeout
    (set when the pool connects) bounds the search: past it, ``TooBusy``."""
    try:
        async with pool.connection(timeout=pool_timeout) as conn:
            if delay:
                await conn.execute(Q["delay"], {"seconds": delay})
            cur = await conn.execute(Q["search"], query.sql_params())
            row = await cur.fetchone()
    except psycopg.errors.QueryCanceled as exc:
        metrics.SEARCH_TIMEOUTS.inc()
        raise TooBusy(
            f"the search did not finish within {search_timeout:g} s;"
            " retry later or narrow the range"
        ) from exc
    except PoolTimeout as exc:
        raise Unavailable("no database connection is available; retry later") from exc
    except psycopg.OperationalError as exc:
        raise Unavailable("the database cannot be reached; retry later") from exc
    assert row is not None  # an aggregate always returns one row
    body: str = row[0]
    return body.encode()
