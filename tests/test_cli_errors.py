"""Every way a command is misused or meets a broken environment ends the same way: one line
on stderr that names the problem, a non-zero exit, never a traceback (the ``pgenough`` and
``pgenough-plans`` commands as subprocesses, on a real PostgreSQL)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgenough.cli import BIGINT_MAX
from pgenough.settings import MAX_CONCURRENCY
from pgenough_plans.sim.server import SimServer
from tests.plan_service.test_commands import plans
from tests.test_cli import free_port, pgenough

TOO_BIG = "99999999999999999999"  # > 2**63 - 1: PostgreSQL's "bigint out of range"
# A log line of its own, if it could start one (without a comma: one splits providers).
FORGED = "2026-01-01 00:00:00 ERROR   pgenough_plans.ingest.fetch: forged"


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line on stderr, an error line."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


PLANS = "pgenough-plans"


def command(program: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``program *args`` (``pgenough`` or ``pgenough-plans``), to its end."""
    return (plans if program == PLANS else pgenough)(*args, **kwargs)


@pytest.mark.db
@pytest.mark.parametrize(
    "args",
    [
        [PLANS, "runs", "--limit", TOO_BIG],
        [PLANS, "runs", "--before", TOO_BIG],
        ["pgenough", "jobs", "--limit", TOO_BIG],
        ["pgenough", "jobs", "--before", TOO_BIG],
        ["pgenough", "failures", "--limit", TOO_BIG],
        [PLANS, "failures", "--limit", TOO_BIG],
        [PLANS, "run", TOO_BIG],
        ["pgenough", "job", TOO_BIG],
        ["pgenough", "retry", TOO_BIG],
        ["pgenough", "discard", TOO_BIG],
        [PLANS, "runs", "--before", "0"],
        [PLANS, "provider-sim", "--plans", TOO_BIG],
        [PLANS, "demo", "--plans", TOO_BIG],
        [PLANS, "api", "--port", "65536"],
        [PLANS, "demo", "--port", "65536"],
        [PLANS, "provider-sim", "--port", "-1"],
        [PLANS, "worker", "process", "--metrics-port", "65536"],
        [PLANS, "worker", "fetch", "--metrics-port", "-1", "--provider", "p=http://h/"],
        [PLANS, "worker", "fetch", "--interval", "inf", "--provider", "p=http://h/"],
        [PLANS, "demo", "--interval", "inf"],
        [PLANS, "worker", "process", "--concurrency", "10001"],
        [PLANS, "worker", "process", "--concurrency", TOO_BIG],
        ["pgenough", "worker", "run", "tests.helpers.taskapp:app", "--concurrency", "10001"],
        ["pgenough", "worker", "run", "tests.helpers.taskapp:app", "--queue", "default=10001"],
    ],
)
def test_a_number_out_of_range_is_a_usage_error(
    db: object, worker_env: dict[str, str], args: list[str]
) -> None:
    program, *rest = args
    result = command(program, *rest, env=worker_env)
    assert result.returncode == 2
    line = error_line(result)
    name = " ".join(rest[:2]) if rest[0] == "worker" else rest[0]
    assert line.startswith(f"error: {program} {name}: Invalid value for "), line


@pytest.mark.db
def test_the_largest_bigint_is_a_valid_id_and_limit(db: object, worker_env: dict[str, str]) -> None:
    top = str(BIGINT_MAX)
    assert pgenough("jobs", "--limit", top, "--before", top, env=worker_env).returncode == 0
    missing = pgenough("job", top, env=worker_env)
    assert error_line(missing).startswith(f"error: job {top} not found")


@pytest.mark.parametrize(
    "argv",
    [
        ["api", "--port", "{port}"],
        ["provider-sim", "--port", "{port}"],
        ["demo", "--port", "{port}"],
        ["worker", "fetch", "--once", "--provider", "p=http://h/", "--metrics-port", "{port}"],
    ],
)
def test_a_busy_port_is_one_line(worker_env: dict[str, str], argv: list[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = plans(*(a.format(port=port) for a in argv), env=worker_env)
    assert result.returncode == 1
    metrics = "metrics: " if "--metrics-port" in argv else ""
    assert error_line(result) == (
        f"error: {metrics}cannot listen on 127.0.0.1:{port}: address already in use"
    )


def test_an_unknown_host_is_one_line(worker_env: dict[str, str]) -> None:
    result = plans("api", "--host", "no-such-host.invalid", "--port", "0", env=worker_env)
    assert result.returncode == 1
    assert error_line(result).startswith("error: cannot listen on no-such-host.invalid:0: ")


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("missing.toml", None, "error: PGENOUGH_CONFIG names {path}, which does not exist"),
        ("bad.toml", b"log_level = \n", "error: config file {path} is not valid TOML: "),
        ("latin1.toml", b'log_level = "\xff"\n', "error: config file {path} is not UTF-8 text"),
        ("a-directory", "dir", "error: config file {path} is not a file"),
        ("[/]odd.toml", None, "error: PGENOUGH_CONFIG names {path}, which does not exist"),
        (
            "value.toml",
            b'worker_concurrency = "many"\n',
            "error: invalid configuration: worker_concurrency: Input should be a valid integer",
        ),
    ],
)
def test_a_config_file_that_cannot_be_used_is_one_line(
    worker_env: dict[str, str],
    tmp_path: Path,
    name: str,
    content: bytes | str | None,
    says: str,
) -> None:
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    result = pgenough("status", env=dict(worker_env, PGENOUGH_CONFIG=str(path)))
    assert result.returncode == 2
    assert error_line(result).startswith(says.format(path=path))


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="needs Linux's /proc")
def test_an_unreadable_config_file_is_one_line(worker_env: dict[str, str]) -> None:
    # A regular file that no one can read from its start, root included (the tests may run
    # as root, who may read a chmod 000 file).
    result = pgenough("status", env=dict(worker_env, PGENOUGH_CONFIG="/proc/self/mem"))
    assert result.returncode == 2
    assert error_line(result) == (
        "error: cannot read config file /proc/self/mem: Input/output error"
    )


def test_an_empty_pgenough_config_is_one_line(worker_env: dict[str, str]) -> None:
    result = pgenough("status", env=dict(worker_env, PGENOUGH_CONFIG=""))
    assert result.returncode == 2
    assert error_line(result) == "error: PGENOUGH_CONFIG is empty: name a TOML file, or unset it"


def test_a_default_config_file_that_is_a_directory_is_one_line(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "pgenough.toml").mkdir()
    env = {k: v for k, v in worker_env.items() if k != "PGENOUGH_CONFIG"}
    result = pgenough("status", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert error_line(result) == (
        "error: config file pgenough.toml is not a file: remove it, or set PGENOUGH_CONFIG"
        " to a TOML file"
    )


@pytest.mark.parametrize(
    ("program", "variable", "value"),
    [
        ("pgenough", "PGENOUGH_WORKER_LEASE", "inf"),
        (PLANS, "PGENOUGH_WORKER_LEASE", "inf"),
        (PLANS, "PGENOUGH_FETCH_INTERVAL", "inf"),
    ],
)
def test_an_infinite_setting_is_one_line(
    worker_env: dict[str, str], program: str, variable: str, value: str
) -> None:
    result = command(program, "status", env=dict(worker_env, **{variable: value}))
    assert result.returncode == 2
    field = variable.removeprefix("PGENOUGH_").lower()
    assert error_line(result) == (
        f"error: invalid configuration: {field}: Input should be a finite number"
    )


@pytest.mark.parametrize("argv", ["pgenough status", f"{PLANS} worker process", f"{PLANS} status"])
def test_a_concurrency_setting_past_its_bound_is_one_line(
    worker_env: dict[str, str], argv: str
) -> None:
    env = dict(worker_env, PGENOUGH_WORKER_CONCURRENCY=str(MAX_CONCURRENCY + 1))
    result = command(*argv.split(), env=env)
    assert result.returncode == 2
    assert error_line(result) == (
        "error: invalid configuration: worker_concurrency:"
        f" Input should be less than or equal to {MAX_CONCURRENCY}"
    )


@pytest.mark.parametrize("name", ["api", "demo"])
@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("PGENOUGH_UI_TOKEN", "", "ui_token must not be empty"),
        ("PGENOUGH_API_MAX_CONCURRENT_SEARCHES", "9", "api_max_concurrent_searches (9) must be"),
        ("PGENOUGH_API_TRUSTED_PROXIES", "proxy.example", "api_trusted_proxies: 'proxy.example'"),
        ("PGENOUGH_API_CURSOR_SECRET", "short", "api_cursor_secret must be at least 32"),
    ],
)
def test_impossible_api_settings_are_one_line(
    worker_env: dict[str, str], name: str, variable: str, value: str, says: str
) -> None:
    result = plans(name, "--port", "0", env=dict(worker_env, **{variable: value}))
    assert result.returncode == 2
    assert error_line(result).startswith(f"error: invalid configuration: {says}")


NOT_UTF8 = os.fsdecode(b"x\xff")  # as Python holds bytes that do not decode: a lone surrogate


@pytest.mark.parametrize(
    "args",
    [
        [PLANS, "runs", "--provider", NOT_UTF8],
        ["pgenough", "jobs", "--queue", NOT_UTF8],
        [PLANS, "api", "--host", NOT_UTF8],
    ],
)
def test_an_argument_that_is_not_utf8_is_one_line(
    worker_env: dict[str, str], args: list[str]
) -> None:
    result = command(*args, env=worker_env)
    assert result.returncode == 2
    assert error_line(result) == "error: argument b'x\\xff' is not valid UTF-8"


@pytest.mark.parametrize(
    ("program", "variable"),
    [
        ("pgenough", "DATABASE_URL"),
        ("pgenough", "PGENOUGH_WORKER_CONCURRENCY"),
        (PLANS, "DATABASE_URL"),
        (PLANS, "PGENOUGH_API_HOST"),
        (PLANS, "PGENOUGH_PROVIDERS"),
    ],
)
def test_a_setting_that_is_not_utf8_is_one_line(
    worker_env: dict[str, str], program: str, variable: str
) -> None:
    result = command(program, "status", env=dict(worker_env, **{variable: NOT_UTF8}))
    assert result.returncode == 2
    assert error_line(result) == f"error: invalid configuration: {variable} is not valid UTF-8"


def test_markup_in_what_an_error_quotes_is_printed_as_it_is(worker_env: dict[str, str]) -> None:
    result = pgenough("no[/]such", env=worker_env)
    assert result.returncode == 2
    assert error_line(result) == "error: pgenough: No such command 'no[/]such'."


def test_a_newline_in_database_url_stays_on_the_error_line(worker_env: dict[str, str]) -> None:
    # A socket directory: the error starts with its path, newline and all.
    env = dict(worker_env, DATABASE_URL=f"host='/nonexistent/db\n{FORGED}' port=1 user=app")
    result = pgenough("migrate", env=env)
    assert result.returncode == 1
    assert error_line(result).startswith("error: /nonexistent/db\\n2026-01-01 ")
    assert error_line(result).endswith("/.s.PGSQL.1: no such socket: is PostgreSQL running there?")


# -- the database URL -------------------------------------------------------------------------

OUR_OPTIONS = ("keepalives", "options", "tcp_user_timeout", "connect_timeout", "application_name")
"""What pgenough adds to every URL (``with_network_timeout``, the pools): never in an error."""


@pytest.mark.parametrize(
    "argv",
    [
        ["pgenough", "jobs"],
        ["pgenough", "migrate"],
        ["pgenough", "worker", "run", "tests.helpers.taskapp:app"],
        ["pgenough", "status"],
        [PLANS, "migrate"],
        [PLANS, "status"],
        [PLANS, "worker", "process"],
    ],
)
def test_a_wrong_port_says_where_and_why_first(worker_env: dict[str, str], argv: list[str]) -> None:
    port = free_port()  # nothing listens there
    env = dict(worker_env, DATABASE_URL=f"postgresql://app:s3cret@127.0.0.1:{port}/nope")
    result = command(*argv, env=env)
    assert result.returncode == 1
    line = error_line(result)
    assert line == f"error: 127.0.0.1:{port}: connection refused"
    assert len(line) < 150
    assert not any(option in result.stderr for option in OUR_OPTIONS), result.stderr
    assert "s3cret" not in result.stderr


def _as_url(conninfo: str, scheme: str, **override: str) -> str:
    """``conninfo`` (the test database) as a URL of ``scheme``, every parameter in its query
    string: a host may be a socket directory, and a list."""
    params = {k: str(v) for k, v in conninfo_to_dict(conninfo).items() if v is not None}
    return f"{scheme}://?{urlencode({**params, **override})}"


@pytest.mark.db
@pytest.mark.parametrize("driver", ["psycopg", "psycopg2", "asyncpg"])
def test_sqlalchemys_form_of_the_url_is_the_same_database(
    db: object, worker_env: dict[str, str], driver: str
) -> None:
    """The URL a FastAPI app gives SQLAlchemy (``postgresql+psycopg://``) serves pgenough as
    it is: the driver is dropped, the rest read as libpq reads it."""
    env = dict(worker_env, DATABASE_URL=_as_url(worker_env["DATABASE_URL"], f"postgresql+{driver}"))
    migrated = pgenough("migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr
    listed = pgenough("jobs", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) is not None


@pytest.mark.db
def test_a_multi_host_url_connects_past_a_dead_host(db: object, worker_env: dict[str, str]) -> None:
    """A failover URL (several hosts) still connects to the one that answers, in either form;
    when none answers, the error names each host with its reason."""
    params = conninfo_to_dict(worker_env["DATABASE_URL"])
    dead = free_port()
    hosts = {
        "host": f"127.0.0.1,{params.get('host') or ''}",
        "port": f"{dead},{params.get('port') or 5432}",
    }
    for scheme in ("postgresql", "postgresql+psycopg"):
        env = dict(worker_env, DATABASE_URL=_as_url(worker_env["DATABASE_URL"], scheme, **hosts))
        result = pgenough("jobs", "--json", env=env)
        assert result.returncode == 0, (scheme, result.stderr)
    other = free_port()
    none = {"host": "127.0.0.1,127.0.0.1", "port": f"{dead},{other}"}
    env = dict(worker_env, DATABASE_URL=_as_url(worker_env["DATABASE_URL"], "postgresql", **none))
    result = pgenough("jobs", env=env)
    assert result.returncode == 1
    assert error_line(result) == f"error: 127.0.0.1:{dead}, 127.0.0.1:{other}: connection refused"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://app:s3cret@db/app", "error: unsupported database url scheme mysql://: use "),
        ("postgresql+foo://app:s3cret@db/app", "error: unsupported database url scheme "),
        ("postgresql//app:s3cret@db/app", 'error: invalid database url: missing "=" after "…"'),
        ("postgresql://app:s3%zzcret@db/app", "error: invalid database url: invalid percent-"),
        ("host=db password='s3cret", "error: invalid database url: unterminated quoted string"),
    ],
)
def test_a_url_that_is_not_postgresqls_names_what_is(
    worker_env: dict[str, str], url: str, says: str
) -> None:
    result = pgenough("jobs", env=dict(worker_env, DATABASE_URL=url))
    assert result.returncode == 1
    line = error_line(result)
    assert line.startswith(says), line
    assert "s3cret" not in result.stderr
    if "://" not in url or "scheme" in says:  # the forms accepted, when it is not one
        assert "postgresql://user@host:port/dbname" in line and "postgresql+psycopg://" in line


def _config(tmp_path: Path, providers: str) -> Path:
    path = tmp_path / "pgenough-plans.toml"
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
        result = plans(
            "--log-format",
            log_format,
            "worker",
            "fetch",
            "--once",
            env=dict(worker_env, PGENOUGH_PLANS_CONFIG=str(config)),
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
    result = plans(
        "worker", "fetch", "--once", env=dict(worker_env, PGENOUGH_PLANS_CONFIG=str(config))
    )
    assert result.returncode == 2
    assert error_line(result).startswith("error: provider forge: invalid provider URL ")
