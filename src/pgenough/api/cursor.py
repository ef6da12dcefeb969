"""The ``after`` cursor of ``/search``: where the next page starts, opaque to clients.

A cursor is the (start, id) key of the last event of a page, the order ``/search`` sorts by,
so the next page is an index range scan from there whatever the page number (an ``offset``
reads and drops every row before it). It also binds the bounds it was made for: following it
with other ``starts_at``/``ends_at`` is refused rather than answered with a page of another
search.

Its checksum catches a cursor that was edited, cut short or made up; it is not a secret and
needs none: a cursor says only where a page starts, which any client can ask with
``starts_at``. A forged cursor that passes the check is a search from another position.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from pgenough.api.errors import InvalidRequest

VERSION: Final = 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_KEY: Final = struct.Struct(">Bq16s8s")  # version, start in µs since the epoch, id, bounds
_CHECK_BYTES: Final = 8
_ENCODED_LENGTH: Final = len(base64.urlsafe_b64encode(bytes(_KEY.size + _CHECK_BYTES)).rstrip(b"="))


@dataclass(frozen=True)
class Cursor:
    starts_at: datetime
    """The start of the last event already sent (UTC)."""
    id: uuid.UUID
    """Its id: the tie-break among events that start at the same instant."""


def _digest(data: bytes, size: int) -> bytes:
    return hashlib.blake2b(data, digest_size=size, person=b"pgenough-after").digest()


def _bounds(starts_at: datetime | None, ends_at: datetime | None) -> bytes:
    text = f"{starts_at.isoformat() if starts_at else ''}/{ends_at.isoformat() if ends_at else ''}"
    return _digest(text.encode(), 8)


def _micros(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def encode(cursor: Cursor, starts_at: datetime | None, ends_at: datetime | None) -> str:
    """The cursor as the ``after`` value of the next page of the search with these bounds."""
    key = _KEY.pack(
        VERSION, _micros(cursor.starts_at), cursor.id.bytes, _bounds(starts_at, ends_at)
    )
    return base64.urlsafe_b64encode(key + _digest(key, _CHECK_BYTES)).rstrip(b"=").decode()


def decode(value: str, starts_at: datetime | None, ends_at: datetime | None) -> Cursor:
    """The cursor ``value`` encodes for a search with these bounds; ``InvalidRequest`` if it
    is not one ``encode`` made, or was made for other bounds."""
    invalid = InvalidRequest(
        "after: not a cursor this API made (copy the whole after= value of a Link header)"
    )
    if len(value) != _ENCODED_LENGTH or not value.isascii():
        raise invalid
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise invalid from None
    key, check = raw[: _KEY.size], raw[_KEY.size :]
    if len(raw) != _KEY.size + _CHECK_BYTES or _digest(key, _CHECK_BYTES) != check:
        raise invalid
    version, micros, ident, bounds = _KEY.unpack(key)
    if version != VERSION:
        raise invalid
    if bounds != _bounds(starts_at, ends_at):
        raise InvalidRequest(
            "after: this cursor belongs to a search with other starts_at/ends_at;"
            " follow the Link header as it is"
        )
    try:
        start = _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        raise invalid from None
    return Cursor(start, uuid.UUID(bytes=ident))
