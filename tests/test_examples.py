"""Every example in examples/ runs on the install its docstring names, against PostgreSQL.

Each example says in its docstring ``Install: ``pip install ...`````, as from a checkout of
the repository (pgenough is not on PyPI: ``.`` is the library, ``'.[extra]'`` with an
extra). One that needs the library alone (``pip install .``) runs in the environment of the
built wheel with no extras (tests/helpers/wheel.py), on a database of its own; any other
runs on this suite's environment, which must hold what its line names.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.helpers.procs import ROOT
from tests.helpers.wheel import CoreVenv, check, core_db_fixture, core_venv_fixture

__all__ = ["core_db_fixture", "core_venv_fixture"]  # pytest's fixtures

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
CORE_ONLY = "pip install ."


def install_line(path: Path) -> str:
    """The ``Install: ``...```` line of an example's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text("utf-8"))) or ""
    found = re.findall(r"^Install: ``(pip install [^`]+)``", doc, re.MULTILINE)
    assert len(found) == 1, f"{path.name}: its docstring names no install line (Install: ``...``)"
    return found[0]


def _checkout(out: list[str]) -> None:
    assert "refused: 409 sold-out-item is out of stock (no order, no job)" in out
    assert "out-of-stock orders stored: 0; confirm_order jobs left: 0" in out
    assert sum(line.startswith("  confirmed: order") for line in out) == 3
    assert out[-1] == "all 3 orders confirmed exactly once."


def _checkout_sqlalchemy(out: list[str]) -> None:
    assert "refused: sold-out-item is out of stock (no order, no job)" in out
    # The first order's first attempt failed before its commit and ran again; none twice.
    assert "  confirmed: order 1 (attempt 2)" in out
    assert "worker: 3 completed, 1 failed attempt(s)" in out
    for n in (1, 2, 3):
        assert f"order {n}: CONFIRMED, confirmed 1 time(s)" in out
    assert out[-1] == "all 3 orders confirmed exactly once."


def _fastapi_app(out: list[str]) -> None:
    assert sum(line.startswith("placed: order ") for line in out) == 3
    assert "refused: 409 sold-out-item is out of stock (no order, no job)" in out
    assert "worker: 3 completed" in out  # the refused order left no job
    assert out[-1] == "orders placed: 3, confirmed: 3"


RUNS: dict[str, tuple[list[str], Callable[[list[str]], None]]] = {
    "checkout.py": (["--orders", "3", "--port", "0"], _checkout),
    "checkout_sqlalchemy.py": (["--orders", "3"], _checkout_sqlalchemy),
    "fastapi_app.py": (["--orders", "3"], _fastapi_app),
}
"""Each example's arguments and what its output must show."""

CORE_EXAMPLES = [p for p in EXAMPLES if install_line(p) == CORE_ONLY]
OTHER_EXAMPLES = [p for p in EXAMPLES if p not in CORE_EXAMPLES]


def test_every_example_is_run_here() -> None:
    assert {p.name for p in EXAMPLES} == set(RUNS)
    # The flagship example of the README and the guides runs on the core alone.
    assert "checkout.py" in {p.name for p in CORE_EXAMPLES}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_install_line_names_what_exists(path: Path) -> None:
    """Each word of the line is the checkout (``.``, or ``'.[extra]'`` with declared extras),
    never a ``pgenough`` from an index (nothing is published), or a package that this suite's
    environment has (where an example that is not core-only runs)."""
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    words = [w.strip("'\"") for w in install_line(path).removeprefix("pip install ").split()]
    assert words[0] == "." or words[0].startswith(".["), (path.name, words[0])
    for word in words:
        if word.startswith("."):
            named = re.fullmatch(r"\.(?:\[([a-z0-9,-]+)\])?", word)
            assert named is not None, (path.name, word)
            assert set(filter(None, (named[1] or "").split(","))) <= extras, (path.name, word)
            continue
        req = Requirement(word)
        assert req.name != "pgenough", f"{path.name}: pgenough is not on an index: pip install ."
        if path not in CORE_EXAMPLES:
            importlib.metadata.version(req.name)  # raises if this environment lacks it


@pytest.mark.db
@pytest.mark.slow
@pytest.mark.parametrize("path", CORE_EXAMPLES, ids=lambda p: p.name)
def test_a_core_only_example_runs_on_the_wheel_alone(
    path: Path, core_venv: CoreVenv, core_db: str
) -> None:
    args, expect = RUNS[path.name]
    result = core_venv.run(
        core_venv.bin / "python", path, *args, env=dict(core_venv.env, DATABASE_URL=core_db)
    )
    check(result)
    expect(result.stdout.splitlines())


@pytest.mark.db
@pytest.mark.parametrize("path", OTHER_EXAMPLES, ids=lambda p: p.name)
def test_an_example_runs_on_the_install_it_names(
    path: Path, worker_env: dict[str, str], db: object
) -> None:
    args, expect = RUNS[path.name]
    result = subprocess.run(
        [sys.executable, path, *args],
        cwd=ROOT,
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    check(result)
    expect(result.stdout.splitlines())


RESTORE_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL);"
    " os.execv(sys.argv[1], sys.argv[1:])"
)
"""Exec argv with SIGINT's default action: a shell's background job (CI's second pass)
ignores SIGINT, and so would the example, which a user's Ctrl-C always reaches."""


def _ctrl_c(argv: list[str | Path], env: dict[str, str]) -> tuple[int, str]:
    """Start a long-running example, wait for its ``try: curl`` line, press Ctrl-C: its exit
    status and everything it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", RESTORE_SIGINT, *map(str, argv)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("try: curl"):
                proc.send_signal(signal.SIGINT)
                break
        seen.append(proc.stdout.read())
        return proc.wait(timeout=60), "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.db
@pytest.mark.slow
def test_ctrl_c_stops_the_core_example_without_a_traceback(
    core_venv: CoreVenv, core_db: str
) -> None:
    argv: list[str | Path] = [core_venv.bin / "python", ROOT / "examples" / "checkout.py"]
    argv += ["--orders", "1", "--port", "0", "--keep-running"]
    code, out = _ctrl_c(argv, dict(core_venv.env, DATABASE_URL=core_db))
    assert (code, "Traceback" in out) == (130, False), out


@pytest.mark.db
def test_ctrl_c_stops_the_fastapi_example_without_a_traceback(
    worker_env: dict[str, str], db: object
) -> None:
    argv: list[str | Path] = [sys.executable, ROOT / "examples" / "fastapi_app.py"]
    code, out = _ctrl_c([*argv, "--orders", "1", "--keep-running"], worker_env)
    assert (code, "Traceback" in out) == (130, False), out
