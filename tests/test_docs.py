"""The docs (docs/, README.md, plan-service/README.md) say what is true.

- Every Python example of the guides runs as written (each is a complete script).
- Every page names only real ``pgenough`` and ``pgenough-plans`` commands and options and
  real settings; the library's pages name only the library's (the plan service's commands
  and settings are its own pages' business).
- The library's settings table lists exactly ``Settings``, the plan service's exactly what
  ``PlanSettings`` adds to it, each with the code's default.
- The operators' SQL runs on a migrated database.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench.harness.machine import ALLOW_BUSY
from psycopg_pool import AsyncConnectionPool

from pgenough.core import migrate
from pgenough.settings import Settings
from pgenough_plans.api import MIGRATIONS as PLAN_MIGRATIONS
from pgenough_plans.settings import PlanSettings
from tests.helpers.cli import (
    code_blocks,
    command_problems,
    env_variables,
    invocations,
    variable_problem,
)
from tests.helpers.procs import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
READMES = [ROOT / "README.md", ROOT / "plan-service" / "README.md"]
PLAN_SERVICE = DOCS / "plan-service"


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def is_library(path: Path) -> bool:
    """A page of the library: everything under docs/ but the plan service's section."""
    return path.is_relative_to(DOCS) and not path.is_relative_to(PLAN_SERVICE)


# -- the guides' Python examples ---------------------------------------------------------

RUNNABLE = [
    DOCS / "guides" / page
    for page in (
        "tasks.md",
        "enqueueing.md",
        "failures.md",
        "flow-control.md",
        "periodic.md",
        "pubsub.md",
        "locks.md",
        "testing.md",
    )
] + [DOCS / "reference.md"]
"""The pages whose every ```` ```python ```` block is a complete script, run here."""
RUN_ELSEWHERE = {
    DOCS / "guides" / "sqlalchemy.md": "tests/test_quickstarts.py",
    DOCS / "guides" / "django.md": "tests/contrib/django/test_django_walkthrough.py",
    DOCS / "guides" / "django-tasks.md": "tests/contrib/django/test_django_walkthrough.py",
    DOCS / "index.md": "an excerpt of the first task, which tests/test_readme.py runs",
    DOCS / "dashboard.md": "its mount, which tests/dashboard/test_mount.py runs as written",
}
"""The other pages with Python blocks, and what runs them."""


def python_blocks(path: Path) -> list[str]:
    return [body for lang, body in code_blocks(path.read_text("utf-8")) if lang == "python"]


EXAMPLES = [(page, n, code) for page in RUNNABLE for n, code in enumerate(python_blocks(page))]


def test_every_python_example_is_run_somewhere() -> None:
    with_python = {page for page in PAGES if python_blocks(page)}
    assert with_python == set(RUNNABLE) | set(RUN_ELSEWHERE), sorted(map(name, with_python))
    for page in RUNNABLE:
        assert python_blocks(page), f"{name(page)} has no example to run"
    assert len(EXAMPLES) >= 24  # what docs/messaging.md had before it became these pages


@pytest.mark.db
@pytest.mark.parametrize(
    "code", [c for _, _, c in EXAMPLES], ids=[f"{p.stem}-{n}" for p, n, _ in EXAMPLES]
)
def test_example_runs(code: str, worker_env: dict[str, str], tmp_path: Path, db: object) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, "utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], env=worker_env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "an example should show what it did"


# -- commands and settings named ---------------------------------------------------------

NAMED = [*PAGES, *READMES]
VARIABLE = re.compile(r"\b(?:PGENOUGH_[A-Z0-9_]*[A-Z0-9]|DATABASE_URL)\b")
BENCH_VARIABLES = {ALLOW_BUSY}
"""What the benchmarks read (``bench/harness/machine.py``), which the benchmarks' pages name."""


@pytest.mark.parametrize("path", NAMED, ids=name)
def test_every_command_named_exists(path: Path) -> None:
    problems = command_problems(path.read_text("utf-8"))
    assert not problems, problems


@pytest.mark.parametrize("path", NAMED, ids=name)
def test_every_variable_named_is_a_setting(path: Path) -> None:
    named = set(VARIABLE.findall(path.read_text("utf-8")))
    known = env_variables(plans=not is_library(path)) | BENCH_VARIABLES
    problems = [p for variable in sorted(named) if (p := variable_problem(variable, known))]
    assert not problems, problems


@pytest.mark.parametrize("path", [p for p in PAGES if is_library(p)], ids=name)
def test_the_librarys_pages_name_no_plan_service_command(path: Path) -> None:
    """They point at the plan service's pages instead."""
    assert invocations(path.read_text("utf-8"), "pgenough-plans") == []


def test_the_helpers_tell_the_products_apart() -> None:
    """So the tests above can fail: a plan service setting is no library setting."""
    assert "PGENOUGH_API_PORT" in env_variables() - env_variables(plans=False)
    assert variable_problem("PGENOUGH_API_PORT", env_variables(plans=False))
    assert command_problems("```sh\npgenough api\n```\n")
    assert not command_problems("```sh\npgenough-plans api --port 8000\n```\n")


# -- the settings tables -----------------------------------------------------------------

LIBRARY_SETTINGS = DOCS / "operations" / "settings.md"
PLAN_SETTINGS = PLAN_SERVICE / "settings.md"


def _documented_default(field_name: str, cls: type[Settings]) -> str | None:
    """The default as the table writes it, or None where the table says it in words."""
    field = cls.model_fields[field_name]
    if field.default_factory is not None or field.default is None:
        return None  # data_dir (a per-user path), database_url (unset), ...
    value = field.default
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(getattr(value, "value", value)) or "empty"


def _check_table(path: Path, cls: type[Settings], fields: list[str]) -> None:
    text = path.read_text("utf-8")
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| ([^|]+) \|", text, flags=re.MULTILINE))
    expected = ["DATABASE_URL" if f == "database_url" else f"PGENOUGH_{f.upper()}" for f in fields]
    assert sorted(rows) == sorted(expected), (sorted(set(rows) ^ set(expected)), path.name)
    for field_name, env in zip(fields, expected, strict=True):
        documented = rows[env].strip().strip("`")
        default = _documented_default(field_name, cls)
        if default is not None:
            assert documented == default, f"{env}: documented {documented!r}, the code {default!r}"


def test_the_library_table_lists_exactly_its_settings() -> None:
    _check_table(LIBRARY_SETTINGS, Settings, list(Settings.model_fields))


def test_the_plan_service_table_lists_exactly_what_it_adds() -> None:
    added = [f for f in PlanSettings.model_fields if f not in Settings.model_fields]
    assert len(added) >= 30
    _check_table(PLAN_SETTINGS, PlanSettings, added)


# -- the operators' SQL ------------------------------------------------------------------

SQL_PAGES = [
    DOCS / "operations" / "index.md",
    DOCS / "operations" / "runbook.md",
    DOCS / "reference.md",
    PLAN_SERVICE / "index.md",
    PLAN_SERVICE / "operations.md",
    PLAN_SERVICE / "runbook.md",
]

SQL_BLOCKS = {
    path: [body for lang, body in code_blocks(path.read_text("utf-8")) if lang == "sql"]
    for path in SQL_PAGES
}


@pytest.mark.db
@pytest.mark.parametrize("path", SQL_PAGES, ids=name)
async def test_operations_sql_runs(path: Path, db: AsyncConnectionPool) -> None:
    """Every SQL block of the page runs on a database migrated for its product, in a
    transaction rolled back (the plan service's migrations with it)."""
    blocks = SQL_BLOCKS[path]
    assert blocks
    async with db.connection() as conn, conn.transaction(force_rollback=True):
        if not is_library(path):
            await migrate(conn, PLAN_MIGRATIONS)
        for body in blocks:
            statements = "\n".join(
                line for line in body.splitlines() if line.strip() not in ("BEGIN;", "COMMIT;")
            )
            async with conn.transaction(force_rollback=True):
                await conn.execute(statements.encode())


def test_every_sql_block_is_run() -> None:
    with_sql = {p for p in PAGES if any(lang == "sql" for lang, _ in code_blocks(p.read_text()))}
    assert with_sql == set(SQL_PAGES), sorted(map(name, with_sql ^ set(SQL_PAGES)))


# -- the READMEs' links (the site's build checks its own pages' links) --------------------


@pytest.mark.parametrize("path", READMES, ids=name)
def test_every_relative_link_of_a_readme_resolves(path: Path) -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", path.read_text("utf-8"))
    local = [t for t in targets if not t.startswith(("http://", "https://", "mailto:"))]
    assert local
    missing = [t for t in local if not (path.parent / t).exists()]
    assert not missing, missing
