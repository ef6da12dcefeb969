"""The ``pgenough`` command as a user runs it: a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from pgenough import __version__
from pgenough.core.migrations import available
from tests.helpers.procs import ROOT


def pgenough(
    *args: str, env: dict[str, str], timeout: float = 120, cwd: str | os.PathLike[str] = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "pgenough"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_version(worker_env: dict[str, str]) -> None:
    result = pgenough("--version", env=worker_env)
    assert result.returncode == 0
    assert result.stdout.strip() == f"pgenough {__version__}"


def test_unreachable_database_is_one_clear_line(worker_env: dict[str, str]) -> None:
    env = dict(
        worker_env, DATABASE_URL="postgresql://app:s3cret@127.0.0.1:1/nope?connect_timeout=2"
    )
    result = pgenough("migrate", env=env)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == "error: 127.0.0.1:1: connection refused"
    assert "s3cret" not in result.stderr


def test_invalid_setting_is_one_clear_line(worker_env: dict[str, str]) -> None:
    env = dict(worker_env, PGENOUGH_WORKER_CONCURRENCY="0")
    result = pgenough("migrate", env=env)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: invalid configuration: worker_concurrency: "
        "Input should be greater than or equal to 1"
    )


@pytest.mark.db
def test_migrate_reports_the_schema_version(worker_env: dict[str, str]) -> None:
    result = pgenough("migrate", env=worker_env)
    assert result.returncode == 0, result.stderr
    latest = available()[-1].version
    assert result.stdout.strip().splitlines()[-1] == f"schema version {latest}"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["job", "abc"], "error: pgenough job: Invalid value for 'ID'"),
        (["jobs", "--before", "x"], "error: pgenough jobs: Invalid value for '--before'"),
        (["nope"], "error: pgenough: No such command 'nope'"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(
    worker_env: dict[str, str], args: list[str], says: str
) -> None:
    result = pgenough(*args, env=worker_env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(says), result.stderr


def test_no_arguments_show_the_help(worker_env: dict[str, str]) -> None:
    result = pgenough(env=worker_env)
    assert result.returncode == 2
    assert "Usage: pgenough [OPTIONS] COMMAND" in result.stdout + result.stderr
