"""The django.tasks backend, in the test project on Django 5.2 (the backport) and Django 6:
its Django test suite (``reports/tests.py``), and a worker process that runs what another
process enqueued."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).parent / "project"

pytestmark = pytest.mark.db

TIMEOUT = 240


def manage(python: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "manage.py", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_the_reports_test_suite(django_python: Path, django_env: dict[str, str]) -> None:
    done = manage(django_python, django_env, "test", "reports", "--noinput", "-v", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\nOK" in done.stderr, done.stderr


def test_system_checks_pass(django_python: Path, django_env: dict[str, str]) -> None:
    done = manage(django_python, django_env, "check")
    assert done.returncode == 0, done.stdout + done.stderr


BAD_SETTINGS = {
    "options": (
        "TASKS['default']['OPTIONS'] = {'DATABASE': 'elsewhere', 'RETRIES': 3}\n",
        ["pgenough.tasks.E001", "'RETRIES'", "pgenough.tasks.E002", "'elsewhere'"],
    ),
    "not-installed": (
        "INSTALLED_APPS = [a for a in INSTALLED_APPS if a != 'pgenough.contrib.django']\n",
        ["pgenough.tasks.E004", "'pgenough.contrib.django' is not in INSTALLED_APPS"],
    ),
    "sqlite": (
        "DATABASES['lite'] = {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}\n"
        "TASKS['default']['OPTIONS'] = {'DATABASE': 'lite'}\n",
        ["pgenough.tasks.E003", "sqlite; pgenough needs PostgreSQL"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_system_checks_refuse_a_bad_configuration(
    case: str, django_python: Path, django_env: dict[str, str], tmp_path: Path
) -> None:
    lines, expected = BAD_SETTINGS[case]
    (tmp_path / "bad_tasks_settings.py").write_text("from proj.settings import *\n" + lines)
    env = {
        **django_env,
        "DJANGO_SETTINGS_MODULE": "bad_tasks_settings",
        "PYTHONPATH": str(tmp_path),
    }
    done = manage(django_python, env, "check")
    assert done.returncode != 0
    for text in expected:
        assert text in done.stderr, done.stderr


NO_FRAMEWORK = """
import sys
sys.modules["django.tasks"] = None  # as on Django 5.2 without the backport
sys.modules["django_tasks"] = None
import django
from django.conf import settings
OURS = "pgenough.contrib.django.backend.PgenoughBackend"
settings.configure(TASKS={"default": {"BACKEND": OURS}})
django.setup()
from django.core.exceptions import ImproperlyConfigured
from pgenough.contrib.django import app, backend
assert backend.KIND in app.tasks
print(backend.configured_queues())
try:
    backend.PgenoughBackend("default", {})
except ImproperlyConfigured as exc:
    print(exc)
"""


def test_the_module_imports_without_a_tasks_framework() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_FRAMEWORK], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    queues, error = done.stdout.strip().splitlines()
    assert queues == "['default']"
    assert error.startswith("TASKS['default']: pgenough's django.tasks backend needs")
    assert "pip install django-tasks" in error


ENQUEUE = """
import json
from django.db import transaction
from reports import tasks
with transaction.atomic():
    ids = {
        "add": tasks.add.enqueue(20, 22).id,
        "fail": tasks.fail.enqueue().id,
        "urgent": tasks.urgent.enqueue("urgent").id,
        "context": tasks.look_at_myself.enqueue().id,
    }
with transaction.atomic():
    tasks.noop.enqueue()
    transaction.set_rollback(True)
print(json.dumps(ids))
"""

READ = """
import json, os
from django.db import connection
from reports import tasks
out = {}
for name, result_id in json.loads(os.environ["RESULT_IDS"]).items():
    r = tasks.add.get_backend().get_result(result_id)
    out[name] = {
        "status": str(r.status),
        "value": r.return_value if r.status == "SUCCESSFUL" else None,
        "errors": [e.exception_class_path for e in r.errors],
        "attempts": r.attempts,
    }
with connection.cursor() as cur:
    cur.execute("SELECT id, state::text, errors -> -1 ->> 'traceback' FROM pgenough.jobs")
    out["jobs_left"] = [list(row) for row in cur.fetchall()]
print(json.dumps(out))
"""


def test_a_worker_process_runs_what_another_process_enqueued(
    django_python: Path, django_env: dict[str, str]
) -> None:
    migrated = manage(django_python, django_env, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    enqueued = manage(django_python, django_env, "shell", "-c", ENQUEUE)
    assert enqueued.returncode == 0, enqueued.stderr
    ids = json.loads(enqueued.stdout.strip().splitlines()[-1])

    worked = manage(django_python, django_env, "pgenough", "worker", "--until-idle")
    assert worked.returncode == 0, worked.stdout + worked.stderr
    # A line per job (the project's LOGGING lets them through), the failure's with its
    # traceback; the FAILED task counts: a failed attempt, its job dead-lettered.
    lines = worked.stdout + worked.stderr
    assert lines.count(" done (django.tasks, ") == 3, lines
    assert f"job {ids['fail']} failed, dead-lettered (django.tasks, " in lines
    assert 'reports/tasks.py", line' in lines
    assert (
        "3 job(s) completed, 1 failed attempt(s) (0 to retry), 1 dead-lettered, 0 lost"
        " claim(s), 0 handed back" in worked.stdout + worked.stderr
    ), worked.stdout + worked.stderr

    read = manage(django_python, {**django_env, "RESULT_IDS": json.dumps(ids)}, "shell", "-c", READ)
    assert read.returncode == 0, read.stderr
    seen = json.loads(read.stdout.strip().splitlines()[-1])
    # The rolled-back enqueue left no job; the failed task's is dead, with its traceback.
    [(job_id, state, traceback)] = seen.pop("jobs_left")
    assert (str(job_id), state) == (ids["fail"], "dead")
    assert 'reports/tasks.py", line' in traceback
    assert traceback.endswith("ValueError: This task failed due to ValueError\n")
    assert seen["add"] == {"status": "SUCCESSFUL", "value": 42, "errors": [], "attempts": 1}
    assert seen["urgent"]["status"] == "SUCCESSFUL"
    assert seen["context"]["value"]["status_seen"] == "RUNNING"
    assert seen["fail"] == {
        "status": "FAILED",
        "value": None,
        "errors": ["builtins.ValueError"],
        "attempts": 1,
    }


EAGER = """
from reports import tasks
result = tasks.add.enqueue(20, 22)
print(result.status, result.return_value)
try:
    tasks.fail.enqueue()
except ValueError as exc:
    print("raised:", exc, tasks.fail.get_result(str(int(result.id) + 1)).status)
"""


def test_pgenough_eager_runs_each_django_task_at_its_enqueue(
    django_python: Path, django_env: dict[str, str]
) -> None:
    """``PGENOUGH_EAGER=1``, as docs/guides/django.md suggests for tests: ``enqueue()`` runs the
    task and returns its finished result; a failing task raises there, its result FAILED."""
    done = manage(django_python, {**django_env, "PGENOUGH_EAGER": "1"}, "shell", "-c", EAGER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-2:] == [
        "SUCCESSFUL 42",
        "raised: This task failed due to ValueError FAILED",
    ]
