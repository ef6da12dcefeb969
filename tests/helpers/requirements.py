"""The one rule for tests that need something beyond Python and a PostgreSQL server (the
PostgreSQL 15 binaries, PgBouncer, root for network namespaces, Chromium, Python 3.12):
where it is missing they skip with the reason, unless an environment variable (set by
``.ci/run``) says they must run, and then they fail with it."""

from __future__ import annotations

import os

import pytest


def skip_unless(missing: str | None, *, require: str, what: str) -> None:
    """Return when ``missing`` is None; else skip saying why, or fail when ``require=1``.

    ``what`` names what could not be had ("a standby pair", "PgBouncer"...)."""
    if missing is None:
        return
    if os.environ.get(require) == "1":
        pytest.fail(f"{require}=1 but {what} cannot be had here: {missing}")
    pytest.skip(f"no {what}: {missing} (set {require}=1 to make this a failure)")
