"""What the settings and the command line know of the plan service before loading it: the
defaults they offer (the statuses a run can be in are ``plans.runs.RunStatus``, as light).

Nothing here imports the service's dependencies (httpx, lxml), so ``pgenough.settings`` and
``pgenough --help`` load in an installation without the ``service`` extra. The modules that
use these values import them from here.
"""

from __future__ import annotations

from typing import Final

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 30.0
DEFAULT_FETCH_ATTEMPTS: Final = 4
"""HTTP attempts of one fetch (a job's attempts are the core's ``DEFAULT_MAX_ATTEMPTS``)."""
DEFAULT_LOW_SPEED_LIMIT: Final = 1024.0
"""Bytes per second: an attempt slower than this over ``DEFAULT_LOW_SPEED_TIME`` fails."""
DEFAULT_LOW_SPEED_TIME: Final = 30.0
DEFAULT_MAX_REDIRECTS: Final = 10
DEFAULT_DEADLINE: Final = 900.0
"""Seconds a run may take from opening to sealing, retries and waits included."""

DEFAULT_PACING_MAX_PAUSE: Final = 0.25
"""Seconds a fetch or process worker pauses between chunks at full read pressure (0: never)."""
DEFAULT_PRESSURE_THRESHOLD: Final = 0.5
"""Share of the API's search slots in use above which it publishes pressure."""
DEFAULT_PRESSURE_INTERVAL: Final = 0.1
"""Seconds between the API's samples of its bulkhead (and at most one write each)."""
DEFAULT_BULKHEAD_WAIT: Final = 0.1
"""Seconds a search may wait in line for one of the API's slots: long enough to ride out a
burst of a few milliseconds, short against a client's patience."""
DEFAULT_STREAM_STALL_TIMEOUT: Final = 10.0
"""Seconds one page of a streamed search may wait for the client to take it: a reader at a
few hundred kbit/s never waits that long for a page, one that stopped reading is cut."""
DEFAULT_READY_FULL_AFTER: Final = 10.0
"""Seconds every search slot may stay taken before /health/ready reports it."""
