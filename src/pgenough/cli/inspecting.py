"""What the inspecting and repairing commands share (pgenough's and an application's): their
help panel, a small pool that translates a database without the schema, and output as tables
or one JSON document."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import psycopg
import typer
from rich.console import Console, RenderableType

from pgenough import jsonable
from pgenough.cli.base import T, load_settings, out, run, setup_logging
from pgenough.core import open_pool
from pgenough.core.errors import DatabaseError, SchemaMissing
from pgenough.core.statements import AsyncConn
from pgenough.settings import Settings

# These commands never migrate: looking must not change the database, and a repair changes
# only the jobs it names. Each opens a small pool, calls one read or repair, and prints
# tables, or with --json exactly one JSON document on stdout.

INSPECT_PANEL = "Inspect and repair"
PIPED_WIDTH = 200
INSPECT_TIMEOUT = 5.0
"""Seconds to reach the database: someone asking for status wants an answer or an error now."""

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")
]


async def _on_connection(
    settings: Settings,
    name: str,
    action: Callable[[AsyncConn], Awaitable[T]],
    migrate_hint: str,
) -> T:
    """Run ``action`` on a connection of a two-connection pool, translating what psycopg says
    about a database without the tables into what the operator should do."""
    pool = await open_pool(
        settings.resolve_database_url(),
        max_size=2,
        name=name,
        timeout=INSPECT_TIMEOUT,
    )
    try:
        async with pool.connection() as conn:
            return await action(conn)
    except (
        SchemaMissing,  # the core's calls say so themselves; an operator needs one line
        psycopg.errors.UndefinedTable,
        psycopg.errors.InvalidSchemaName,
    ) as exc:
        raise DatabaseError(f"the schema is missing: run `{migrate_hint}`") from exc
    except psycopg.OperationalError as exc:
        # The connection broke mid-command (server restart, timeout): one line, no traceback.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseError(f"database error: {reason}") from exc
    finally:
        await pool.close()


def inspect(
    name: str,
    action: Callable[[AsyncConn], Awaitable[T]],
    settings: Settings | None = None,
    *,
    migrate_hint: str = "pgenough migrate",
) -> T:
    """``action`` on a connection to the settings' database (pgenough's by default), for
    command ``name``: a missing schema says to run ``migrate_hint``; a database that cannot
    be reached is one line."""
    settings = settings or load_settings(Settings)
    setup_logging(settings)
    return run(lambda: _on_connection(settings, f"pgenough-{name}", action, migrate_hint), settings)


def show(value: Any, as_json: bool, view: Callable[[], RenderableType]) -> None:
    """``value`` as one JSON document on stdout (``--json``), else ``view()`` as tables."""
    if as_json:
        # Plain stdout, not rich: rich would wrap and highlight, and the document must parse.
        sys.stdout.write(json.dumps(jsonable.as_json(value), indent=2) + "\n")
    else:
        # Piped into a file, grep or less, a table is not cut to 80 columns (rich's default
        # when it cannot ask a terminal); a terminal gets its own width.
        wide = out if out.is_terminal else Console(width=max(out.width, PIPED_WIDTH))
        wide.print(view())


def now() -> datetime:
    # Ages in tables are read against this machine's clock; --json carries the timestamps.
    return datetime.now(UTC)
