"""The HTTP API (``pgenough-plans api``): ``/search`` from PostgreSQL only, a bulkhead that fails
fast, a first-page cache invalidated by ``plans_changed``, health and metrics.

The names below are imported on first use, not with the package: FastAPI is slow to import,
and ``pgenough_plans.settings`` loads ``pgenough_plans.api.defaults`` without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pgenough_plans.api.app import MIGRATIONS, create_app, prepare_database
    from pgenough_plans.api.errors import ApiConfigError
    from pgenough_plans.api.role import grant_api_role

__all__ = ["MIGRATIONS", "ApiConfigError", "create_app", "grant_api_role", "prepare_database"]

_MODULE_OF: Final = {
    "MIGRATIONS": "pgenough_plans.api.app",
    "create_app": "pgenough_plans.api.app",
    "prepare_database": "pgenough_plans.api.app",
    "ApiConfigError": "pgenough_plans.api.errors",
    "grant_api_role": "pgenough_plans.api.role",
}


def __getattr__(name: str) -> Any:
    # Imported on first use: FastAPI is slow to import, and `pgenough-plans --help` or a
    # worker never needs it.
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
