"""bench/ stays a small harness package plus one script per benchmark (issue 33).

- No Python file under bench/ is longer than ``MAX_LINES``: a benchmark that outgrows it
  moves what it shares into ``bench/harness/`` or becomes a package of its own.
- Every ``python -m bench.X`` the benchmark pages and the Makefile quote names a module that
  exists, so the commands they give still run after a move.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.helpers.procs import ROOT

BENCH = ROOT / "bench"
MAX_LINES = 550
QUOTING = [
    ROOT / "docs" / "benchmarks.md",
    ROOT / "docs" / "plan-service" / "benchmarks.md",
    ROOT / "Makefile",
]
"""Where the benchmarks' commands are quoted."""
COMMAND = re.compile(r"python -m (bench(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


SOURCES = sorted(p for p in BENCH.rglob("*.py") if "node_modules" not in p.parts)


@pytest.mark.parametrize("path", SOURCES, ids=name)
def test_no_bench_file_is_too_long(path: Path) -> None:
    lines = len(path.read_text("utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name(path)}: {lines} lines (at most {MAX_LINES})"


def quoted_modules() -> list[str]:
    found = {m for path in QUOTING for m in COMMAND.findall(path.read_text("utf-8"))}
    return sorted(found)


def test_the_pages_quote_benchmark_commands() -> None:
    """So the test below can fail: the pages do name benchmarks to run."""
    assert {"bench.queue", "bench.ingest", "bench.api"} <= set(quoted_modules())


@pytest.mark.parametrize("module", quoted_modules())
def test_every_quoted_benchmark_command_exists(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, f"python -m {module}: no such module"
