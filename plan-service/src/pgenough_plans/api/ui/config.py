"""The dashboard's configuration: a frozen slice of the settings, checked when the app is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pgenough_plans.api.defaults import (
    DEFAULT_UI_LOGIN_MAX_BACKOFF,
    DEFAULT_UI_SESSION_MAX_AGE,
    DEFAULT_UI_STATEMENT_TIMEOUT,
    DEFAULT_UI_TICK,
)
from pgenough_plans.api.errors import ApiConfigError
from pgenough_plans.api.ui.hosts import LOOPBACK_ONLY, AllowedHosts

# A handful of pages and one live feed: three connections are plenty, and keep the dashboard
# from ever competing with /search for the database.
POOL_MAX_SIZE: Final = 3
DEFAULT_MAX_CLIENTS: Final = 64
DEFAULT_RUNS_PAGE: Final = 50
DEFAULT_JOBS_PAGE: Final = 100


@dataclass(frozen=True)
class UiConfig:
    enabled: bool = True
    database_url: str | None = None
    """None: the API's own database URL."""
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
    """``Host`` names the dashboard answers to, besides loopback ones (``api/ui/hosts.py``)."""
    runs_page: int = DEFAULT_RUNS_PAGE
    jobs_page: int = DEFAULT_JOBS_PAGE

    def __post_init__(self) -> None:
        if not all(v > 0 for v in (self.tick, self.statement_timeout, self.session_max_age)):
            raise ApiConfigError(
                "ui_tick, ui_statement_timeout and ui_session_max_age must be greater than 0"
            )
        if not self.login_max_backoff >= 1:
            raise ApiConfigError("ui_login_max_backoff must be at least 1 (second)")
        if min(self.max_clients, self.runs_page, self.jobs_page) < 1:
            raise ApiConfigError(
                "the dashboard needs max_clients, runs_page and jobs_page of at least 1"
            )
        if self.token is not None and not self.token:
            raise ApiConfigError("ui_token must not be empty (unset it to disable the login)")
