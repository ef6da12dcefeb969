"""MINIMAL stand-in (djtasks helper) for the djapp helper's conftest: the interpreters the
Django project runs on, and a fresh migrated database with the environment for it."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from pgenough.contrib.django.schema import MIGRATIONS
from pgenough.core import migrate
from pgenough.core.db import create_database, drop_database, with_database
from tests.helpers.pyenvs import django6_python

PROJECT = Path(__file__).parent / "project"


@pytest.fixture(params=["django5", "django6"])
def django_python(request: pytest.FixtureRequest) -> Path:
    """The interpreter of one Django: 5.2 with the backport (this one), or 6.x (3.12)."""
    return Path(sys.executable) if request.param == "django5" else django6_python()


@pytest.fixture
async def django_env(server_url: str) -> AsyncIterator[dict[str, str]]:
    """The environment of the project's subprocesses: DATABASE_URL names a fresh database,
    migrated (the core's and the Django tracks), dropped afterwards."""
    name = f"pgenough_django_{uuid.uuid4().hex[:12]}"
    create_database(server_url, name)
    url = with_database(server_url, name)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn, MIGRATIONS)
        yield {
            "PATH": "/usr/bin:/bin",
            "DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "proj.settings",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    finally:
        drop_database(server_url, name)
