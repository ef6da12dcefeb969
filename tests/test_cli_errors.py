"""Every way a command is misused or meets a broken environment ends the same way: one line
on stderr that names the problem, a non-zero exit, never a traceback (the ``pgenough``
command as a subprocess, on a real PostgreSQL)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from pgenough.plans.sim import SimServer
from tests.test_cli import free_port, pgenough

# A log line of its own, if it could start one (without a comma: one splits providers).
FORGED = "2026-01-01 00:00:00 ERROR   pgenough.plans.fetch: forged"


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line on stderr, an error line."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["api", "--port", "{port}"],
        ["provider-sim", "--port", "{port}"],
        ["demo", "--port", "{port}"],
        ["worker", "fetch", "--once", "--provider", "p=http://h/", "--metrics-port", "{port}"],
    ],
)
def test_a_busy_port_is_one_line(worker_env: dict[str, str], command: list[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = pgenough(*(a.format(port=port) for a in command), env=worker_env)
    assert result.returncode == 1
    metrics = "metrics: " if "--metrics-port" in command else ""
    assert error_line(result) == (
        f"error: {metrics}cannot listen on 127.0.0.1:{port}: address already in use"
    )


def test_an_unknown_host_is_one_line(worker_env: dict[str, str]) -> None:
    result = pgenough("api", "--host", "no-such-host.invalid", "--port", "0", env=worker_env)
    assert result.returncode == 1
    assert error_line(result).startswith("error: cannot listen on no-such-host.invalid:0: ")


def _config(tmp_path: Path, providers: str) -> Path:
    path = tmp_path / "pgenough.toml"
    # A TOML basic string: \uXXXX and \n are escapes there, so the file is plain ASCII.
    path.write_text(f'providers = "{providers}"\n', encoding="ascii")
    return path


@pytest.mark.db
@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize(
    "separator",
    [
        "\\u2028",  # LINE SEPARATOR: a URL may hold it, and str.splitlines() splits on it
        "\\u0085",  # NEXT LINE (C1), likewise
        "%0A",  # a percent-encoded newline, logged as it is written
    ],
)
def test_a_line_break_in_a_provider_url_cannot_forge_a_log_line(
    db: object, worker_env: dict[str, str], tmp_path: Path, separator: str, log_format: str
) -> None:
    with SimServer(plans=20, seed=3) as sim:
        config = _config(tmp_path, f"forge={sim.url}?version=1&note={separator}{FORGED}")
        result = pgenough(
            "--log-format",
            log_format,
            "worker",
            "fetch",
            "--once",
            env=dict(worker_env, PGENOUGH_CONFIG=str(config)),
        )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert any("fetching forge from" in line for line in lines), result.stderr
    assert not [line for line in lines if line.startswith(FORGED)], result.stderr
    if log_format == "json":
        messages = [json.loads(line)["message"] for line in lines]
        assert any(FORGED in m for m in messages), messages  # all there, as one value


def test_a_raw_newline_in_a_provider_url_is_refused_in_one_line(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    config = _config(tmp_path, f"forge=http://127.0.0.1:{free_port()}/planList\\n{FORGED}")
    result = pgenough(
        "worker", "fetch", "--once", env=dict(worker_env, PGENOUGH_CONFIG=str(config))
    )
    assert result.returncode == 2
    assert error_line(result).startswith("error: provider forge: invalid provider URL ")
