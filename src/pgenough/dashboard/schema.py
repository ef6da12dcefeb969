"""The dashboard's schema track, ``ui``: one table, ``pgenough.ui_revoked_sessions``
(``migrations/``, read and written by ``sessions.py``).

``pgenough migrate`` applies it with the core's (the SQL ships with the library, the extra or
not), as does ``pgenough dashboard`` at start; an application that mounts the dashboard
migrates it as it migrates the core: ``migrate(conn, [MIGRATIONS])``. The track and the table
keep the names they had when the dashboard was the plan service's, so databases migrated then
need nothing new.
"""

from __future__ import annotations

from typing import Final

from pgenough.core.migrations import MigrationSet

MIGRATIONS: Final = MigrationSet("ui", "pgenough.dashboard")
"""The dashboard's schema track; pass it to ``pgenough.core.migrate``."""
