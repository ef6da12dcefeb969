"""The commands' event loop: uvloop when installed (the plan service installs it), asyncio's
own on request, and a missing or unknown choice is one line, never a traceback."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import uvloop

from pgenough.cli import run
from pgenough.settings import Settings
from tests.test_cli import pgenough
from tests.test_cli_errors import error_line


async def loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("auto", uvloop.Loop), ("uvloop", uvloop.Loop), ("asyncio", asyncio.SelectorEventLoop)],
)
def test_the_commands_run_on_the_chosen_loop(
    monkeypatch: pytest.MonkeyPatch, choice: str, expected: type[asyncio.AbstractEventLoop]
) -> None:
    monkeypatch.setenv("PGENOUGH_EVENT_LOOP", choice)
    assert run(loop_type, Settings()) is expected


def test_an_unknown_loop_is_a_usage_error(worker_env: dict[str, str]) -> None:
    result = pgenough("status", env=dict(worker_env, PGENOUGH_EVENT_LOOP="trio"))
    assert result.returncode == 2
    assert error_line(result).startswith("error: invalid configuration: event_loop: Input should")


@pytest.mark.db
def test_uvloop_insisted_on_but_missing_is_one_line(
    db: object, worker_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "uvloop.py").write_text("raise ImportError('uvloop is not installed here')\n")
    path = os.pathsep.join(p for p in (str(tmp_path), worker_env.get("PYTHONPATH")) if p)
    env = dict(worker_env, PYTHONPATH=path)
    result = pgenough("status", env=dict(env, PGENOUGH_EVENT_LOOP="uvloop"))
    assert result.returncode == 1
    assert "uvloop is not installed" in error_line(result)
    # auto falls back to asyncio's own loop without a word: status still reaches the database.
    auto = pgenough("status", env=dict(env, PGENOUGH_EVENT_LOOP="auto"))
    assert auto.returncode == 0, auto.stderr
