"""The API's defaults, defined once: ``api/config.py`` builds on them, and
``pgenough_plans.settings`` offers them as the settings' defaults (the dashboard's are
pgenough's own, ``pgenough.dashboard.defaults``).

Nothing here imports FastAPI or anything else of the ``service`` extra (``pgenough_plans.api``
imports its modules on first use), so the settings load in an installation without it.
"""

from __future__ import annotations

from typing import Final

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8000
DEFAULT_POOL_MAX_SIZE: Final = 10
DEFAULT_MAX_CONCURRENT_SEARCHES: Final = 8
DEFAULT_BULKHEAD_WAIT: Final = 0.1
"""Seconds a search may wait in line for one of the API's slots: long enough to ride out a
burst of a few milliseconds, short against a client's patience."""
DEFAULT_SEARCH_TIMEOUT: Final = 2.0
DEFAULT_STREAM_TIMEOUT: Final = 120.0
DEFAULT_STREAM_STALL_TIMEOUT: Final = 10.0
"""Seconds one page of a streamed search may wait for the client to take it: a reader at a
few hundred kbit/s never waits that long for a page, one that stopped reading is cut."""
DEFAULT_POOL_TIMEOUT: Final = 1.0
DEFAULT_READY_TIMEOUT: Final = 1.0
DEFAULT_READY_FULL_AFTER: Final = 10.0
"""Seconds every search slot may stay taken before /health/ready reports it."""
DEFAULT_CACHE_SIZE: Final = 256
DEFAULT_CACHE_TTL: Final = 5.0
DEFAULT_MAX_REPLICA_LAG: Final = 5.0
"""Seconds a read replica may be behind the primary before searches read the primary: as
stale as a cached page may be (``DEFAULT_CACHE_TTL``)."""
DEFAULT_PRESSURE_THRESHOLD: Final = 0.5
"""Share of the API's search slots in use above which it publishes pressure."""
DEFAULT_PRESSURE_INTERVAL: Final = 0.1
"""Seconds between the API's samples of its bulkhead (and at most one write each)."""
