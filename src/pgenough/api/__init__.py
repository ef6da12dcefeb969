"""The HTTP API (``pgenough api``): ``/search`` from PostgreSQL only, a bulkhead that fails
fast, a first-page cache invalidated by ``plans_changed``, health and metrics."""

from pgenough.api.app import MIGRATIONS, create_app, prepare_database
from pgenough.api.errors import ApiConfigError
from pgenough.api.role import grant_api_role

__all__ = ["MIGRATIONS", "ApiConfigError", "create_app", "grant_api_role", "prepare_database"]
