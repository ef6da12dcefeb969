"""Named SQL statements, kept in ``core/sql/*.sql`` beside the code that runs them.

A file holds statements separated by ``-- name: <name>`` headers; the comment lines right
after a header describe the statement. Values are psycopg named parameters.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Final, LiteralString

PLAN_EACH_TIME: Final = False
"""``prepare=PLAN_EACH_TIME`` (psycopg's ``execute`` argument): the statement is sent
unprepared, so PostgreSQL plans it with its values and the table's current size at every
execution.

For statements that find rows of a table whose size swings by orders of magnitude (the jobs
table above all: empty, then a burst of 200k, then empty again; the runs and plans tables of a
fresh database). psycopg prepares a statement after 5 executions, and PostgreSQL then keeps a
*generic* plan if it costs no more than the custom ones did: built while the table was empty,
that is a Seq Scan (a claim: Seq Scan + Sort of the whole table; a heartbeat: a nested loop
over two Seq Scans), kept until an ANALYZE or a VACUUM invalidates it, so every claim of a
worker that started on an empty queue became O(rows) in the next burst. Unlike
``plan_cache_mode`` it needs no session setting, so it holds on the caller's own connection
(an ORM's, one behind PgBouncer) as on ours. The claim itself, the one statement a worker
runs thousands of times a second, is kept prepared on the connection its loop holds, under
``plan_cache_mode = force_custom_plan`` and ``enable_sort = off``
(``worker._executor.Executor._hold``, which says why a custom plan alone is not enough for it);
``python -m bench.claim_plans`` measures parsing and planning it at every execution against a
prepared claim. See
docs/architecture.md, "Plans that stay right"."""

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
