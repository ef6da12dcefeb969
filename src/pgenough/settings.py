"""pgenough's configuration, in one place: environment variables and an optional TOML file.

Precedence: command-line options > environment (``DATABASE_URL``, ``PGENOUGH_*``) > the TOML
file named by ``PGENOUGH_CONFIG`` (default ``./pgenough.toml`` when it exists) > defaults.
A file that is named but missing, or that cannot be read or parsed, is a ``ConfigFileError``,
never a file silently ignored.

The ``pgenough`` command reads this (``pgenough.cli``); the core never does. Each default is
the constant of the module that owns it, imported; each component's config is built by one
method here (``worker_config``, ``maintenance_config``...), and the database URL is resolved by
one (``resolve_database_url``).

An application built on pgenough extends ``Settings`` with its own fields: they read the same
environment (``PGENOUGH_*``), and the application names its own file through the class
variables ``CONFIG_ENV`` and ``CONFIG_FILE`` (the plan service reads ``pgenough-plans.toml``),
so that a key of one never makes the other's file invalid.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from pgenough.core import PgenoughError, WorkerConfig
from pgenough.core import history as core_history
from pgenough.core import maintenance as core_maintenance
from pgenough.core import worker as core_worker
from pgenough.core.db import (
    DEFAULT_NETWORK_TIMEOUT,
    database_url,
    default_data_dir,
    with_network_timeout,
)
from pgenough.core.maintenance import MaintenanceConfig
from pgenough.core.worker.config import MAX_BATCH_SIZE as MAX_BATCH_SIZE
from pgenough.core.worker.config import MAX_CONCURRENCY as MAX_CONCURRENCY
from pgenough.dashboard import defaults as dashboard_defaults
from pgenough.eventloop import DEFAULT_EVENT_LOOP, EventLoopChoice

if TYPE_CHECKING:
    from pgenough.dashboard import DashboardConfig

__all__ = [  # noqa: RUF022 (plainly sorted: tests/test_public_api.py)
    "ConfigFileError",
    "DEFAULT_CONFIG_FILE",
    "DEFAULT_POOL_MAX_SIZE",
    "MAX_BATCH_SIZE",
    "MAX_CONCURRENCY",
    "Settings",
]

DEFAULT_POOL_MAX_SIZE: Final = 10
DEFAULT_CONFIG_FILE: Final = "pgenough.toml"


class ConfigFileError(PgenoughError):
    """The configuration file is missing, not a file, unreadable, or not valid TOML."""


def _config_file(env: str, default: str) -> Path | None:
    """The TOML file to read: the one the variable ``env`` names, which must exist, else
    ``./default`` when it exists, else None."""
    named = os.environ.get(env)
    if named == "":
        raise ConfigFileError(f"{env} is empty: name a TOML file, or unset it")
    # Expanded as pydantic-settings expands it, so that both mean the same file.
    path = Path(named or default).expanduser()
    try:
        if not path.exists():
            if named is None:
                return None
            raise ConfigFileError(
                f"{env} names {named}, which does not exist: create it, or unset {env}"
            )
        if not path.is_file():
            hint = "remove it, or set" if named is None else "set"
            raise ConfigFileError(f"config file {path} is not a file: {hint} {env} to a TOML file")
    except OSError as exc:  # exists() lets a permission error through
        raise _unreadable(path, exc) from exc
    return path


def _unreadable(path: Path, exc: OSError) -> ConfigFileError:
    return ConfigFileError(f"cannot read config file {path}: {exc.strerror or exc}")


def _toml_source(settings_cls: type[Settings]) -> PydanticBaseSettingsSource:
    path = _config_file(settings_cls.CONFIG_ENV, settings_cls.CONFIG_FILE)
    if path is None:
        return TomlConfigSettingsSource(settings_cls, toml_file=None)
    try:
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    except UnicodeDecodeError as exc:
        raise ConfigFileError(
            f"config file {path} is not UTF-8 text: {exc.reason} at byte {exc.start}"
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"config file {path} is not valid TOML: {exc}") from exc


class Settings(BaseSettings):
    """pgenough's settings: the database, logging, the worker, maintenance, metrics and the
    dashboard."""

    # An infinite number of seconds passes the bounds below (inf > 0) but means nothing.
    model_config = SettingsConfigDict(env_prefix="PGENOUGH_", extra="forbid", allow_inf_nan=False)
    CONFIG_ENV: ClassVar[str] = "PGENOUGH_CONFIG"
    """The variable that names the TOML file to read."""
    CONFIG_FILE: ClassVar[str] = DEFAULT_CONFIG_FILE
    """The file read, when it exists, if ``CONFIG_ENV`` is unset."""

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("DATABASE_URL", "PGENOUGH_DATABASE_URL", "database_url"),
        description="PostgreSQL to use; unset = the embedded server under data_dir.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Where the embedded PostgreSQL keeps its data.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = Field(
        default="text", description="Log lines as text, or as one JSON object each."
    )
    log_jobs: bool = Field(
        default=True,
        description="Workers log a line per job done (logger pgenough.jobs, INFO); false keeps"
        " only the failures' lines (or `pgenough worker run --quiet`).",
    )
    event_loop: EventLoopChoice = Field(
        default=DEFAULT_EVENT_LOOP,
        description="The commands' event loop: auto = uvloop when installed, else asyncio's.",
    )
    pool_max_size: int = Field(
        default=DEFAULT_POOL_MAX_SIZE,
        ge=1,
        description="Connections of a command's pool; `pgenough worker run` grows its own to"
        " what its queues' concurrency needs.",
    )

    direct_database_url: str | None = Field(
        default=None,
        description="A direct (session) connection to the server when DATABASE_URL is a"
        " transaction pooler (PgBouncer pool_mode = transaction); setting it says DATABASE_URL"
        " is one. LISTEN (workers, the dashboard), session advisory locks and the dashboard go"
        " here; claims, enqueues and completions through DATABASE_URL. Unset: everything on"
        " DATABASE_URL (docs/operations/index.md, behind PgBouncer).",
    )
    network_timeout: float = Field(
        default=DEFAULT_NETWORK_TIMEOUT,
        gt=0,
        description="Seconds after which a connection gives up on a database (or a client) that"
        " stopped answering: a network cut, a host gone. libpq's connect_timeout, TCP keepalives"
        " and tcp_user_timeout on our side and, on direct connections, the server's for its end"
        " of each session (its locks and transaction end with a cut-off client's). A key the URL"
        " sets wins (docs/scaling.md, workers on other hosts).",
    )
    prepared_statements: bool | None = Field(
        default=None,
        description="Let pools prepare repeated statements server-side. Unset: yes, except"
        " behind a transaction pooler (direct_database_url set): PgBouncer before 1.21 cannot"
        " carry them; set true for PgBouncer 1.21+ with max_prepared_statements > 0.",
    )

    worker_concurrency: int = Field(
        default=core_worker.DEFAULT_CONCURRENCY,
        ge=1,
        le=MAX_CONCURRENCY,
        description="Jobs run at once per queue, 1..10000.",
    )
    worker_batch_size: int = Field(
        default=core_worker.DEFAULT_BATCH_SIZE,
        ge=1,
        le=MAX_BATCH_SIZE,
        description="Most jobs one claim of `pgenough worker run` takes, and so most items a"
        " batch task gets per call (also bounded by the concurrency), 1..1000.",
    )
    worker_lease: float = Field(
        default=core_worker.DEFAULT_LEASE, gt=0, description="Seconds; heartbeat every 1/3."
    )
    worker_poll_interval: float = Field(default=core_worker.DEFAULT_POLL_INTERVAL, gt=0)
    worker_shutdown_timeout: float = Field(default=core_worker.DEFAULT_SHUTDOWN_TIMEOUT, ge=0)

    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Workers serve Prometheus metrics at /metrics on this port (unset: none).",
    )
    metrics_host: str = Field(default="127.0.0.1", description="Address worker metrics bind.")

    rescue_interval: float = Field(default=core_maintenance.DEFAULT_RESCUE_INTERVAL, gt=0)
    clean_interval: float = Field(default=core_maintenance.DEFAULT_CLEAN_INTERVAL, gt=0)
    vacuum_interval: float = Field(
        default=core_maintenance.DEFAULT_VACUUM_INTERVAL,
        ge=0,
        description="Seconds between the vacuum duty's looks at the jobs table (0: autovacuum"
        " alone).",
    )
    vacuum_dead_rows: int = Field(
        default=core_maintenance.DEFAULT_VACUUM_DEAD_ROWS,
        ge=0,
        description="Dead rows of the jobs table past which the vacuum duty vacuums it.",
    )
    dead_retention: float = Field(
        default=core_maintenance.DEFAULT_DEAD_RETENTION, ge=0, description="Seconds."
    )
    message_retention: float = Field(
        default=core_maintenance.DEFAULT_MESSAGE_RETENTION, ge=0, description="Seconds."
    )
    history_retention: float = Field(
        default=core_history.DEFAULT_HISTORY_RETENTION,
        ge=0,
        description="Seconds the queues' history (throughput per minute, backlog samples,"
        " for the dashboard and `pgenough status`) is kept.",
    )

    dashboard_host: str = Field(
        default=dashboard_defaults.DEFAULT_HOST,
        description="Address `pgenough dashboard` binds.",
    )
    dashboard_port: int = Field(
        default=dashboard_defaults.DEFAULT_PORT,
        ge=0,
        le=65535,
        description="Port `pgenough dashboard` binds.",
    )
    ui_database_url: str | None = Field(
        default=None,
        description="PostgreSQL for the dashboard, as a role that may read pgenough.jobs (and"
        " update it, for actions) and the tables an application's pages show; unset ="
        " DATABASE_URL (direct_database_url behind a pooler).",
    )
    ui_actions: bool = Field(
        default=False,
        description="Let the dashboard retry and discard jobs (POST); off = read-only, 403.",
    )
    ui_token: SecretStr | None = Field(
        default=None,
        description="When set, every dashboard page and action needs it: Authorization:"
        " Bearer, or the login form at <dashboard>/login (an HttpOnly cookie).",
    )
    ui_tick: float = Field(
        default=dashboard_defaults.DEFAULT_UI_TICK,
        gt=0,
        description="Seconds between the live overview's periodic refreshes (besides the"
        " refresh on every change it is told of).",
    )
    ui_statement_timeout: float = Field(
        default=dashboard_defaults.DEFAULT_UI_STATEMENT_TIMEOUT,
        gt=0,
        description="Seconds a dashboard query may run (statement_timeout).",
    )
    ui_session_max_age: float = Field(
        default=dashboard_defaults.DEFAULT_UI_SESSION_MAX_AGE,
        gt=0,
        description="Seconds a login at the dashboard lasts, unless a logout ends it first"
        " (for every replica sharing the token).",
    )
    ui_login_max_backoff: float = Field(
        default=dashboard_defaults.DEFAULT_UI_LOGIN_MAX_BACKOFF,
        ge=1,
        description="Longest wait, in seconds, that wrong tokens from one client address earn"
        " it: after 3 in a row each doubles the wait from 1 s up to this; meanwhile 429.",
    )
    ui_allowed_hosts: str = Field(
        default="",
        description="Host names the dashboard answers to, comma-separated (ports ignored; * for"
        " any), besides loopback names and the address its server binds unless that is a"
        " wildcard such as 0.0.0.0; other Host headers get 421 (against DNS rebinding).",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        assert issubclass(settings_cls, Settings)
        return (init_settings, env_settings, _toml_source(settings_cls))

    def resolve_database_url(self) -> str:
        """``database_url``, or else the embedded server's under ``data_dir``, started now if
        need be: the one place the settings' database is chosen (``DatabaseError`` when there
        is none)."""
        url = database_url(self.database_url, self.data_dir)
        return with_network_timeout(url, self.network_timeout, server_side=not self.behind_pooler)

    @property
    def behind_pooler(self) -> bool:
        """Whether ``database_url`` is a transaction pooler: a direct URL is set beside it,
        and differs from it. Then no session state (prepared statements unless asked for,
        the ``options`` startup parameter, LISTEN, session locks) goes through it."""
        return (
            self.database_url is not None
            and self.direct_database_url is not None
            and self.direct_database_url != self.database_url
        )

    def prepare(self) -> bool:
        """Whether pools prepare repeated statements: the one rule (``prepared_statements``)."""
        if self.prepared_statements is not None:
            return self.prepared_statements
        return not self.behind_pooler

    def session_url(self) -> str | None:
        """Where session-bound work connects (LISTEN, session advisory locks, the dashboard):
        ``direct_database_url`` behind a pooler, else None, for the caller's resolved
        ``database_url``."""
        if not self.behind_pooler or self.direct_database_url is None:
            return None
        return with_network_timeout(
            self.direct_database_url, self.network_timeout, server_side=True
        )

    def maintenance_config(self) -> MaintenanceConfig:
        return MaintenanceConfig(
            rescue_interval=self.rescue_interval,
            clean_interval=self.clean_interval,
            dead_retention=self.dead_retention,
            message_retention=self.message_retention,
            history_retention=self.history_retention,
            vacuum_interval=self.vacuum_interval or None,
            vacuum_dead_rows=self.vacuum_dead_rows,
        )

    def worker_config(
        self,
        *,
        concurrency: int | None = None,
        batch_size: int | None = None,
        shutdown_timeout: float | None = None,
    ) -> WorkerConfig:
        """The worker's config from these settings; a value given here (a command's option)
        wins over its setting."""
        return WorkerConfig(
            concurrency=self.worker_concurrency if concurrency is None else concurrency,
            batch_size=self.worker_batch_size if batch_size is None else batch_size,
            lease=self.worker_lease,
            poll_interval=self.worker_poll_interval,
            shutdown_timeout=(
                self.worker_shutdown_timeout if shutdown_timeout is None else shutdown_timeout
            ),
            maintenance=self.maintenance_config(),
        )

    def ui_config(self, bind: str | None = None) -> DashboardConfig:
        """The dashboard's config (``pgenough[dashboard]``); ``bind``: the address its server
        binds, which it answers to (default: ``dashboard_host``). ``DashboardConfigError``
        when the settings are impossible."""
        from pgenough.dashboard.config import DashboardConfig  # FastAPI: slow to import
        from pgenough.dashboard.hosts import AllowedHosts

        token = self.ui_token
        return DashboardConfig(
            database_url=self.ui_database_url,
            actions=self.ui_actions,
            token=None if token is None else token.get_secret_value(),
            tick=self.ui_tick,
            statement_timeout=self.ui_statement_timeout,
            session_max_age=self.ui_session_max_age,
            login_max_backoff=self.ui_login_max_backoff,
            allowed_hosts=AllowedHosts.parse(
                self.ui_allowed_hosts, bind=self.dashboard_host if bind is None else bind
            ),
        )
