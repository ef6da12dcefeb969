"""Every Python example in docs/messaging.md runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.procs import ROOT

DOC = ROOT / "docs" / "messaging.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), flags=re.DOTALL)


def test_the_doc_has_examples() -> None:
    assert len(EXAMPLES) >= 7


@pytest.mark.db
@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example-{n}" for n in range(len(EXAMPLES))])
def test_example_runs(code: str, worker_env: dict[str, str], tmp_path: Path, db: object) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, "utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], env=worker_env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "an example should show what it did"
