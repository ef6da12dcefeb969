"""docs/reference.md lists every field of the types a user reads: ``Job``,
``TaskContext`` and ``WorkerConfig``, each in its own table (a field added to the code and
not to the doc fails here)."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from pgenough.core import App, Job, TaskContext, WorkerConfig
from tests.helpers.procs import ROOT

DOC = (ROOT / "docs" / "reference.md").read_text("utf-8")
REFERENCE = DOC[DOC.index("\n## The public types\n") :]


def _section(title: str) -> str:
    start = REFERENCE.index(f"\n### `{title}`")
    ends = [REFERENCE.find(h, start + 1) for h in ("\n### ", "\n## ")]
    return REFERENCE[start : min((e for e in ends if e != -1), default=len(REFERENCE))]


@pytest.mark.parametrize("kind", [Job, TaskContext, WorkerConfig], ids=lambda k: k.__name__)
def test_every_field_is_in_its_table(kind: type) -> None:
    listed = re.findall(r"^\| `([a-z_]+)` \|", _section(kind.__name__), flags=re.MULTILINE)
    assert listed == [f.name for f in dataclasses.fields(kind)]


def test_every_app_option_is_in_its_table() -> None:
    listed = re.findall(r"^\| `([a-z_]+)` \|", _section("App(...)"), flags=re.MULTILINE)
    assert listed == list(inspect.signature(App).parameters)
