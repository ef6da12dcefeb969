"""``/search``: its query parameters, parsed and checked (pure), and the keyset pages of
events PostgreSQL builds for it.

Parameters (each at most once; an empty value counts as absent; any other parameter, such as
a cache buster ``_=1622505600000``, is ignored):

* ``starts_at``, ``ends_at``: an RFC 3339 date-time (any number of fractional digits, read to
  the microsecond: digits beyond are truncated; a leap second ``:60`` is the next second, as
  PostgreSQL reads it), or one of these relaxations: ``T`` may be a space; seconds may be
  left out; without an offset the time is UTC; an offset may be ``+0200`` or ``+02``; a
  space before the offset is read as ``+`` (an unencoded ``+`` in a query string arrives as
  a space); a plain date ``YYYY-MM-DD`` is midnight UTC at its start (as ``ends_at`` it
  excludes events ending later that day). ``INSTANT_PATTERN`` is exactly this syntax.
* ``limit``: 1..500; absent: every matching event, streamed. ``offset``: 0..100000,
  default 0. ASCII decimal digits only (no sign).
* ``after``: the cursor of a ``Link: <...>; rel="next"`` header (``pgenough_plans.api.cursor``,
  signed with the deployment's key): the page after the last event of the previous one,
  never before ``starts_at``. Not with ``offset``.

An event matches when ``starts_at <= event start`` and ``event end <= ends_at``; an event
without an end matches only when ``ends_at`` is absent. Only plans ever seen online; ordered by
start, then id.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import psycopg

from pgenough.core.db import named_queries
from pgenough_plans.api import cursor
from pgenough_plans.api.cursor import Cursor
from pgenough_plans.api.errors import InvalidRequest

Q: Final = named_queries("pgenough_plans.api", "search")

MAX_LIMIT: Final = 500
MAX_OFFSET: Final = 100_000
STREAM_PAGE: Final = 1_000
"""Events per keyset page of a search without ``limit`` (about 200 bytes each)."""
PARAMETERS: Final = ("starts_at", "ends_at", "limit", "offset", "after")

_INSTANT_SYNTAX: Final = (
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:[Tt ](?P<hm>[0-9]{2}:[0-9]{2})(?::(?P<second>[0-9]{2})(?:\.(?P<fraction>[0-9]+))?)?"
    r"(?P<offset>[Zz]|[+\- ][0-9]{2}(?::?[0-9]{2})?)?)?"
)
_INSTANT: Final = re.compile(_INSTANT_SYNTAX, re.ASCII)
INSTANT_PATTERN: Final = "^" + re.sub(r"\?P<\w+>", "", _INSTANT_SYNTAX) + "$"
"""The accepted syntax, as the OpenAPI document's (ECMA-262) pattern."""
_DIGITS: Final = re.compile(r"[0-9]+", re.ASCII)
_SHOWN: Final = 40  # characters of a bad value quoted back in an error message
_NIL_ID: Final = uuid.UUID(int=0)  # below every plan id (they are version 3 UUIDs)


@dataclass(frozen=True)
class SearchQuery:
    starts_at: datetime | None = None
    """UTC, or None for no lower bound."""
    ends_at: datetime | None = None
    limit: int | None = None
    """None: every matching event."""
    offset: int = 0
    after: Cursor | None = None
    cursor_key: bytes | None = field(default=None, repr=False, compare=False)
    """What signs the cursors of its ``Link`` headers; None: it has none to make."""

    @property
    def cache_key(self) -> tuple[datetime | None, datetime | None, int | None] | None:
        """First pages only: the normalised bounds and the limit."""
        if self.offset or self.after is not None:
            return None
        return (self.starts_at, self.ends_at, self.limit)

    @property
    def page_size(self) -> int:
        return STREAM_PAGE if self.limit is None else self.limit

    def sql_params(self, after: Cursor | None, offset: int) -> dict[str, Any]:
        """The page of ``page_size`` events after ``after`` (skipping ``offset`` first), and
        never before ``starts_at``, whatever the cursor says."""
        # One lower bound, the later of two keys: the cursor's and (starts_at, nil id).
        start, ident = self.starts_at, _NIL_ID
        if after is not None and (start is None or after.starts_at >= start):
            start, ident = after.starts_at, after.id
        return {
            "ends_at": self.ends_at,
            "after_start": "-infinity" if start is None else start,
            "after_id": ident,
            "limit": self.page_size,
            "offset": offset,
        }

    def next_link(self, after: Cursor) -> str:
        """The relative URL of the page after ``after`` (never built from the Host header)."""
        if self.cursor_key is None:
            raise ValueError("a query parsed without a cursor key cannot link to its next page")
        params = [
            (name, value.isoformat().replace("+00:00", "Z"))
            for name, value in (("starts_at", self.starts_at), ("ends_at", self.ends_at))
            if value is not None
        ]
        if self.limit is not None:
            params.append(("limit", str(self.limit)))
        params.append(
            ("after", cursor.encode(after, self.starts_at, self.ends_at, self.cursor_key))
        )
        query = "&".join(f"{name}={value.replace('+', '%2B')}" for name, value in params)
        return f"/search?{query}"


@dataclass(frozen=True)
class Page:
    events: str
    """The page's events as JSON objects joined by commas ("" when none)."""
    more: bool
    """More events follow ``last``."""
    last: Cursor | None
    """The key of the page's last event, when more follow."""


def _show(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


def parse_instant(name: str, value: str) -> datetime:
    """An instant as ``INSTANT_PATTERN`` has it, as an aware UTC datetime; ``InvalidRequest``
    if not."""
    match = _INSTANT.fullmatch(value)
    problem = "is not an RFC 3339 date-time (such as 2021-06-30T20:00:00Z) or date (2021-06-30)"
    if match is None:
        raise InvalidRequest(f"{name}: {_show(value)} {problem}")
    text = match["date"]
    leap = False
    if match["hm"]:
        second = match["second"] or "00"
        leap = second == "60"
        fraction = match["fraction"]
        offset = match["offset"] or ""
        if offset.startswith(" "):
            offset = "+" + offset[1:]
        text += f"T{match['hm']}:{'59' if leap else second}"
        text += f".{fraction[:6].ljust(6, '0')}" if fraction else ""
        text += offset.upper()
    try:
        instant = datetime.fromisoformat(text)
        if leap:
            instant += timedelta(seconds=1)
    except (ValueError, OverflowError) as exc:
        raise InvalidRequest(f"{name}: {_show(value)} is not a valid date-time: {exc}") from None
    if instant.tzinfo is None:
        return instant.replace(tzinfo=UTC)
    try:
        return instant.astimezone(UTC)
    except OverflowError:
        raise InvalidRequest(f"{name}: {_show(value)} is out of range") from None


def parse_int(name: str, value: str, low: int, high: int) -> int:
    """``value`` as ASCII decimal digits (leading zeros allowed, no sign) in low..high."""
    if _DIGITS.fullmatch(value) is None:
        raise InvalidRequest(
            f"{name}: {_show(value)} is not a whole number written in digits 0-9 (no sign)"
        )
    significant = value.lstrip("0") or "0"
    number = int(significant) if len(significant) <= len(str(high)) else high + 1
    if not low <= number <= high:
        raise InvalidRequest(f"{name}: must be between {low} and {high}, not {_show(value)}")
    return number


def parse_query(items: Iterable[tuple[str, str]], cursor_key: bytes) -> SearchQuery:
    """The search a query string asks for, its cursors signed with ``cursor_key``;
    ``InvalidRequest`` says what is wrong with it."""
    given: dict[str, str] = {}
    for name, value in items:
        if name not in PARAMETERS:
            continue  # a client's own parameter (a cache buster): not ours to refuse
        if name in given:
            raise InvalidRequest(f"parameter {name} given more than once")
        given[name] = value
    starts = given.get("starts_at") or None
    ends = given.get("ends_at") or None
    limit = given.get("limit") or None
    offset = given.get("offset") or None
    after = given.get("after") or None
    starts_at = parse_instant("starts_at", starts) if starts else None
    ends_at = parse_instant("ends_at", ends) if ends else None
    if starts_at and ends_at and ends_at < starts_at:
        raise InvalidRequest(
            f"ends_at ({ends_at.isoformat()}) is before starts_at ({starts_at.isoformat()})"
        )
    if after and offset:
        raise InvalidRequest("after and offset cannot be combined: the cursor says where to start")
    return SearchQuery(
        starts_at=starts_at,
        ends_at=ends_at,
        limit=parse_int("limit", limit, 1, MAX_LIMIT) if limit else None,
        offset=parse_int("offset", offset, 0, MAX_OFFSET) if offset else 0,
        after=cursor.decode(after, starts_at, ends_at, cursor_key) if after else None,
        cursor_key=cursor_key,
    )


async def fetch_page(
    conn: psycopg.AsyncConnection[Any], query: SearchQuery, after: Cursor | None, offset: int
) -> Page:
    """One page of ``query`` after ``after``, skipping ``offset`` events first."""
    cur = await conn.execute(Q["page"], query.sql_params(after, offset))
    row = await cur.fetchone()
    assert row is not None  # an aggregate always returns one row
    events, more, last_start, last_id = row
    last = Cursor(last_start, uuid.UUID(last_id)) if more else None
    return Page(events or "", bool(more), last)
