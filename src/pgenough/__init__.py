"""pgenough: PostgreSQL is enough."""

__version__ = "0.1.0"
