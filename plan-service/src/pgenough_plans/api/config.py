"""The API's configuration: a frozen slice of the settings, checked when the app is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from pgenough_plans.api.defaults import (
    DEFAULT_BULKHEAD_WAIT,
    DEFAULT_CACHE_SIZE,
    DEFAULT_CACHE_TTL,
    DEFAULT_MAX_CONCURRENT_SEARCHES,
    DEFAULT_MAX_REPLICA_LAG,
    DEFAULT_POOL_MAX_SIZE,
    DEFAULT_POOL_TIMEOUT,
    DEFAULT_PRESSURE_INTERVAL,
    DEFAULT_PRESSURE_THRESHOLD,
    DEFAULT_READY_FULL_AFTER,
    DEFAULT_READY_TIMEOUT,
    DEFAULT_SEARCH_TIMEOUT,
    DEFAULT_STREAM_STALL_TIMEOUT,
    DEFAULT_STREAM_TIMEOUT,
)
from pgenough_plans.api.errors import ApiConfigError
from pgenough_plans.api.replica import READ_MARGIN, ReadUrlError, labels_of

# Connections the bulkhead leaves free for /health/ready and the pool's own checks.
SPARE_CONNECTIONS: Final = 2


@dataclass(frozen=True)
class ApiConfig:
    database_url: str | None = None
    """The server to serve from, resolved by the caller (``Settings.resolve_database_url``);
    None only while the settings are being checked: the app refuses to start without one."""
    read_urls: tuple[str, ...] = ()
    """Streaming replicas of ``database_url`` that ``/search`` and the dashboard's pages read
    (``api/replica.py``); empty: they read ``database_url``."""
    session_url: str | None = None
    """A direct connection to the server when ``database_url`` is a transaction pooler
    (PgBouncer): the cache's LISTEN and the dashboard go there, and /search's statement
    timeout is set per transaction (``SET LOCAL``) rather than per session. None: no pooler."""
    prepared_statements: bool = True
    """Whether the API's pool prepares repeated statements (off behind PgBouncer < 1.21)."""
    max_replica_lag: float = DEFAULT_MAX_REPLICA_LAG
    """Seconds a replica may be behind before reads pass it over (for another, or
    ``database_url``)."""
    cursor_key: bytes | None = field(default=None, repr=False)
    """Signs ``/search`` cursors (from ``api_cursor_secret``); None: the database's secret."""
    pool_max_size: int = DEFAULT_POOL_MAX_SIZE
    max_concurrent_searches: int = DEFAULT_MAX_CONCURRENT_SEARCHES
    bulkhead_wait: float = DEFAULT_BULKHEAD_WAIT
    max_concurrent_streams: int | None = None
    """Of the search slots, how many may stream past a first page; None: half of them."""
    search_timeout: float = DEFAULT_SEARCH_TIMEOUT
    stream_timeout: float = DEFAULT_STREAM_TIMEOUT
    stream_stall_timeout: float = DEFAULT_STREAM_STALL_TIMEOUT
    pool_timeout: float = DEFAULT_POOL_TIMEOUT
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    ready_full_after: float = DEFAULT_READY_FULL_AFTER
    """0: readiness never looks at the bulkhead."""
    cache_size: int = DEFAULT_CACHE_SIZE
    cache_ttl: float = DEFAULT_CACHE_TTL
    publish_pressure: bool = True
    pressure_threshold: float = DEFAULT_PRESSURE_THRESHOLD
    pressure_interval: float = DEFAULT_PRESSURE_INTERVAL
    search_delay: float = 0.0
    """Tests and demos only: seconds each search sleeps in PostgreSQL first."""

    def __post_init__(self) -> None:
        if self.max_concurrent_searches < 1:
            raise ApiConfigError("api_max_concurrent_searches must be at least 1")
        if self.max_concurrent_searches > self.pool_max_size - SPARE_CONNECTIONS:
            raise ApiConfigError(
                f"api_max_concurrent_searches ({self.max_concurrent_searches}) must be at most "
                f"pool_max_size - {SPARE_CONNECTIONS} ({self.pool_max_size - SPARE_CONNECTIONS}):"
                " the API keeps connections free for /health/ready; raise"
                " PGENOUGH_POOL_MAX_SIZE or lower PGENOUGH_API_MAX_CONCURRENT_SEARCHES"
            )
        streams = self.max_concurrent_streams
        if streams is not None and not 1 <= streams <= self.max_concurrent_searches:
            raise ApiConfigError(
                f"api_max_concurrent_streams ({streams}) must be between 1 and"
                f" api_max_concurrent_searches ({self.max_concurrent_searches})"
            )
        if self.ready_full_after < 0:
            raise ApiConfigError("api_ready_full_after must be >= 0")
        for name in (
            "search_timeout",
            "stream_timeout",
            "stream_stall_timeout",
            "pool_timeout",
            "ready_timeout",
            "max_replica_lag",
        ):
            if not getattr(self, name) > 0:
                raise ApiConfigError(f"api_{name} must be greater than 0")
        if self.cache_size < 0 or self.cache_ttl < 0 or self.search_delay < 0:
            raise ApiConfigError("api_cache_size, api_cache_ttl and api_search_delay must be >= 0")
        if self.bulkhead_wait < 0:
            raise ApiConfigError("api_bulkhead_wait must be >= 0")
        try:
            labels_of(self.read_urls)
        except ReadUrlError as exc:
            raise ApiConfigError(f"api_read_url: {exc}") from None

    def server_url(self) -> str:
        """``database_url``; ``ApiConfigError`` while it is unset."""
        if self.database_url is None:
            raise ApiConfigError(
                "the API needs a database URL: resolve it first (Settings.resolve_database_url)"
            )
        return self.database_url

    @property
    def read_deadline(self) -> float:
        """Seconds a statement of a search on a replica may take, measured by the API: the
        statement timeout, and a margin for the server's own timeout to fire first."""
        return self.search_timeout + READ_MARGIN

    @property
    def behind_pooler(self) -> bool:
        return self.session_url is not None

    def direct_url(self) -> str:
        """Where session-bound work connects: ``session_url``, else ``database_url``."""
        return self.session_url or self.server_url()

    @property
    def cache_enabled(self) -> bool:
        return self.cache_size > 0 and self.cache_ttl > 0
