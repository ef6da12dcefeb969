"""The Django integration's tests run the real project in ``project/`` in subprocesses (Django
settings are configured once per process), on Django 5.2 (this interpreter, 3.11, with the
``django-tasks`` backport) and on Django 6 (a cached Python 3.12 venv, ``pyenvs``)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgenough.contrib.django.schema import MIGRATIONS
from pgenough.core import migrate
from pgenough.core.db import create_database, drop_database, with_database
from tests.helpers import pyenvs
from tests.helpers.procs import Proc

PROJECT = Path(__file__).parent / "project"
MANAGE = PROJECT / "manage.py"
TIMEOUT = 180.0
"""Seconds for one manage.py run (``test`` creates and migrates a database)."""


@pytest.fixture(params=["django5", "django6"])
def django_python(request: pytest.FixtureRequest) -> Path:
    """The interpreter the project runs on: Django 5.2 (3.11) or Django 6 (3.12)."""
    if request.param == "django5":
        return Path(sys.executable)
    return pyenvs.django6_python()


@dataclass
class DjangoProject:
    """``project/`` on a fresh database of its own, run by ``python``."""

    python: Path
    url: str
    """The project's database (settings.py reads it from PROJECT_DATABASE_URL)."""
    env: dict[str, str] = field(default_factory=dict)

    def manage(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.python), str(MANAGE), *args],
            cwd=PROJECT,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        """A long-running ``manage.py *args`` (a worker), stdout and stderr merged."""
        proc = Proc.__new__(Proc)
        proc._start([str(self.python), str(MANAGE), *args], env or self.env, merge_stderr=True)
        return proc

    def sql(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        """Runs on a connection named :data:`PROBE_NAME`, so that a test counting the
        project's connections can leave its own probes out."""
        with psycopg.connect(self.url, autocommit=True, application_name=PROBE_NAME) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []


PROBE_NAME = "pgenough-test-probe"


def project_env(url: str) -> dict[str, str]:
    """The subprocesses' environment: the project's database in both DATABASE_URL and
    PROJECT_DATABASE_URL (a test may point DATABASE_URL elsewhere), nothing of this venv's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.upper() not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(DATABASE_URL=url, PROJECT_DATABASE_URL=url, PYTHONUNBUFFERED="1")
    return env


@pytest.fixture
def django_project(server_url: str, django_python: Path) -> Iterator[DjangoProject]:
    """``project/`` on a fresh, empty database (not migrated: ``manage.py migrate`` is the
    project's own step)."""
    name = f"pgenough_dj_{uuid.uuid4().hex[:10]}"
    create_database(server_url, name)
    url = with_database(server_url, name)
    try:
        yield DjangoProject(django_python, url, project_env(url))
    finally:
        drop_database(server_url, name)
        drop_database(server_url, f"test_{name}")  # left by an interrupted `manage.py test`


@pytest.fixture
async def django_env(server_url: str) -> AsyncIterator[dict[str, str]]:
    """The environment of the project's subprocesses on a fresh database already migrated
    (the core's and the Django tracks), for tests that are not about ``manage.py migrate``;
    dropped afterwards."""
    name = f"pgenough_django_{uuid.uuid4().hex[:12]}"
    create_database(server_url, name)
    url = with_database(server_url, name)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn, MIGRATIONS)
        yield {**project_env(url), "DJANGO_SETTINGS_MODULE": "proj.settings"}
    finally:
        drop_database(server_url, name)
        drop_database(server_url, f"test_{name}")
