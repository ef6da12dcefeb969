"""The HTTP API (``pgenough api``): ``/search`` from PostgreSQL only, a bulkhead that fails
fast, a first-page cache invalidated by ``plans_changed``, health and metrics.

The names below are imported on first use, not with the package: FastAPI is slow to import
and comes with the ``service`` extra, while ``pgenough.api.defaults`` must load without it
(``pgenough.settings`` takes its defaults from there).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pgenough.api.app import MIGRATIONS, create_app, prepare_database
    from pgenough.api.errors import ApiConfigError
    from pgenough.api.role import grant_api_role

__all__ = ["MIGRATIONS", "ApiConfigError", "create_app", "grant_api_role", "prepare_database"]

_MODULE_OF: Final = {
    "MIGRATIONS": "pgenough.api.app",
    "create_app": "pgenough.api.app",
    "prepare_database": "pgenough.api.app",
    "ApiConfigError": "pgenough.api.errors",
    "grant_api_role": "pgenough.api.role",
}


def __getattr__(name: str) -> Any:
    # A missing FastAPI surfaces here as the ModuleNotFoundError the CLI turns into "install
    # pgenough[service]".
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
