"""The plan service's settings: pgenough's (the database, logging, the worker, maintenance,
metrics, the dashboard) and its own: providers, fetching, ingestion, the /search API, and
whether the API serves the dashboard.

Read from the environment (``DATABASE_URL``, ``PGENOUGH_*``, as pgenough's) and from its own
TOML file, ``PGENOUGH_PLANS_CONFIG`` or ``./pgenough-plans.toml`` (so that the library's
``pgenough.toml`` never carries a key the ``pgenough`` command would refuse). Only the
command line (``pgenough_plans.cli``) reads this; each component's config is built by one
method here. Its defaults come from ``ingest.defaults`` and ``api.defaults``, which load
without httpx, lxml or FastAPI.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar, Final

from pydantic import Field, SecretStr

from pgenough.core.db import with_network_timeout
from pgenough.settings import Settings
from pgenough_plans.api import defaults as api_defaults
from pgenough_plans.ingest.defaults import (
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
    from pgenough.dashboard import DashboardConfig
    from pgenough_plans.api.config import ApiConfig
    from pgenough_plans.api.proxies import TrustedProxies
    from pgenough_plans.ingest.fetch import FetchConfig
    from pgenough_plans.ingest.pacing import PacingConfig
    from pgenough_plans.ingest.provider import ProviderConfig

DEFAULT_CONFIG_FILE: Final = "pgenough-plans.toml"


class PlanSettings(Settings):
    """pgenough's settings and the plan service's own."""

    CONFIG_ENV: ClassVar[str] = "PGENOUGH_PLANS_CONFIG"
    CONFIG_FILE: ClassVar[str] = DEFAULT_CONFIG_FILE

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
        " primary. Unset: everything reads the primary (docs/plan-service/operations.md, reads"
        " from a replica).",
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
        " replica; unset: a secret generated once in the database (plans.api_secrets).",
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
        " api_pressure_threshold, or refused) in plans.read_pressure, for ingestion to"
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
        default=True,
        description="Serve pgenough's dashboard, with the plan service's pages, at /ui with"
        " the API (its other settings: pgenough's ui_*).",
    )

    def api_config(self) -> ApiConfig:
        """The API's config; ``ApiConfigError`` when the settings are impossible. Its
        ``database_url`` is the setting as given: the caller puts the resolved one in
        (``resolve_database_url``) once it has checked the rest."""
        from pgenough_plans.api import cursor  # FastAPI: slow to import
        from pgenough_plans.api.config import ApiConfig

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
        from pgenough_plans.api.errors import ApiConfigError
        from pgenough_plans.api.replica import ReadUrlError, parse_read_urls

        try:
            urls = parse_read_urls(self.api_read_url)
        except ReadUrlError as exc:
            raise ApiConfigError(f"PGENOUGH_API_READ_URL: {exc}") from None
        return tuple(
            with_network_timeout(url, self.network_timeout, server_side=True) for url in urls
        )

    def ui_config(self, bind: str | None = None) -> DashboardConfig:
        """pgenough's dashboard config, answering to ``api_host`` (where the API serves it)
        and naming the plan service's migrate command."""
        config = super().ui_config(self.api_host if bind is None else bind)
        return replace(config, migrate_hint="pgenough-plans migrate")

    def trusted_proxies(self) -> TrustedProxies:
        """The proxies whose forwarding headers the API server believes (``ApiConfigError``
        when one is not an address or network)."""
        from pgenough_plans.api.proxies import TrustedProxies

        return TrustedProxies.parse(self.api_trusted_proxies)

    def provider_configs(self, extra: list[str] | None = None) -> list[ProviderConfig]:
        """Providers from ``--provider NAME=URL`` options, else from ``providers``."""
        from pgenough_plans.ingest.provider import ProviderConfig  # httpx: slow to import

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
        from pgenough_plans.ingest.fetch import FetchConfig  # httpx, lxml: slow to import

        return FetchConfig(deadline=self.fetch_deadline, pacing=self.pacing_config())

    def pacing_config(self) -> PacingConfig:
        from pgenough_plans.ingest.pacing import PacingConfig

        return PacingConfig(max_pause=self.ingest_pacing_max_pause)
