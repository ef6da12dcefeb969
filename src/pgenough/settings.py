"""All configuration, in one place: environment variables and an optional TOML file.

Precedence: command-line options > environment (``DATABASE_URL``, ``PGENOUGH_*``) > the TOML
file named by ``PGENOUGH_CONFIG`` (default ``./pgenough.toml`` when it exists) > defaults.
A file that is named but missing, or that cannot be read or parsed, is a ``ConfigFileError``,
never a file silently ignored.
Only the command line (``pgenough.cli``) reads this. Each default is the constant of the module
that owns it, imported; each component's config is built by one method here
(``worker_config``, ``fetch_config``, ``api_config``, ``ui_config``...), and the database URL
is resolved by one (``resolve_database_url``). It loads without the ``service`` extra: the plan
service's and the API's defaults come from ``plans.defaults`` and ``api.defaults``, and their
config classes are imported only by the methods that build them.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from pgenough.api import defaults as api_defaults
from pgenough.core import MaintenanceConfig, PgenoughError, WorkerConfig
from pgenough.core import maintenance as core_maintenance
from pgenough.core import worker as core_worker
from pgenough.core.db import (
    DEFAULT_NETWORK_TIMEOUT,
    database_url,
    default_data_dir,
    with_network_timeout,
)
from pgenough.core.worker_options import MAX_BATCH_SIZE as MAX_BATCH_SIZE
from pgenough.core.worker_options import MAX_CONCURRENCY as MAX_CONCURRENCY
from pgenough.eventloop import DEFAULT_EVENT_LOOP, EventLoopChoice
from pgenough.plans.defaults import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_DEADLINE,
    DEFAULT_FETCH_ATTEMPTS,
    DEFAULT_LOW_SPEED_LIMIT,
    DEFAULT_LOW_SPEED_TIME,
    DEFAULT_MAX_REDIRECTS,
    DEFAULT_PACING_MAX_PAUSE,
    DEFAULT_READ_TIMEOUT,
)

if TYPE_CHECKING:
    from pgenough.api.config import ApiConfig
    from pgenough.api.proxies import TrustedProxies
    from pgenough.api.ui.config import UiConfig
    from pgenough.plans.fetch import FetchConfig
    from pgenough.plans.pacing import PacingConfig
    from pgenough.plans.provider import ProviderConfig

DEFAULT_CONFIG_FILE: Final = "pgenough.toml"


class ConfigFileError(PgenoughError):
    """The configuration file is missing, not a file, unreadable, or not valid TOML."""


def _config_file() -> Path | None:
    """The TOML file to read: the one ``PGENOUGH_CONFIG`` names, which must exist, else
    ``./pgenough.toml`` when it exists, else None."""
    named = os.environ.get("PGENOUGH_CONFIG")
    if named == "":
        raise ConfigFileError("PGENOUGH_CONFIG is empty: name a TOML file, or unset it")
    # Expanded as pydantic-settings expands it, so that both mean the same file.
    path = Path(named or DEFAULT_CONFIG_FILE).expanduser()
    try:
        if not path.exists():
            if named is None:
                return None
            raise ConfigFileError(
                f"PGENOUGH_CONFIG names {named}, which does not exist:"
                " create it, or unset PGENOUGH_CONFIG"
            )
        if not path.is_file():
            hint = "remove it, or set" if named is None else "set"
            raise ConfigFileError(
                f"config file {path} is not a file: {hint} PGENOUGH_CONFIG to a TOML file"
            )
    except OSError as exc:  # exists() lets a permission error through
        raise _unreadable(path, exc) from exc
    return path


def _unreadable(path: Path, exc: OSError) -> ConfigFileError:
    return ConfigFileError(f"cannot read config file {path}: {exc.strerror or exc}")


def _toml_source(settings_cls: type[BaseSettings]) -> PydanticBaseSettingsSource:
    path = _config_file()
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
    # An infinite number of seconds passes the bounds below (inf > 0) but means nothing.
    model_config = SettingsConfigDict(env_prefix="PGENOUGH_", extra="forbid", allow_inf_nan=False)

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
        default=api_defaults.DEFAULT_POOL_MAX_SIZE,
        ge=1,
        description="Connections of the API's pool; process workers use max(this,"
        " concurrency + 4).",
    )

    direct_database_url: str | None = Field(
        default=None,
        description="A direct (session) connection to the server when DATABASE_URL is a"
        " transaction pooler (PgBouncer pool_mode = transaction); setting it says DATABASE_URL"
        " is one. LISTEN (workers, the API's cache, the dashboard), the fetch worker's provider"
        " locks and the dashboard go here; claims, enqueues, completions and /search through"
        " DATABASE_URL. Unset: everything on DATABASE_URL (docs/operations.md, behind PgBouncer).",
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
        description="Jobs (the process worker: chunks) run at once per queue, 1..10000.",
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

    providers: str = Field(
        default="",
        description="Providers to fetch, comma-separated NAME=URL pairs.",
    )
    fetch_interval: float = Field(
        default=60.0,
        gt=0,
        description="Seconds between fetches of each provider: at most one fetch per interval"
        " across every fetch replica.",
    )
    provider_connect_timeout: float = Field(default=DEFAULT_CONNECT_TIMEOUT, gt=0)
    provider_read_timeout: float = Field(default=DEFAULT_READ_TIMEOUT, gt=0)
    provider_max_attempts: int = Field(default=DEFAULT_FETCH_ATTEMPTS, ge=1)
    provider_low_speed_limit: float = Field(
        default=DEFAULT_LOW_SPEED_LIMIT,
        ge=0,
        description="Bytes per second a snapshot body must average over"
        " provider_low_speed_time; slower, the attempt fails and is retried (0: no floor).",
    )
    provider_low_speed_time: float = Field(
        default=DEFAULT_LOW_SPEED_TIME,
        gt=0,
        description="Seconds over which the low-speed floor is measured.",
    )
    provider_max_redirects: int = Field(
        default=DEFAULT_MAX_REDIRECTS,
        ge=0,
        description="Redirects followed per attempt; more is a redirect loop (the run fails).",
    )
    provider_redirect_other_hosts: bool = Field(
        default=False,
        description="Follow a provider's redirect to another host or port (an http to https"
        " upgrade of the same host is always followed); off, such a redirect fails the run.",
    )
    fetch_deadline: float = Field(
        default=DEFAULT_DEADLINE,
        gt=0,
        description="Seconds a fetch may take, retries and waits included; past it the run fails.",
    )
    ingest_pacing_max_pause: float = Field(
        default=DEFAULT_PACING_MAX_PAUSE,
        ge=0,
        le=5,
        description="Seconds fetch and process workers pause between chunks while the API"
        " reports full read pressure (proportionally less for less); 0: never pause.",
    )
    ingest_nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description="Niceness the fetch and process workers add to themselves at start, so"
        " that on a shared machine the API's process gets the CPU first (0: unchanged).",
    )

    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Workers serve Prometheus metrics at /metrics on this port (unset: none;"
        " the API serves its own at /metrics).",
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

    api_host: str = Field(
        default=api_defaults.DEFAULT_HOST, description="Address `pgenough api` binds."
    )
    api_port: int = Field(
        default=api_defaults.DEFAULT_PORT, ge=0, le=65535, description="Port `pgenough api` binds."
    )
    api_trusted_proxies: str = Field(
        default="",
        description="Reverse proxies whose X-Forwarded-For and X-Forwarded-Proto the API"
        " believes: IP addresses and CIDR networks, comma-separated. Empty: nobody's; the"
        " client address (login throttle, access log) is the socket's peer.",
    )
    api_read_url: str | list[str] | None = Field(
        default=None,
        description="Streaming replicas (hot standbys) of the database that /search and the"
        " dashboard's pages read: one URL or conninfo string, or a JSON list of them (a TOML"
        " list in the file); writes, LISTEN, readiness and the dashboard's actions stay on the"
        " primary. Unset: everything reads the primary (docs/operations.md, reads from a"
        " replica).",
    )
    api_max_replica_lag: float = Field(
        default=api_defaults.DEFAULT_MAX_REPLICA_LAG,
        gt=0,
        description="Seconds each api_read_url replica may be behind the primary (measured"
        " against the primary's WAL position, so an idle primary is no lag); past it, or while"
        " it does not answer, reads go to another replica within it, else the primary.",
    )
    api_cursor_secret: SecretStr | None = Field(
        default=None,
        description="Signs /search's after= cursors (at least 32 characters), the same on every"
        " replica; unset: a secret generated once in the database (pgenough.api_secrets).",
    )
    api_max_concurrent_searches: int = Field(
        default=api_defaults.DEFAULT_MAX_CONCURRENT_SEARCHES,
        ge=1,
        description="Searches running at once (the bulkhead); as many more may wait"
        " api_bulkhead_wait for a slot, the rest get 503 TOO_BUSY. At most pool_max_size - 2.",
    )
    api_bulkhead_wait: float = Field(
        default=api_defaults.DEFAULT_BULKHEAD_WAIT,
        ge=0,
        description="Seconds a search may wait in line for a bulkhead slot before 503 TOO_BUSY"
        " (0: refused at once when every slot is taken).",
    )
    api_max_concurrent_streams: int | None = Field(
        default=None,
        ge=1,
        description="Of the api_max_concurrent_searches slots, how many may be held by answers"
        " streamed past their first page (a /search without limit); beyond it such a search"
        " gets 503 TOO_BUSY at once. Unset: half the slots, so first pages always have the"
        " rest.",
    )
    api_search_timeout: float = Field(
        default=api_defaults.DEFAULT_SEARCH_TIMEOUT,
        gt=0,
        description="Seconds a search may run in PostgreSQL (statement_timeout); "
        "beyond it the request gets 503 TOO_BUSY.",
    )
    api_stream_timeout: float = Field(
        default=api_defaults.DEFAULT_STREAM_TIMEOUT,
        gt=0,
        description="Seconds a /search without limit may take to send every event (each "
        "page of it still within api_search_timeout); beyond it the response is cut.",
    )
    api_stream_stall_timeout: float = Field(
        default=api_defaults.DEFAULT_STREAM_STALL_TIMEOUT,
        gt=0,
        description="Seconds a streamed /search may wait for the client to take one page;"
        " beyond it the connection is reset and the slot, connection and snapshot freed.",
    )
    api_pool_timeout: float = Field(
        default=api_defaults.DEFAULT_POOL_TIMEOUT,
        gt=0,
        description="Seconds a request waits for a database connection.",
    )
    api_ready_timeout: float = Field(
        default=api_defaults.DEFAULT_READY_TIMEOUT,
        gt=0,
        description="Seconds /health/ready gives its SELECT 1.",
    )
    api_ready_full_after: float = Field(
        default=api_defaults.DEFAULT_READY_FULL_AFTER,
        ge=0,
        description="Seconds every search slot may stay taken before /health/ready answers"
        " 503 (0: readiness ignores the bulkhead).",
    )
    api_cache_size: int = Field(
        default=api_defaults.DEFAULT_CACHE_SIZE,
        ge=0,
        description="First-page responses cached, at most (0: no cache).",
    )
    api_cache_ttl: float = Field(
        default=api_defaults.DEFAULT_CACHE_TTL,
        ge=0,
        description="Seconds a cached response lives (0: no cache).",
    )
    api_migrate: bool = Field(
        default=True,
        description="Migrate on start-up; false when the API's role may only read.",
    )
    api_search_delay: float = Field(
        default=0.0,
        ge=0,
        description="For tests and demos only: each search first sleeps this long in "
        "PostgreSQL (pg_sleep), as a slow query would.",
    )
    api_publish_pressure: bool = Field(
        default=True,
        description="Publish the API's read pressure (searches in flight above"
        " api_pressure_threshold, or refused) in pgenough.read_pressure, for ingestion to"
        " yield to /search.",
    )
    api_pressure_threshold: float = Field(
        default=api_defaults.DEFAULT_PRESSURE_THRESHOLD,
        ge=0,
        le=1,
        description="Share of api_max_concurrent_searches in flight at once above which the"
        " API reports pressure (growing to 1 when every slot is taken or one is refused).",
    )
    api_pressure_interval: float = Field(
        default=api_defaults.DEFAULT_PRESSURE_INTERVAL,
        gt=0,
        le=10,
        description="Seconds between the API's pressure samples (at most one write each);"
        " a report expires after 10 of them.",
    )

    ui_enabled: bool = Field(
        default=True, description="Serve the read-only dashboard at /ui with the API."
    )
    ui_database_url: str | None = Field(
        default=None,
        description="PostgreSQL for the dashboard, as a role that may read pgenough.runs,"
        " pgenough.jobs and pgenough.plan_failures (and update jobs, for actions); unset ="
        " the API's database URL.",
    )
    ui_actions: bool = Field(
        default=False,
        description="Let the dashboard retry and discard jobs (POST); off = read-only, 403.",
    )
    ui_token: SecretStr | None = Field(
        default=None,
        description="When set, every /ui page and action needs it: Authorization: Bearer,"
        " or the login form at /ui/login (an HttpOnly cookie).",
    )
    ui_tick: float = Field(
        default=api_defaults.DEFAULT_UI_TICK,
        gt=0,
        description="Seconds between the live overview's periodic refreshes (besides the"
        " refresh on every run change).",
    )
    ui_statement_timeout: float = Field(
        default=api_defaults.DEFAULT_UI_STATEMENT_TIMEOUT,
        gt=0,
        description="Seconds a dashboard query may run (statement_timeout).",
    )
    ui_session_max_age: float = Field(
        default=api_defaults.DEFAULT_UI_SESSION_MAX_AGE,
        gt=0,
        description="Seconds a login at /ui/login lasts, unless a logout ends it first"
        " (for every replica sharing the token).",
    )
    ui_login_max_backoff: float = Field(
        default=api_defaults.DEFAULT_UI_LOGIN_MAX_BACKOFF,
        ge=1,
        description="Longest wait, in seconds, that wrong tokens from one client address earn"
        " it: after 3 in a row each doubles the wait from 1 s up to this; meanwhile 429.",
    )
    ui_allowed_hosts: str = Field(
        default="",
        description="Host names the dashboard answers to, comma-separated (ports ignored; * for"
        " any), besides loopback names and api_host unless that is a wildcard such as 0.0.0.0;"
        " other Host headers get 421 (against DNS rebinding).",
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

    def api_config(self) -> ApiConfig:
        """The API's config; ``ApiConfigError`` when the settings are impossible. Its
        ``database_url`` is the setting as given: the caller puts the resolved one in
        (``resolve_database_url``) once it has checked the rest."""
        from pgenough.api import cursor  # FastAPI: the service extra
        from pgenough.api.config import ApiConfig

        secret = self.api_cursor_secret
        return ApiConfig(
            database_url=self.database_url,
            read_urls=self.read_urls(),
            session_url=self.session_url(),
            prepared_statements=self.prepare(),
            max_replica_lag=self.api_max_replica_lag,
            cursor_key=None if secret is None else cursor.key_of_setting(secret.get_secret_value()),
            pool_max_size=self.pool_max_size,
            max_concurrent_searches=self.api_max_concurrent_searches,
            bulkhead_wait=self.api_bulkhead_wait,
            max_concurrent_streams=self.api_max_concurrent_streams,
            search_timeout=self.api_search_timeout,
            stream_timeout=self.api_stream_timeout,
            stream_stall_timeout=self.api_stream_stall_timeout,
            pool_timeout=self.api_pool_timeout,
            ready_timeout=self.api_ready_timeout,
            ready_full_after=self.api_ready_full_after,
            cache_size=self.api_cache_size,
            cache_ttl=self.api_cache_ttl,
            search_delay=self.api_search_delay,
            publish_pressure=self.api_publish_pressure,
            pressure_threshold=self.api_pressure_threshold,
            pressure_interval=self.api_pressure_interval,
        )

    def read_urls(self) -> tuple[str, ...]:
        """The replicas ``api_read_url`` names; ``ApiConfigError`` when it is no URL nor list."""
        from pgenough.api.errors import ApiConfigError
        from pgenough.api.replica import ReadUrlError, parse_read_urls

        try:
            urls = parse_read_urls(self.api_read_url)
        except ReadUrlError as exc:
            raise ApiConfigError(f"PGENOUGH_API_READ_URL: {exc}") from None
        return tuple(
            with_network_timeout(url, self.network_timeout, server_side=True) for url in urls
        )

    def ui_config(self) -> UiConfig:
        """The dashboard's config; ``ApiConfigError`` when the settings are impossible."""
        from pgenough.api.ui.config import UiConfig  # FastAPI: the service extra
        from pgenough.api.ui.hosts import AllowedHosts

        token = self.ui_token
        return UiConfig(
            enabled=self.ui_enabled,
            database_url=self.ui_database_url,
            actions=self.ui_actions,
            token=None if token is None else token.get_secret_value(),
            tick=self.ui_tick,
            statement_timeout=self.ui_statement_timeout,
            session_max_age=self.ui_session_max_age,
            login_max_backoff=self.ui_login_max_backoff,
            allowed_hosts=AllowedHosts.parse(self.ui_allowed_hosts, bind=self.api_host),
        )

    def trusted_proxies(self) -> TrustedProxies:
        """The proxies whose forwarding headers the API server believes (``ApiConfigError``
        when one is not an address or network)."""
        from pgenough.api.proxies import TrustedProxies

        return TrustedProxies.parse(self.api_trusted_proxies)

    def provider_configs(self, extra: list[str] | None = None) -> list[ProviderConfig]:
        """Providers from ``--provider NAME=URL`` options, else from ``providers``."""
        from pgenough.plans.provider import ProviderConfig  # httpx: the service extra

        specs = extra or [p for p in self.providers.split(",") if p.strip()]
        configs = []
        for spec in specs:
            name, sep, url = spec.strip().partition("=")
            if not sep or not name or not url:
                raise ValueError(f"provider {spec!r}: expected NAME=URL")
            configs.append(
                ProviderConfig(
                    name=name.strip(),
                    url=url.strip(),
                    connect_timeout=self.provider_connect_timeout,
                    read_timeout=self.provider_read_timeout,
                    max_attempts=self.provider_max_attempts,
                    low_speed_limit=self.provider_low_speed_limit,
                    low_speed_time=self.provider_low_speed_time,
                    max_redirects=self.provider_max_redirects,
                    redirect_other_hosts=self.provider_redirect_other_hosts,
                )
            )
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            raise ValueError(f"provider names must be unique: {names}")
        return configs

    def fetch_config(self) -> FetchConfig:
        from pgenough.plans.fetch import FetchConfig  # httpx, lxml: the service extra

        return FetchConfig(deadline=self.fetch_deadline, pacing=self.pacing_config())

    def pacing_config(self) -> PacingConfig:
        from pgenough.plans.pacing import PacingConfig

        return PacingConfig(max_pause=self.ingest_pacing_max_pause)

    def maintenance_config(self) -> MaintenanceConfig:
        return MaintenanceConfig(
            rescue_interval=self.rescue_interval,
            clean_interval=self.clean_interval,
            dead_retention=self.dead_retention,
            message_retention=self.message_retention,
            vacuum_interval=self.vacuum_interval or None,
            vacuum_dead_rows=self.vacuum_dead_rows,
        )

    def worker_config(self, **overrides: object) -> WorkerConfig:
        values: dict[str, object] = {
            "concurrency": self.worker_concurrency,
            "batch_size": self.worker_batch_size,
            "lease": self.worker_lease,
            "poll_interval": self.worker_poll_interval,
            "shutdown_timeout": self.worker_shutdown_timeout,
            "maintenance": self.maintenance_config(),
        }
        values.update(overrides)
        return WorkerConfig(**values)  # type: ignore[arg-type]
