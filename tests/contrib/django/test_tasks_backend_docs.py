"""docs/guides/django-tasks.md shows tested code: its steps (a ``<!-- step -->`` comment above a
block) are run as written by test_django_walkthrough.py; each other Python block is found, as
written (but for a first comment line saying where it goes), in a file of
tests/contrib/django/project/, which the suite runs on Django 5.2 and 6, so the manual
cannot drift from what is tested."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.procs import ROOT

PROJECT = Path(__file__).parent / "project"
DOC = ROOT / "docs" / "guides" / "django-tasks.md"
BLOCKS = re.findall(
    r"^(<!-- step: [^>]*-->\n)?```python\n(.*?)```", DOC.read_text("utf-8"), flags=re.M | re.S
)
SHOWN = [re.sub(r"\A# .*\n", "", body) for step, body in BLOCKS if not step]
SOURCES = {
    path.relative_to(PROJECT).as_posix(): path.read_text("utf-8")
    for path in sorted(PROJECT.rglob("*.py"))
}


def test_the_doc_has_blocks() -> None:
    assert len(BLOCKS) >= 5
    assert len(SHOWN) >= 2


@pytest.mark.parametrize("block", SHOWN, ids=[f"block-{n}" for n in range(len(SHOWN))])
def test_each_block_is_the_projects_code(block: str) -> None:
    found = [name for name, text in SOURCES.items() if block in text]
    assert found, f"not in any file of {PROJECT}:\n{block}"
