"""docs/django-tasks.md shows the test project's code: each of its Python blocks is found,
as written, in a file of tests/contrib/django/project/ (which the suite runs on Django 5.2
and 6), so the manual cannot drift from what is tested."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.procs import ROOT

PROJECT = Path(__file__).parent / "project"
DOC = ROOT / "docs" / "django-tasks.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), flags=re.DOTALL)
SOURCES = {
    path.relative_to(PROJECT).as_posix(): path.read_text("utf-8")
    for path in sorted(PROJECT.rglob("*.py"))
}


def test_the_doc_has_blocks() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block-{n}" for n in range(len(BLOCKS))])
def test_each_block_is_the_projects_code(block: str) -> None:
    found = [name for name, text in SOURCES.items() if block in text]
    assert found, f"not in any file of {PROJECT}:\n{block}"
