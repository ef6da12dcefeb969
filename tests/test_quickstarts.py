"""docs/guides/sqlalchemy.md ("SQLAlchemy / FastAPI in ten minutes") runs as written.

The page builds a project file by file: a ```` ```python ```` block whose first line is
``# NAME.py`` is that file; any other is a script. Here they are written into an empty
directory and run there in the page's order, with the page's ``pgenough migrate`` and
``pgenough worker run ... --until-idle``, on a database of their own (the page migrates it),
with real SQLAlchemy (``postgresql+psycopg``), FastAPI's TestClient and PostgreSQL. Every
other ``pgenough`` command the page names must exist with its options.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgenough.core.db import create_database, drop_database, with_database
from tests.helpers.cli import command_problem, pgenough_invocations
from tests.helpers.procs import ROOT

DOC = ROOT / "docs" / "guides" / "sqlalchemy.md"
FILE_HEADER = re.compile(r"^# (\w+\.py)\n")
PGENOUGH = Path(sys.executable).with_name("pgenough")


@dataclass(frozen=True)
class Step:
    kind: str
    """``file`` (written), ``script`` (run with python) or ``command`` (a pgenough line)."""
    text: str
    name: str = ""


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown text, those indented in a list item included
    (dedented): (language, body)."""
    fence = re.compile(r"^( *)```(\w*)\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)
    return [(lang, textwrap.dedent(body)) for _, lang, body in fence.findall(text)]


def steps(text: str) -> list[Step]:
    """The page's blocks in order: its files, its scripts and the ``pgenough`` commands of
    its shell blocks that a script can run (``migrate``, and ``worker run --until-idle``:
    the others serve until stopped)."""
    found: list[Step] = []
    for lang, body in blocks(text):
        if lang == "python":
            header = FILE_HEADER.match(body)
            if header:
                found.append(Step("file", body, header[1]))
            else:
                found.append(Step("script", body))
        elif lang == "sh":
            for argv in pgenough_invocations(f"```sh\n{body}```\n"):
                if argv[:1] == ["migrate"] or "--until-idle" in argv:
                    found.append(Step("command", shlex.join(argv)))
    return found


STEPS = steps(DOC.read_text("utf-8"))
ADAPTER_ERROR = "sqlalchemy_connection(AsyncSession("
"""The script of the errors section that passes an AsyncSession to the sync adapter."""


def as_url(conninfo: str) -> str:
    """A ``postgresql://`` URL for a libpq connection string, as users set DATABASE_URL
    (and as SQLAlchemy's make_url reads it)."""
    pg = {k: str(v) for k, v in conninfo_to_dict(conninfo).items()}
    auth = quote(pg.get("user", ""), safe="")
    if pg.get("password"):
        auth += ":" + quote(pg["password"], safe="")
    query = "&".join(f"{k}={quote(pg[k], safe='')}" for k in ("host", "port") if k in pg)
    return f"postgresql://{auth}@/{pg.get('dbname', '')}?{query}"


@pytest.fixture
def project(server_url: str, tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """An empty directory and the environment of a shell there: DATABASE_URL a URL to a
    database of its own, not yet migrated."""
    name = f"pgenough_quickstart_{uuid.uuid4().hex[:10]}"
    create_database(server_url, name)
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("PGENOUGH_")}
    env["DATABASE_URL"] = as_url(with_database(server_url, name))
    env.pop("PYTHONPATH", None)
    try:
        yield tmp_path, env
    finally:
        drop_database(server_url, name)


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{shlex.join(argv)}:\n{result.stdout}\n{result.stderr}"
    return result


def test_the_page_has_its_steps() -> None:
    kinds = [s.kind for s in STEPS]
    assert [s.name for s in STEPS if s.kind == "file"] == ["shop.py", "api.py"]
    assert kinds.count("script") >= 5
    assert [s.text for s in STEPS if s.kind == "command"] == [
        "migrate",
        "worker run shop:app --until-idle",
    ]


@pytest.mark.db
def test_the_page_runs_in_order(project: tuple[Path, dict[str, str]]) -> None:
    cwd, env = project
    outputs: list[str] = []
    for n, step in enumerate(STEPS):
        if step.kind == "file":
            (cwd / step.name).write_text(step.text, "utf-8")
        elif step.kind == "script":
            if ADAPTER_ERROR in step.text:
                continue  # test_the_adapter_error_names_the_right_adapter
            script = cwd / f"step_{n}.py"
            script.write_text(step.text, "utf-8")
            result = _run([sys.executable, script.name], cwd, env)
            assert result.stdout.strip(), f"step {n} should show what it did"
            outputs.append(result.stdout)
        else:
            outputs.append(_run([str(PGENOUGH), *shlex.split(step.text)], cwd, env).stdout)
    everything = "".join(outputs)
    # Section 4: the committed order and its two jobs; the declined one left neither.
    assert "orders: 1, jobs: 2" in everything
    # Section 5: the API's order committed with its job, the sold-out one with neither.
    assert "409 {'detail': 'sold out: try again tomorrow'}" in everything
    # Section 6: the worker ran the three jobs that committed, and only those.
    for line in ("order 1 confirmed", "receipt sent for order 1", "receipt sent for order 3"):
        assert line in everything, everything
    assert "refused: task 'shop.send_receipt'" in everything
    url = env["DATABASE_URL"]
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT status FROM orders ORDER BY id").fetchall() == [
            ("CONFIRMED",),
            ("PENDING",),
        ]
        assert conn.execute("SELECT count(*) FROM pgenough.jobs").fetchone() == (0,)


@pytest.mark.db
def test_the_adapter_error_names_the_right_adapter(project: tuple[Path, dict[str, str]]) -> None:
    cwd, env = project
    [shop] = [s for s in STEPS if s.name == "shop.py"]
    (cwd / "shop.py").write_text(shop.text, "utf-8")
    [script] = [s for s in STEPS if ADAPTER_ERROR in s.text]
    (cwd / "wrong_adapter.py").write_text(script.text, "utf-8")
    result = _run([sys.executable, "wrong_adapter.py"], cwd, env)
    assert result.stdout.startswith("TypeError: "), result.stdout


def test_every_command_named_exists() -> None:
    invocations = pgenough_invocations(DOC.read_text("utf-8"))
    assert ["worker", "run", "shop:app", "--concurrency", "8", "--batch-size", "20"] in invocations
    problems = [p for argv in invocations if (p := command_problem(argv))]
    assert not problems, problems
