"""``pgenough.contrib.django`` in a real project (``project/``), on Django 5.2 and 6: the
schema comes with ``manage.py migrate`` (so ``manage.py test`` has it), and ``manage.py
pgenough worker`` runs the installed apps' tasks on the ``DATABASES`` alias."""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgenough.contrib.django.backend import PRUNE_KIND
from pgenough.contrib.django.schema import MIGRATIONS
from pgenough.core.migrations import CORE, available
from tests.contrib.django.conftest import PROBE_NAME, DjangoProject
from tests.helpers.procs import wait_for

pytestmark = [pytest.mark.db, pytest.mark.slow]

BOGUS_URL = "postgresql://nobody@bogus.invalid:5999/elsewhere"
"""Where DATABASE_URL points for the worker: a worker that read it could not connect."""


def migrated(project: DjangoProject) -> DjangoProject:
    done = project.manage("migrate", "--noinput")
    assert done.returncode == 0, done.stderr
    return project


def enqueue(project: DjangoProject, *calls: str) -> None:
    """Orders and their jobs, from ``manage.py shell`` (each call a line of Python)."""
    code = "\n".join(
        [
            "from pgenough.core.orm import django_connection as conn",
            "from shop.models import Order",
            "from shop.tasks import send_receipt, ship, slow_receipt",
            *calls,
        ]
    )
    done = project.manage("shell", "-c", code)
    assert done.returncode == 0, done.stderr


def orders(project: DjangoProject) -> list[tuple[int, bool, int]]:
    return [
        (r[0], r[1], r[2])
        for r in project.sql("SELECT id, shipped, receipts FROM shop_order ORDER BY id")
    ]


def jobs(project: DjangoProject) -> list[tuple[str, str]]:
    """The project's jobs, but for the django.tasks backend's hourly pruning, which a worker's
    first period enqueues and which may still be queued when an ``--until-idle`` run ends."""
    rows = project.sql(
        "SELECT queue, kind FROM pgenough.jobs WHERE kind <> %s ORDER BY id", [PRUNE_KIND]
    )
    return [(r[0], r[1]) for r in rows]


def test_migrate_creates_the_schema_and_a_second_run_is_a_no_op(
    django_project: DjangoProject,
) -> None:
    migrated(django_project)
    versions = django_project.sql(
        "SELECT track, max(version) FROM pgenough.schema_migrations GROUP BY 1 ORDER BY 1"
    )
    assert versions == [(t.track, available(t)[-1].version) for t in (CORE, *MIGRATIONS)]
    again = django_project.manage("migrate", "--noinput")
    assert again.returncode == 0, again.stderr
    assert "No migrations to apply" in again.stdout
    check = django_project.manage("makemigrations", "--check", "--dry-run")
    assert check.returncode == 0, check.stdout + check.stderr
    # Unapplying leaves the queue's schema (and its jobs) in place, as documented.
    zero = django_project.manage("migrate", "pgenough", "zero", "--noinput")
    assert zero.returncode == 0, zero.stderr
    assert django_project.sql("SELECT to_regclass('pgenough.jobs') IS NOT NULL") == [(True,)]


def test_the_projects_own_tests_pass(django_project: DjangoProject) -> None:
    """``shop/tests.py``: enqueue in a TestCase (the test database has the schema), job iff
    commit, the async view, the admin's pages and its permissions."""
    done = django_project.manage("test", "shop", "--noinput", "-v", "2")
    assert done.returncode == 0, done.stderr
    assert "Ran 12 tests" in done.stderr
    assert "OK" in done.stderr


@pytest.mark.parametrize("database_url", [BOGUS_URL, None], ids=["bogus", "unset"])
def test_the_worker_runs_the_discovered_tasks_on_the_databases_alias(
    django_project: DjangoProject, database_url: str | None
) -> None:
    """Plain-function and async tasks of shop/tasks.py, found by discovery; the connection is
    DATABASES["default"]'s whatever DATABASE_URL says, and never an embedded server."""
    migrated(django_project)
    enqueue(
        django_project,
        "for _ in range(3):",
        "    o = Order.objects.create(email='a@example.com', total_cents=1)",
        "    send_receipt.enqueue(conn(), order_id=o.id)",
        "    ship.enqueue(conn(), order_id=o.id)",
    )
    env = dict(django_project.env)
    env.pop("DATABASE_URL")
    if database_url:
        env["DATABASE_URL"] = database_url
    done = django_project.manage("pgenough", "worker", "--until-idle", env=env)
    assert done.returncode == 0, done.stderr
    assert "6 job(s) completed" in done.stderr
    # PGENOUGH["CONCURRENCY"], on the app's queues and the django.tasks backend's (reports).
    assert "queues default (4), emails (4), reports (4), slow (4)" in done.stderr
    assert [(shipped, receipts) for _, shipped, receipts in orders(django_project)] == [
        (True, 1)
    ] * 3
    assert jobs(django_project) == []


def test_the_worker_honours_its_options(django_project: DjangoProject) -> None:
    migrated(django_project)
    enqueue(
        django_project,
        "o = Order.objects.create(email='a@example.com', total_cents=1)",
        "send_receipt.enqueue(conn(), order_id=o.id)",
        "ship.enqueue(conn(), order_id=o.id)",
    )
    done = django_project.manage(
        *("pgenough", "worker", "--until-idle", "--queue", "emails=3", "-q", "slow"),
        *("--concurrency", "2", "--batch-size", "5", "--shutdown-timeout", "1"),
    )
    assert done.returncode == 0, done.stderr
    assert "queues emails (3), slow (2); batch size 5" in done.stderr
    assert [(s, r) for _, s, r in orders(django_project)] == [(False, 1)]
    assert jobs(django_project) == [("default", "shop.tasks.ship")]


def test_djangos_own_options_are_taken_after_worker_too(
    django_project: DjangoProject, tmp_path: Path
) -> None:
    """``--settings``, ``--pythonpath``, ``-v``... as Django users put them: last."""
    migrated(django_project)
    enqueue(
        django_project,
        "o = Order.objects.create(email='a@example.com', total_cents=1)",
        "send_receipt.enqueue(conn(), order_id=o.id)",
    )
    (tmp_path / "other_settings.py").write_text(
        "from proj.settings import *\nPGENOUGH = {**PGENOUGH, 'CONCURRENCY': 3}\n"
    )
    django = ("--settings", "other_settings", "--pythonpath", str(tmp_path))
    for args in [
        ("worker", "--until-idle", "-q", "emails", *django, "-v", "2", "--traceback"),
        (*django, "--no-color", "worker", "--until-idle", "-q", "emails"),
    ]:
        done = django_project.manage("pgenough", *args)
        assert done.returncode == 0, done.stderr
        assert "queues emails (3)" in done.stderr  # other_settings' concurrency
    assert [r for _, _, r in orders(django_project)] == [1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: '0' is out of range (1 to 10000)"),
        (["--batch-size", "x"], "argument --batch-size: 'x' is not a number"),
        (["--shutdown-timeout", "inf"], "argument --shutdown-timeout: 'inf' is out of range"),
        (["--queue", "emails=0"], "the concurrency must be 1 to 10000"),
        (["-q", "emails", "-q", "emails"], "give each queue once"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    django_project: DjangoProject, args: list[str], message: str
) -> None:
    done = django_project.manage("pgenough", "worker", *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_an_unmigrated_or_unreachable_database_is_one_line_and_exit_1(
    django_project: DjangoProject,
) -> None:
    done = django_project.manage("pgenough", "worker", "--until-idle")
    assert done.returncode == 1, done.stderr
    assert "run `manage.py migrate`" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    env = {**django_project.env, "PROJECT_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    done = django_project.manage("pgenough", "worker", "--until-idle", env=env)
    assert done.returncode == 1, done.stderr
    assert "127.0.0.1:1: connection refused" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_sigterm_mid_task_lets_a_plain_function_finish_once(
    django_project: DjangoProject,
) -> None:
    migrated(django_project)
    enqueue(
        django_project,
        "o = Order.objects.create(email='a@example.com', total_cents=1)",
        "slow_receipt.enqueue(conn(), order_id=o.id, seconds=2.0)",
    )
    worker = django_project.start("pgenough", "worker", "-q", "slow", "--shutdown-timeout", "10")
    try:
        worker.expect(lambda line: "slow_receipt" in line and "started" in line, timeout=60)
        worker.popen.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, "\n".join(worker.lines)
    finally:
        worker.kill()
    assert [r for _, _, r in orders(django_project)] == [1]
    assert jobs(django_project) == []
    again = django_project.manage("pgenough", "worker", "--until-idle", "-q", "slow")
    assert again.returncode == 0, again.stderr
    assert [r for _, _, r in orders(django_project)] == [1]


def test_a_plain_function_leaves_no_django_connection_open_and_metrics_are_served(
    django_project: DjangoProject,
) -> None:
    """Django's connection of a worker thread is closed after each job
    (``close_old_connections``, CONN_MAX_AGE 0), not kept for the next one to reuse."""
    migrated(django_project)
    worker = django_project.start(
        *("pgenough", "worker", "-q", "emails", "--concurrency", "1", "--metrics-port", "0")
    )
    try:
        metrics = worker.expect(lambda line: line.startswith("metrics at http://"), timeout=60)
        worker.expect(lambda line: "queues emails (1)" in line, timeout=60)
        enqueue(
            django_project,
            "o = Order.objects.create(email='a@example.com', total_cents=1)",
            "send_receipt.enqueue(conn(), order_id=o.id)",
        )
        wait_for(lambda: [r for _, _, r in orders(django_project)] == [1], what="the receipt")
        wait_for(lambda: jobs(django_project) == [], what="the job's completion")
        # A connection closed a moment ago (the enqueue's subprocess) may still be listed
        # while its backend exits; one the worker kept open stays listed.
        wait_for(
            lambda: (
                django_project.sql(
                    "SELECT application_name, backend_type, state, query FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND application_name NOT LIKE '%%worker-%%' AND application_name <> %s",
                    [PROBE_NAME],
                )
                == []
            ),
            what="only the worker's own connections",
        )
        with urllib.request.urlopen(metrics.removeprefix("metrics at "), timeout=10) as page:
            assert b"pgenough_" in page.read()
    finally:
        worker.popen.send_signal(signal.SIGTERM)
        worker.wait(60)
        worker.kill()


def test_the_worker_connects_through_a_libpq_service(
    django_project: DjangoProject, tmp_path: Path
) -> None:
    """``OPTIONS = {"service": ..., "sslmode": ...}`` and no HOST or NAME: the worker's
    connection is what Django's own is (proj/settings_service.py)."""
    migrated(django_project)
    enqueue(
        django_project,
        "o = Order.objects.create(email='a@example.com', total_cents=1)",
        "send_receipt.enqueue(conn(), order_id=o.id)",
    )
    params = conninfo_to_dict(django_project.url)
    services = tmp_path / "pg_service.conf"
    services.write_text(
        "[shop]\n" + "".join(f"{k}={v}\n" for k, v in params.items() if k != "sslmode")
    )
    env = {
        **django_project.env,
        "DATABASE_URL": BOGUS_URL,
        "PGSERVICEFILE": str(services),
        "DJANGO_SETTINGS_MODULE": "proj.settings_service",
    }
    done = django_project.manage("pgenough", "worker", "--until-idle", env=env)
    assert done.returncode == 0, done.stderr
    assert [r for _, _, r in orders(django_project)] == [1]
    check = django_project.manage("check", env={**env, "SHOP_QUEUE_ALIAS": "lite"})
    assert check.returncode == 1
    assert "pgenough.E001" in check.stderr
    for alias, message in [
        ("lite", "pgenough needs PostgreSQL; DATABASES['lite'] is sqlite"),
        ("nosuch", "DATABASES has no alias 'nosuch'"),
    ]:
        done = django_project.manage(
            "pgenough", "worker", "--until-idle", env={**env, "SHOP_QUEUE_ALIAS": alias}
        )
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
