"""The dashboard's configuration: a frozen slice of the settings (``Settings.ui_config``),
checked when it is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pgenough.dashboard.defaults import (
    DEFAULT_FAILURE_WINDOW,
    DEFAULT_JOBS_PAGE,
    DEFAULT_MAX_CLIENTS,
    DEFAULT_UI_LOGIN_MAX_BACKOFF,
    DEFAULT_UI_SESSION_MAX_AGE,
    DEFAULT_UI_STATEMENT_TIMEOUT,
    DEFAULT_UI_TICK,
)
from pgenough.dashboard.errors import DashboardConfigError
from pgenough.dashboard.hosts import LOOPBACK_ONLY, AllowedHosts

# A handful of pages and one live feed: three connections are plenty, and keep the dashboard
# from ever competing with the application it sits in for the database.
POOL_MAX_SIZE: Final = 3


@dataclass(frozen=True)
class DashboardConfig:
    database_url: str | None = None
    """The dashboard's own database URL (``ui_database_url``); None: the one ``Dashboard`` is
    given."""
    actions: bool = False
    """Retry and discard allowed; off, the buttons are hidden and the POSTs answer 403."""
    token: str | None = None
    """When set, every page and action needs it (``Authorization: Bearer`` or the login)."""
    tick: float = DEFAULT_UI_TICK
    """Seconds between the live overview's periodic refreshes."""
    statement_timeout: float = DEFAULT_UI_STATEMENT_TIMEOUT
    max_clients: int = DEFAULT_MAX_CLIENTS
    """Browsers following the live overview at once; more get 503."""
    session_max_age: float = DEFAULT_UI_SESSION_MAX_AGE
    """Seconds a login lasts, unless a logout ends it first."""
    login_max_backoff: float = DEFAULT_UI_LOGIN_MAX_BACKOFF
    """The longest wait a client's wrong tokens earn it before its next try (``throttle``)."""
    allowed_hosts: AllowedHosts = LOOPBACK_ONLY
    """``Host`` names the dashboard answers to, besides loopback ones (``hosts.py``)."""
    jobs_page: int = DEFAULT_JOBS_PAGE
    failure_window: float = DEFAULT_FAILURE_WINDOW
    """Seconds of failures the overview counts."""
    migrate_hint: str = "pgenough migrate"
    """The command a page names when a table is missing (an application names its own)."""

    def __post_init__(self) -> None:
        positive = (self.tick, self.statement_timeout, self.session_max_age, self.failure_window)
        if not all(v > 0 for v in positive):
            raise DashboardConfigError(
                "ui_tick, ui_statement_timeout and ui_session_max_age must be greater than 0"
            )
        if not self.login_max_backoff >= 1:
            raise DashboardConfigError("ui_login_max_backoff must be at least 1 (second)")
        if min(self.max_clients, self.jobs_page) < 1:
            raise DashboardConfigError(
                "the dashboard needs max_clients and jobs_page of at least 1"
            )
        if self.token is not None and not self.token:
            raise DashboardConfigError("ui_token must not be empty (unset it to disable the login)")
