"""The queue's dashboard: server-rendered pages (Jinja2) of every queue's jobs, a job's
attempts with their tracebacks, the failures with bulk retry and discard, the workers and
what each runs, the periodic tasks, and a live overview over server-sent events fed by LISTEN,
with every queue's throughput and backlog over time; behind a token login, CSRF checks, a
read-only mode and a Host allow-list. ``pip install 'pgenough[dashboard]'``;
docs/dashboard.md is its manual.

Served by ``pgenough dashboard``, or mounted in an application (``Dashboard``'s docstring);
an application adds its own pages through ``Extension`` and reads where it likes through a
``Reader``. It needs only the core's schema and its own track (``MIGRATIONS``).

The names below are imported on first use, not with the package: ``pgenough.settings``
loads the dashboard's defaults (and ``pgenough migrate`` its migrations) in an installation
without the extra.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pgenough.dashboard.app import Dashboard
    from pgenough.dashboard.config import DashboardConfig
    from pgenough.dashboard.errors import DashboardConfigError, DashboardError, not_found
    from pgenough.dashboard.extension import Extension, Link, Section, extension_router
    from pgenough.dashboard.params import bad as bad_request
    from pgenough.dashboard.params import checked_id as path_id
    from pgenough.dashboard.params import optional_id as id_param
    from pgenough.dashboard.params import text as text_param
    from pgenough.dashboard.reader import Read, Reader, ReaderFactory, Written
    from pgenough.dashboard.schema import MIGRATIONS
    from pgenough.dashboard.server import DashboardServer, uvicorn_config
    from pgenough.dashboard.views import View, ViewDep

__all__ = [  # noqa: RUF022 (plainly sorted: tests/test_public_api.py)
    "Dashboard",
    "DashboardConfig",
    "DashboardConfigError",
    "DashboardError",
    "DashboardServer",
    "Extension",
    "Link",
    "MIGRATIONS",
    "Read",
    "Reader",
    "ReaderFactory",
    "Section",
    "View",
    "ViewDep",
    "Written",
    "bad_request",
    "extension_router",
    "id_param",
    "not_found",
    "path_id",
    "text_param",
    "uvicorn_config",
]

_WHERE: Final = {
    "Dashboard": ("app", "Dashboard"),
    "DashboardConfig": ("config", "DashboardConfig"),
    "DashboardConfigError": ("errors", "DashboardConfigError"),
    "DashboardError": ("errors", "DashboardError"),
    "DashboardServer": ("server", "DashboardServer"),
    "Extension": ("extension", "Extension"),
    "Link": ("extension", "Link"),
    "MIGRATIONS": ("schema", "MIGRATIONS"),
    "Read": ("reader", "Read"),
    "Reader": ("reader", "Reader"),
    "ReaderFactory": ("reader", "ReaderFactory"),
    "Section": ("extension", "Section"),
    "View": ("views", "View"),
    "ViewDep": ("views", "ViewDep"),
    "Written": ("reader", "Written"),
    "bad_request": ("params", "bad"),
    "extension_router": ("extension", "extension_router"),
    "id_param": ("params", "optional_id"),
    "not_found": ("errors", "not_found"),
    "path_id": ("params", "checked_id"),
    "text_param": ("params", "text"),
    "uvicorn_config": ("server", "uvicorn_config"),
}


def __getattr__(name: str) -> Any:
    # Imported on first use: FastAPI and Jinja2 are the extra's, and slow to import.
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = where
    return getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
