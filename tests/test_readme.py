"""README.md's first task runs as written, on the library's wheel alone.

The README marks its steps as docs/guides/django.md does: an HTML comment just above a code
block (invisible on the rendered page), ``<!-- step: write PATH -->`` for a file and
``<!-- step: run -->`` for shell lines. Here they are taken from the README's text, written
into an empty directory and run there in order, with the ``pgenough`` and ``python`` of a
fresh virtual environment holding only the built wheel (tests/helpers/wheel.py), on a
database of its own that nothing has migrated: the README's ``pgenough migrate`` does.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tests.helpers.procs import ROOT
from tests.helpers.wheel import CoreVenv, check, core_db_fixture, core_venv_fixture

__all__ = ["core_db_fixture", "core_venv_fixture"]  # pytest's fixtures

README = ROOT / "README.md"
STEP = re.compile(
    r"^<!-- step: (?P<kind>run|write)(?: (?P<path>\S+))? -->\n"
    r"```(?P<lang>\w*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
DONE = re.compile(
    r"pgenough\.jobs: (?P<worker>worker-[0-9a-f]+): job (?P<id>\d+) done"
    r" \(tasks\.send_welcome, \d+\.\d{3}s\) \[job_id=(?P=id) queue=emails\]$",
    re.MULTILINE,
)
"""The worker's line for the job done (core/worker/_running.py), as the README quotes it."""


@dataclass(frozen=True)
class Step:
    kind: str
    path: str | None
    body: str


def steps(text: str) -> list[Step]:
    found = [Step(m["kind"], m["path"], m["body"]) for m in STEP.finditer(text)]
    assert len(found) == text.count("<!-- step:"), "a step comment not above a code block"
    return found


def test_the_readme_marks_its_first_task() -> None:
    found = steps(README.read_text("utf-8"))
    assert [(s.kind, s.path) for s in found] == [
        ("write", "tasks.py"),
        ("write", "signup.py"),
        ("run", None),
    ]
    for step in found:
        if step.path is not None:  # the reader sees the file's name on its first line
            assert step.body.startswith(f"# {step.path}\n"), step.body


def test_the_readme_quotes_the_workers_line_as_it_is() -> None:
    """The log the README shows has the job-done line the worker writes."""
    assert DONE.search(README.read_text("utf-8"))


@pytest.mark.db
@pytest.mark.slow
def test_the_first_task_runs_as_written(core_venv: CoreVenv, core_db: str, tmp_path: Path) -> None:
    tools = {"pgenough": core_venv.bin / "pgenough", "python": core_venv.bin / "python"}
    env = dict(core_venv.env, DATABASE_URL=core_db)
    stdout, stderr = [], []
    for step in steps(README.read_text("utf-8")):
        if step.kind == "write":
            assert step.path is not None
            (tmp_path / step.path).write_text(step.body, "utf-8")
            continue
        for line in step.body.splitlines():
            words = shlex.split(line, comments=True)
            if not words:
                continue
            assert words[0] in tools, f"the README runs {words[0]!r}: not a tool this test has"
            result = core_venv.run(tools[words[0]], *words[1:], env=env, cwd=tmp_path)
            check(result)
            stdout.append(result.stdout)
            stderr.append(result.stderr)
    out, log = "".join(stdout), "".join(stderr)
    assert "user 1 signed up; send_welcome enqueued" in out, out
    # The task's effect, and the worker's line for it on the pgenough.jobs logger.
    assert "welcome mail sent to user 1" in out, out
    done = DONE.search(log)
    assert done is not None, log
    assert "1 job(s) completed, 0 failed attempt(s)" in log, log
    with psycopg.connect(core_db) as conn:
        assert conn.execute("SELECT id, email FROM users").fetchall() == [(1, "ada@example.com")]
        assert conn.execute("SELECT count(*) FROM pgenough.jobs").fetchone() == (0,)
