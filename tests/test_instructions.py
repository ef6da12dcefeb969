"""The regression gate on instruction counts (``bench/instructions.py``): the client's hot paths
(the worker's own path per job at batch 10 and 100, the feed parser per plan), counted by
callgrind, must not rise past the margin over ``bench/instructions.json``. Counts hold on a
loaded machine, so this runs in the parallel pass. Without valgrind it skips, unless
``PGENOUGH_REQUIRE_VALGRIND=1`` (``.ci/run``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.requirements import skip_unless

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 1200.0  # valgrind runs Python ~50x slower, and a loaded machine slower still


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 60)
def test_the_hot_paths_cost_no_more_instructions_than_their_baseline() -> None:
    skip_unless(
        None if shutil.which("valgrind") else "valgrind is not installed",
        require="PGENOUGH_REQUIRE_VALGRIND",
        what="valgrind",
    )
    done = subprocess.run(
        [sys.executable, "-m", "bench.instructions"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    baseline = json.loads((ROOT / "bench" / "instructions.json").read_text())
    for name in ("dispatch-10", "dispatch-100", "parse"):
        assert name in done.stdout and baseline[name]["reason"], name
