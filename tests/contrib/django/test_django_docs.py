"""docs/django.md shows the test project's code, not a copy that could drift: each Python
snippet names a file of ``project/`` on its first line and is a verbatim part of it; the
settings and options it documents are the code's."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pgenough.contrib.django.conf import KEYS, PgenoughSettings
from tests.contrib.django.conftest import MANAGE, PROJECT, project_env
from tests.helpers.cli import code_blocks
from tests.helpers.procs import ROOT

DOC = (ROOT / "docs" / "django.md").read_text("utf-8")
SNIPPETS = [body for lang, body in code_blocks(DOC) if lang == "python"]


def test_the_doc_shows_the_project() -> None:
    named = [s.splitlines()[0] for s in SNIPPETS]
    for path in ("proj/settings.py", "shop/tasks.py", "shop/views.py", "shop/tests.py"):
        assert f"# {path}" in named


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.splitlines()[0][2:] for s in SNIPPETS])
def test_each_snippet_is_the_projects_code(snippet: str) -> None:
    first, _, code = snippet.partition("\n")
    assert first.startswith("# "), "a snippet's first line names its project file"
    source = (PROJECT / first[2:].strip()).read_text("utf-8")
    assert code.strip() in source, f"docs/django.md differs from {first[2:]}"


def test_the_settings_table_is_the_codes() -> None:
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| `([^`]*)` \|", DOC, flags=re.MULTILINE))
    assert tuple(rows) == KEYS
    for key, documented in rows.items():
        default = getattr(PgenoughSettings(), key.lower())
        expected = f"{default:g}" if isinstance(default, float) else str(default)
        assert documented == expected, f"{key}: documented {documented}, the code says {expected}"


def test_the_worker_options_exist() -> None:
    documented = set(re.findall(r"^\| `(--[a-z-]+)", DOC, flags=re.MULTILINE))
    assert len(documented) >= 6
    env = project_env("postgresql://nobody@127.0.0.1:1/unused")  # --help connects to nothing
    done = subprocess.run(
        [sys.executable, str(MANAGE), "pgenough", "worker", "--help"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert documented <= set(re.findall(r"--[a-z-]+", done.stdout))
