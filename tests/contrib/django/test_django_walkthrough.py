"""docs/guides/django.md, then docs/guides/django-tasks.md, followed as a newcomer follows
them: in an empty folder, with the venv's ``django-admin`` (Django 5.2, and Django 6 on
Python 3.12), each step the pages mark, in their order, run as written. A step is an HTML
comment just above a code block (invisible on the rendered page):

- ``<!-- step: run -->``: a ``sh`` block, each line a command (``python`` and
  ``django-admin`` are the venv's; ``NAME=value`` words before one set its environment);
- ``<!-- step: write PATH -->``: the block is the whole file ``PATH``;
- ``<!-- step: append PATH -->``: the block goes at the end of ``PATH``;
- ``<!-- step: shell -->``: the block runs in ``python manage.py shell``, and must read as
  lines pasted into its interactive prompt do (a blank line ends an indented block there).

So the pages' own text is what runs, and a change to a snippet changes what is tested. The
database is a fresh one of the test server, given to the project through libpq's variables,
which the settings snippet reads; the effects are checked there once the steps have run."""

from __future__ import annotations

import code
import os
import re
import shlex
import subprocess
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgenough.contrib.django.backend import PRUNE_KIND
from pgenough.core.db import create_database, drop_database, with_database
from tests.helpers.procs import ROOT

pytestmark = [pytest.mark.db, pytest.mark.slow]

STEP = re.compile(
    r"^<!-- step: (?P<kind>run|write|append|shell)(?: (?P<path>\S+))? -->\n"
    r"```(?P<lang>\w*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
TIMEOUT = 240.0
"""Seconds for one command (``manage.py test`` creates and migrates a database)."""


@dataclass(frozen=True)
class Step:
    doc: str
    kind: str
    path: str | None
    body: str

    def __str__(self) -> str:
        where = f" {self.path}" if self.path else ""
        return f"{self.doc}: step {self.kind}{where}"


def steps(doc: str) -> list[Step]:
    text = (ROOT / "docs" / "guides" / doc).read_text("utf-8")
    found = [Step(doc, m["kind"], m["path"], m["body"]) for m in STEP.finditer(text)]
    assert len(found) == text.count("<!-- step:"), f"{doc}: a step comment not above a block"
    for step in found:
        first = step.body.splitlines()[0]
        if step.path is not None:  # the reader sees the file's name on its first line
            assert first.startswith(f"# {step.path}"), f"{step}: its first line is {first!r}"
    return found


DJANGO_MD = steps("django.md")
DJANGO_TASKS_MD = steps("django-tasks.md")


def pasteable(source: str) -> bool:
    """Whether ``source``, pasted line by line into Python's interactive prompt (Django's
    ``shell`` without IPython), compiles: a statement after an indented block needs a blank
    line before it there, which a file does not."""

    class Console(code.InteractiveConsole):
        refused = False

        def runcode(self, code: types.CodeType) -> None:
            pass

        def showsyntaxerror(self, filename: str | None = None, **kwargs: object) -> None:
            self.refused = True

    console = Console()
    for line in [*source.splitlines(), ""]:
        console.push(line)
    return not console.refused


@dataclass
class Site:
    """The newcomer's folder, shell environment and database."""

    python: Path
    cwd: Path
    env: dict[str, str]
    url: str

    def command(self, line: str, step: Step) -> str:
        words = shlex.split(line)
        env = dict(self.env)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            env[name] = value
        tools = {
            "python": str(self.python),
            "django-admin": str(self.python.parent / "django-admin"),
        }
        argv = [tools.get(words[0], words[0]), *words[1:]]
        return self.run(argv, env, f"{step}: {line}")

    def run(self, argv: list[str], env: dict[str, str], what: str) -> str:
        done = subprocess.run(
            argv, cwd=self.cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
        assert done.returncode == 0, f"{what}\n{done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def follow(self, step: Step) -> str:
        if step.kind == "run":
            lines = [ln for ln in step.body.splitlines() if ln.strip() and not ln.startswith("#")]
            return "".join(self.command(line, step) for line in lines)
        if step.kind == "shell":
            assert pasteable(step.body), f"{step}: pasted into the shell, it is a SyntaxError"
            argv = [str(self.python), "manage.py", "shell", "-c", step.body]
            return self.run(argv, self.env, str(step))
        assert step.path is not None
        path = self.cwd / step.path
        if step.kind == "append":
            assert path.exists(), f"{step}: {step.path} should exist by now"
            path.write_text(path.read_text("utf-8") + "\n\n" + step.body, "utf-8")
        else:
            path.write_text(step.body, "utf-8")
        return ""

    def sql(self, query: str) -> list[tuple[object, ...]]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(query).fetchall()


@pytest.fixture
def site(server_url: str, django_python: Path, tmp_path: Path) -> Iterator[Site]:
    """An empty folder, and a shell environment whose libpq variables name a fresh database;
    nothing of this suite's environment (no DATABASE_URL, no PYTHONPATH, no settings)."""
    name = f"pgenough_walk_{uuid.uuid4().hex[:10]}"
    create_database(server_url, name)
    url = with_database(server_url, name)
    libpq = {
        "host": "PGHOST",
        "port": "PGPORT",
        "user": "PGUSER",
        "password": "PGPASSWORD",
        "dbname": "PGDATABASE",
    }
    env = {
        k: v
        for k, v in os.environ.items()
        if k.upper() not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "DATABASE_URL"}
        and not k.upper().startswith(("DJANGO_", "PGENOUGH_", "PG"))
    }
    env.update(
        {libpq[k]: str(v) for k, v in conninfo_to_dict(url).items() if k in libpq},
        PYTHONUNBUFFERED="1",
    )
    cwd = tmp_path / "site"
    cwd.mkdir()
    try:
        yield Site(django_python, cwd, env, url)
    finally:
        drop_database(server_url, name)
        drop_database(server_url, f"test_{name}")  # left by an interrupted `manage.py test`


def test_the_pages_have_their_steps() -> None:
    kinds = [(s.kind, s.path) for s in DJANGO_MD]
    assert kinds[0] == ("run", None)  # startproject
    for path in ("proj/settings.py", "shop/models.py", "shop/tasks.py", "shop/views.py"):
        assert path in {p for _, p in kinds}
    assert ("write", "shop/tests.py") in kinds
    assert any("--until-idle" in s.body for s in DJANGO_MD if s.kind == "run")
    assert ("write", "reports/tests.py") in [(s.kind, s.path) for s in DJANGO_TASKS_MD]


def test_a_newcomer_follows_the_django_pages(site: Site) -> None:
    said = [site.follow(step) for step in DJANGO_MD]

    # docs/guides/django.md: the order the shell committed, shipped with one receipt by the worker;
    # the shop's tests passed (each `run` step exits 0), their database was Django's own.
    assert any("committed with its two jobs" in s for s in said), said
    assert site.sql("SELECT shipped, receipts FROM shop_order") == [(True, 1)]
    left = f"SELECT kind FROM pgenough.jobs WHERE kind <> '{PRUNE_KIND}'"
    assert site.sql(left) == []

    said = [site.follow(step) for step in DJANGO_TASKS_MD]

    # docs/guides/django-tasks.md: the Django tasks enqueued in the shell ran on the worker.
    assert site.sql("SELECT task_path, status FROM pgenough.django_task_results ORDER BY id") == [
        ("reports.tasks.write_report", "SUCCESSFUL"),
        ("reports.tasks.urgent", "SUCCESSFUL"),
    ]
    assert sorted(r[0] for r in site.sql("SELECT name FROM reports_report")) == [
        "incident",
        "weekly",
    ]
    assert site.sql(left) == []
