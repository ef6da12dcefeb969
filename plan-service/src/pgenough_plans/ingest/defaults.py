"""What the settings and the command line know of the plan service before loading it: the
defaults they offer (the statuses a run can be in are ``plans.runs.RunStatus``, as light;
the API's defaults are in ``api/defaults.py``).

Nothing here imports httpx or lxml, so ``pgenough_plans.settings`` and ``pgenough-plans
--help`` load quickly. The modules that use these values import them from here.
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

VACUUM_INTERVAL: Final = 10.0
"""Seconds between two looks of the plans vacuum duty at the plans table's dead rows."""
DEFAULT_VACUUM_DEAD_SHARE: Final = 0.01
"""Dead row versions, as a share of the live rows, past which the duty vacuums the plans."""
VACUUM_MIN_DEAD_ROWS: Final = 1_000
"""Never fewer dead row versions than this (a small table is autovacuum's)."""
