"""How the dashboard reads what a client sends it: ids and text, from a query string, a path
or a form. Every dashboard parameter goes through here, so a bad value is a 400 that names the
parameter, never a 500 from PostgreSQL.

Python and PostgreSQL disagree on what a number or a string may be: ``str.isdigit`` accepts
``²`` (which ``int`` refuses), ``int`` grows past ``bigint``, and ``text`` may not hold a NUL
character. An id is therefore ASCII digits within ``bigint``; a text value has no NUL and at
most ``MAX_TEXT`` characters (longer than any queue or task name, short enough to show).
An extension's pages read theirs with the same functions (``pgenough.dashboard``'s
``text_param``, ``id_param``, ``path_id``).
"""

from __future__ import annotations

import re
from typing import Final

from pgenough.dashboard.errors import DashboardError

BIGINT_MAX: Final = 2**63 - 1
"""The largest id PostgreSQL's ``bigint`` (every id column) can hold."""
MAX_TEXT: Final = 200
MAX_NEXT: Final = 2048
"""Characters of a ``next`` dashboard URL (a page's own path and query string)."""
FILTER: Final = "Bad filter"
FORM: Final = "Bad form"
PATH: Final = "Bad address"
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: \d would accept any script's digits


def bad(message: str, title: str = FILTER) -> DashboardError:
    """A 400 page titled ``title`` saying ``message``."""
    return DashboardError(400, "INVALID_REQUEST", message, title)


def checked_id(name: str, value: int, what: str, title: str = PATH) -> int:
    """``value`` when it is an id PostgreSQL can compare (the path's convertor gave an int)."""
    if not 0 <= value <= BIGINT_MAX:
        raise bad(f"{name} must be {what}: a whole number from 0 to {BIGINT_MAX}", title)
    return value


def optional_id(name: str, raw: str, what: str, title: str = FILTER) -> int | None:
    """An id from a query string or a form; None when empty."""
    raw = raw.strip()
    if not raw:
        return None
    if not _DIGITS.fullmatch(raw):
        raise bad(f"{name} must be {what}: a whole number from 0 to {BIGINT_MAX}", title)
    return checked_id(name, int(raw), what, title)


def text(name: str, raw: str, title: str = FILTER, max_length: int = MAX_TEXT) -> str:
    """A text value, stripped; empty when absent."""
    value = raw.strip()
    if "\x00" in value:
        raise bad(f"{name} must not contain a NUL character", title)
    if len(value) > max_length:
        raise bad(f"{name} must be at most {max_length} characters", title)
    return value
