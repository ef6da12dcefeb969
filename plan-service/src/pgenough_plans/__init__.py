"""The plan service: a provider's Fever planList snapshots ingested into PostgreSQL under a
per-provider lock, applied to canonical plans by workers of pgenough's queue, and served at
``/search`` from PostgreSQL only. Built on pgenough's public API (the import-linter contract
in the repository's pyproject.toml keeps it so); ``plan-service/README.md`` is its manual."""

# The one place the version is written: plan-service/pyproject.toml reads it from here.
__version__ = "0.1.0"
