"""The ``after`` cursor of ``/search``: where the next page starts, opaque to clients.

A cursor is the (start, id) key of the last event of a page, the order ``/search`` sorts by,
so the next page is an index range scan from there whatever the page number (an ``offset``
reads and drops every row before it). It also binds the bounds it was made for: following it
with other ``starts_at``/``ends_at`` is refused rather than answered with a page of another
search.

It is signed: a keyed BLAKE2b MAC over the version, the key and the bounds, with the
deployment's secret (``api_cursor_secret``, or else one generated once in the database, which
every replica of the API reads at start-up). A cursor that was edited, cut short, made up,
made by an older pgenough (version 1, unsigned) or by another deployment is refused (400).
Nobody without the secret can mint one. A signature is not the only guard: ``/search`` never
reads before ``starts_at`` whatever a cursor says (``SearchQuery.sql_params``), so even a
cursor minted with the secret cannot widen a query.

Pure: the key is an argument (``key_of`` derives it from a secret of any length).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from pgenough_plans.api.errors import ApiConfigError, InvalidRequest

VERSION: Final = 2
"""1: an unkeyed checksum (refused since); 2: a keyed MAC."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_KEY: Final = struct.Struct(">Bq16s8s")  # version, start in µs since the epoch, id, bounds
_MAC_BYTES: Final = 16
_PERSON: Final = b"pgenough-after"
_ENCODED_LENGTH: Final = len(base64.urlsafe_b64encode(bytes(_KEY.size + _MAC_BYTES)).rstrip(b"="))
KEY_BYTES: Final = 32
MIN_SECRET_LENGTH: Final = 32
"""Characters of ``api_cursor_secret``, at least."""


@dataclass(frozen=True)
class Cursor:
    starts_at: datetime
    """The start of the last event already sent (UTC)."""
    id: uuid.UUID
    """Its id: the tie-break among events that start at the same instant."""


def key_of(secret: bytes) -> bytes:
    """The MAC key for a secret of any length (the database's bytes, the setting's text)."""
    if not secret:
        raise ValueError("a cursor key needs a secret")
    return hashlib.blake2b(secret, digest_size=KEY_BYTES, person=b"pgenough-ckey").digest()


def key_of_setting(secret: str) -> bytes:
    """The key from ``api_cursor_secret``; ``ApiConfigError`` when it is too short to be
    one."""
    if len(secret) < MIN_SECRET_LENGTH:
        raise ApiConfigError(
            f"api_cursor_secret must be at least {MIN_SECRET_LENGTH} characters"
            " (such as the output of `openssl rand -hex 32`), or unset for the database's"
        )
    return key_of(secret.encode())


def _mac(key: bytes, data: bytes) -> bytes:
    if not key:
        raise ValueError("a cursor needs a key")  # an empty key would be no key at all
    return hashlib.blake2b(data, digest_size=_MAC_BYTES, key=key, person=_PERSON).digest()


def _bounds(starts_at: datetime | None, ends_at: datetime | None) -> bytes:
    text = f"{starts_at.isoformat() if starts_at else ''}/{ends_at.isoformat() if ends_at else ''}"
    return hashlib.blake2b(text.encode(), digest_size=8, person=_PERSON).digest()


def _micros(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def encode(cursor: Cursor, starts_at: datetime | None, ends_at: datetime | None, key: bytes) -> str:
    """The cursor as the ``after`` value of the next page of the search with these bounds,
    signed with ``key``."""
    data = _KEY.pack(
        VERSION, _micros(cursor.starts_at), cursor.id.bytes, _bounds(starts_at, ends_at)
    )
    return base64.urlsafe_b64encode(data + _mac(key, data)).rstrip(b"=").decode()


def decode(value: str, starts_at: datetime | None, ends_at: datetime | None, key: bytes) -> Cursor:
    """The cursor ``value`` encodes for a search with these bounds; ``InvalidRequest`` if it
    is not one ``encode`` made with ``key``, or was made for other bounds."""
    invalid = InvalidRequest(
        "after: not a cursor this API made (copy the whole after= value of a Link header)"
    )
    if len(value) != _ENCODED_LENGTH or not value.isascii():
        raise invalid
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise invalid from None
    data, mac = raw[: _KEY.size], raw[_KEY.size :]
    if len(raw) != _KEY.size + _MAC_BYTES or not hmac.compare_digest(_mac(key, data), mac):
        raise invalid
    version, micros, ident, bounds = _KEY.unpack(data)
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
