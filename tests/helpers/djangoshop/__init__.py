"""A minimal Django app (one model) for the adapter tests in tests/core/test_orm.py."""
