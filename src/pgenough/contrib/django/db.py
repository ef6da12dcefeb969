"""The queue's connection under Django: a ``DATABASES`` alias, never ``DATABASE_URL`` and
never an embedded server (the worker must see the jobs the project's views enqueue).

``conninfo(alias)`` is the libpq connection string of the alias, built from the same
parameters Django connects with (``HOST``, ``PORT``, ``NAME``, ``USER``, ``PASSWORD``, and the
libpq keys of ``OPTIONS``: ``service``, ``sslmode``, ``options``...). Producer-side calls use
Django's own connection instead (``pgenough.core.orm.django_connection``), to join its
transaction.
"""

from __future__ import annotations

from typing import Any

from psycopg import pq
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgenough.core import open_pool

_LIBPQ_KEYS = frozenset(d.keyword.decode() for d in pq.Conninfo.get_defaults())
"""The keys libpq accepts: Django's parameters also carry psycopg's (``cursor_factory``,
``context``, ``prepare_threshold``), which are no part of a connection string."""


def conninfo(alias: str = "default") -> str:
    """The libpq connection string of Django's database ``alias``; ``ImproperlyConfigured``
    for an alias that does not exist or is not PostgreSQL."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connections
    from django.utils.connection import ConnectionDoesNotExist

    try:
        wrapper = connections[alias]
    except ConnectionDoesNotExist:
        raise ImproperlyConfigured(
            f"pgenough: DATABASES has no alias {alias!r} (set PGENOUGH['DATABASE'])"
        ) from None
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"pgenough needs PostgreSQL; DATABASES[{alias!r}] is {wrapper.vendor}"
            " (point PGENOUGH['DATABASE'] at a PostgreSQL alias)"
        )
    params: dict[str, Any] = wrapper.get_connection_params()
    return make_conninfo(
        "", **{k: v for k, v in params.items() if k in _LIBPQ_KEYS and v not in (None, "")}
    )


async def open_worker_pool(alias: str, name: str, max_size: int) -> AsyncConnectionPool:
    """The worker's autocommit pool on ``alias`` (``pgenough.core.open_pool``: it fails fast
    with a ``DatabaseError`` when the server does not answer)."""
    return await open_pool(conninfo(alias), max_size=max_size, name=name)
