"""Named SQL statements, kept in ``core/sql/*.sql`` beside the code that runs them.

A file holds statements separated by ``-- name: <name>`` headers; the comment lines right
after a header describe the statement. Values are psycopg named parameters.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import LiteralString

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, LiteralString]:
    """Split a file of named statements into ``{name: sql}``."""
    parts = _HEADER.split(text)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"duplicate statement name {name!r}")
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        # The text comes from files shipped in the package, never from input.
        queries[name] = "\n".join(lines).strip()
    return queries


@cache
def named_queries(package: str, area: str) -> dict[str, LiteralString]:
    """The statements of ``<package>/sql/<area>.sql``, by name."""
    text = resources.files(package).joinpath("sql", f"{area}.sql").read_text("utf-8")
    return parse(text)


def load(area: str) -> dict[str, LiteralString]:
    """The statements of ``core/sql/<area>.sql``."""
    return named_queries("pgenough.core", area)
