"""Every Python example in docs/messaging.md runs as written; docs/operations.md,
docs/architecture.md, docs/scaling.md and docs/dashboard.md name only real commands, options
and settings, and operations.md's SQL runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.settings import Settings
from tests.helpers.cli import (
    PROGRAMS,
    code_blocks,
    command_problems,
    env_variables,
    invocations,
    variable_problem,
)
from tests.helpers.procs import ROOT

DOC = ROOT / "docs" / "messaging.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text("utf-8"), flags=re.DOTALL)


def test_the_doc_has_examples() -> None:
    assert len(EXAMPLES) >= 7


@pytest.mark.db
@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example-{n}" for n in range(len(EXAMPLES))])
def test_example_runs(code: str, worker_env: dict[str, str], tmp_path: Path, db: object) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, "utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], env=worker_env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "an example should show what it did"


# -- docs/operations.md and docs/architecture.md: names that must exist in the code ----------

OPERATOR_DOCS = [
    ROOT / "docs" / "operations.md",
    ROOT / "docs" / "architecture.md",
    ROOT / "docs" / "scaling.md",
    ROOT / "docs" / "dashboard.md",
]


@pytest.mark.parametrize("path", OPERATOR_DOCS, ids=lambda p: p.name)
def test_every_variable_named_is_a_setting(path: Path) -> None:
    text = path.read_text("utf-8")
    named = set(re.findall(r"\b(?:PGENOUGH_[A-Z0-9_]*[A-Z0-9]|DATABASE_URL)\b", text))
    assert "DATABASE_URL" in named or path.name != "operations.md"
    known = env_variables()
    problems = [p for name in sorted(named) if (p := variable_problem(name, known))]
    assert not problems, problems


def test_operations_lists_every_setting_with_its_default() -> None:
    """The configuration table of docs/operations.md: one row per setting that a command
    uses, each with the default the code has."""
    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| ([^|]+) \|", text, flags=re.MULTILINE))
    for name, field in Settings.model_fields.items():
        env = "DATABASE_URL" if name == "database_url" else f"PGENOUGH_{name.upper()}"
        assert env in rows, f"{env} missing from the configuration table"
        default = rows[env].strip().strip("`")
        if field.default_factory is not None or field.default is None:
            continue  # data_dir (a per-user path), database_url (unset)
        value = field.default
        if isinstance(value, bool):
            expected = str(value).lower()
        elif isinstance(value, float):
            expected = f"{value:g}"
        else:
            expected = str(value) or "empty"
        assert default == expected, f"{env}: documented {default!r}, the code says {expected!r}"


@pytest.mark.parametrize("path", OPERATOR_DOCS, ids=lambda p: p.name)
def test_every_command_named_exists(path: Path) -> None:
    text = path.read_text("utf-8")
    named = [argv for program in PROGRAMS for argv in invocations(text, program)]
    # scaling.md names settings more than commands: its commands are each mode's own.
    assert len(named) >= (3 if path.name == "scaling.md" else 5)
    problems = command_problems(text)
    assert not problems, problems


@pytest.mark.db
async def test_operations_sql_runs(db: AsyncConnectionPool) -> None:
    """Every SQL block of docs/operations.md runs on a migrated database (rolled back)."""
    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    blocks = [body for lang, body in code_blocks(text) if lang == "sql"]
    assert len(blocks) >= 10
    for body in blocks:
        statements = "\n".join(
            line for line in body.splitlines() if line.strip() not in ("BEGIN;", "COMMIT;")
        )
        async with db.connection() as conn, conn.transaction(force_rollback=True):
            await conn.execute(statements.encode())
