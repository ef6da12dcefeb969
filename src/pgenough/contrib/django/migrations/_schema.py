"""What this app's migrations run: pgenough's own schema migrations (``pgenough.core.migrate``),
the core's then each of ``schema.MIGRATIONS``, on the migration's connection and in its
transaction, for the ``PGENOUGH["DATABASE"]`` alias only. Each Django migration that brings a
new SQL migration of pgenough runs it again: it applies only what is missing."""

from __future__ import annotations

from typing import Any


def apply_schema(apps: Any, schema_editor: Any) -> None:
    from pgenough.contrib.django import conf, schema
    from pgenough.core import migrate
    from pgenough.core.orm import django_connection

    connection = schema_editor.connection
    if connection.alias != conf.get_settings().database:
        return
    migrate(django_connection(connection.alias), schema.MIGRATIONS)
