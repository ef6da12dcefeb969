"""The dashboard's defaults, defined once: ``config.py`` builds on them, and
``pgenough.settings`` offers them as the settings' defaults (``PGENOUGH_UI_*``,
``PGENOUGH_DASHBOARD_*``).

Nothing here imports FastAPI or anything else of the ``dashboard`` extra, so the settings
load in an installation without it.
"""

from __future__ import annotations

from typing import Final

DEFAULT_HOST: Final = "127.0.0.1"
"""Where ``pgenough dashboard`` binds: this machine only, until the operator says otherwise."""
DEFAULT_PORT: Final = 8001
"""Beside the plan service's API (8000)."""
DEFAULT_UI_TICK: Final = 5.0
DEFAULT_UI_STATEMENT_TIMEOUT: Final = 3.0
DEFAULT_UI_SESSION_MAX_AGE: Final = 12 * 3600.0
DEFAULT_UI_LOGIN_MAX_BACKOFF: Final = 60.0
DEFAULT_MAX_CLIENTS: Final = 64
DEFAULT_JOBS_PAGE: Final = 100
DEFAULT_FAILURE_WINDOW: Final = 3600.0
"""Seconds of failures the overview counts (as ``pgenough status``)."""
