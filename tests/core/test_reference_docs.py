"""docs/messaging.md's Reference lists every field of the types a user reads: ``Job``,
``TaskContext`` and ``WorkerConfig``, each in its own table (a field added to the code and
not to the doc fails here)."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest

from pgenough.core import App, Job, TaskContext, WorkerConfig
from tests.helpers.procs import ROOT

DOC = (ROOT / "docs" / "messaging.md").read_text("utf-8")
REFERENCE = DOC[DOC.index("\n## Reference\n") :]


def _section(title: str) -> str:
    start = REFERENCE.index(f"\n### `{title}`")
    end = REFERENCE.find("\n### ", start + 1)
    return REFERENCE[start:end]


@pytest.mark.parametrize("kind", [Job, TaskContext, WorkerConfig], ids=lambda k: k.__name__)
def test_every_field_is_in_its_table(kind: type) -> None:
    listed = re.findall(r"^\| `([a-z_]+)` \|", _section(kind.__name__), flags=re.MULTILINE)
    assert listed == [f.name for f in dataclasses.fields(kind)]


def test_every_app_option_is_in_its_table() -> None:
    listed = re.findall(r"^\| `([a-z_]+)` \|", _section("App(...)"), flags=re.MULTILINE)
    assert listed == list(inspect.signature(App).parameters)
