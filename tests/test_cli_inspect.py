"""``pgenough status/failures/jobs/job`` and the repairs (``retry``, ``discard``,
``requeue-stuck``) on real jobs in every state; their error lines; and ``pgenough`` on a
database that has only pgenough's schema (no plan service anywhere)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
import typer
from click.testing import Result
from psycopg_pool import AsyncConnectionPool
from typer.testing import CliRunner

from pgenough.cli import app
from pgenough.core import enqueue, get_job
from pgenough.core.admin import list_jobs
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.jsonable import as_json
from pgenough_plans.cli import app as plan_app
from tests.core.test_repair import doomed_and_stuck
from tests.dashboard import scenes
from tests.helpers.procs import ROOT

PGENOUGH = os.path.join(os.path.dirname(sys.executable), "pgenough")
ANSI = "\x1b["
ANSI_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def invoke(database_url: str, *args: str, program: typer.Typer = app) -> Result:
    """The command (``pgenough``'s, or ``program``'s) in this process, as a user would type
    it, against ``database_url``."""
    return CliRunner().invoke(program, list(args), env={"DATABASE_URL": database_url})


async def cli(database_url: str, *args: str, program: typer.Typer = app) -> Result:
    # In a thread: the command runs its own event loop (asyncio.run), as it does for users.
    return await asyncio.to_thread(invoke, database_url, *args, program=program)


async def cli_json(database_url: str, *args: str, program: typer.Typer = app) -> Any:
    result = await cli(database_url, *args, "--json", program=program)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)  # exactly one document, nothing else


def one_error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return lines[0]


def pgenough(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGENOUGH, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


pytestmark = pytest.mark.db


async def test_discard_and_requeue_stuck(db: AsyncConnectionPool, database_url: str) -> None:
    async with db.connection() as conn:
        doomed, stuck = await doomed_and_stuck(conn)

    discarded = await cli_json(database_url, "discard", str(doomed))
    assert (discarded["id"], discarded["state"]) == (doomed, "cancelled")
    assert await cli_json(database_url, "requeue-stuck") == {"retried": 1, "dead": 0}
    again = await cli(database_url, "requeue-stuck")
    assert again.stdout.strip() == "requeued 0 stuck job(s); 0 dead-lettered (attempts spent)"
    async with db.connection() as conn:
        rescued = await get_job(conn, stuck)
    assert rescued is not None and rescued.state == "ready" and rescued.worker is None

    # A cancelled job can still be retried; a retried one is no longer discardable twice over.
    revived = await cli(database_url, "retry", str(doomed))
    assert revived.exit_code == 0 and ": ready" in revived.stdout


async def test_pause_and_resume_a_queue(db: AsyncConnectionPool, database_url: str) -> None:
    async with db.connection() as conn:
        await enqueue(conn, "send", {}, queue="mail")
    paused = await cli_json(database_url, "pause", "mail", "--reason", "provider down")
    assert paused == {"queue": "mail", "paused": True}
    again = await cli(database_url, "pause", "mail")
    assert (again.exit_code, again.stdout.strip()) == (0, "queue mail was already paused")
    (mail,) = [
        q for q in (await cli_json(database_url, "status"))["queues"] if q["queue"] == "mail"
    ]
    assert mail["paused"] is True and mail["ready"] == 1
    status = await cli(database_url, "status")
    assert re.search(r"mail paused\s", status.stdout), status.stdout
    assert await cli_json(database_url, "resume", "mail") == {"queue": "mail", "resumed": True}
    again = await cli(database_url, "resume", "mail")
    assert (again.exit_code, again.stdout.strip()) == (0, "queue mail was not paused")
    (mail,) = [
        q for q in (await cli_json(database_url, "status"))["queues"] if q["queue"] == "mail"
    ]
    assert mail["paused"] is False


async def test_limit_a_queue_across_the_fleet(db: AsyncConnectionPool, database_url: str) -> None:
    async with db.connection() as conn:
        await enqueue(conn, "send", {}, queue="mail")
    set_3 = {"queue": "mail", "max_running": 3, "rate_count": None, "rate_interval": None}
    assert await cli_json(database_url, "limit", "mail", "3") == set_3
    (mail,) = [
        q for q in (await cli_json(database_url, "status"))["queues"] if q["queue"] == "mail"
    ]
    assert mail["max_running"] == 3
    status = await cli(database_url, "status")
    assert re.search(r"mail limit 3\s", status.stdout), status.stdout
    rated = await cli(database_url, "limit", "mail", "--rate", "100/60s")
    assert rated.stdout.strip() == "queue mail: at most 100 start(s) in any 60s across the fleet"
    (mail,) = [
        q for q in (await cli_json(database_url, "status"))["queues"] if q["queue"] == "mail"
    ]
    assert (mail["max_running"], mail["rate_count"], mail["rate_interval"]) == (None, 100, 60.0)
    assert re.search(r"mail rate 100/60s\s", (await cli(database_url, "status")).stdout)
    lifted = await cli(database_url, "limit", "mail", "--off")
    assert (lifted.exit_code, lifted.stdout.strip()) == (0, "queue mail: limits lifted")
    again = await cli(database_url, "limit", "mail", "--off")
    assert again.stdout.strip() == "queue mail had no limits"


async def test_jobs_and_job_show_every_state_as_the_database_has_it(
    db: AsyncConnectionPool, database_url: str
) -> None:
    async with scenes.jobs(db) as s:
        everything = await cli_json(database_url, "jobs")
        assert [j["id"] for j in everything] == s.everything
        async with db.connection() as conn:
            assert everything == as_json(await list_jobs(conn))
        for state, ids in (
            ("ready", [s.scheduled, s.ready]),
            ("running", [s.running]),
            ("dead", [s.dead]),
            ("cancelled", [s.cancelled]),
        ):
            got = await cli_json(database_url, "jobs", "--state", state.upper())
            assert [j["id"] for j in got] == ids, state
        running = await cli_json(database_url, "jobs", "--queue", "slow")
        assert [(j["id"], j["worker"]) for j in running] == [(s.running, s.worker)]
        assert running[0]["lease_until"] is not None
        page = await cli_json(database_url, "jobs", "--limit", "2", "--before", str(s.scheduled))
        assert [j["id"] for j in page] == [s.ready, s.dead]

        dead = await cli_json(database_url, "job", str(s.dead))
        async with db.connection() as conn:
            assert dead == as_json(await get_job(conn, s.dead))
        assert dead["payload"] == scenes.DEAD_PAYLOAD
        assert [(e["attempt"], e["worker"], e["error"]) for e in dead["errors"]] == [
            (1, "flaky-worker", "upstream timed out (retry in 0s)"),
            (2, "flaky-worker", "gave up: upstream said no"),
        ]

        # The tables say the same to a person.
        table = await cli(database_url, "jobs", "--limit", "4")
        assert table.exit_code == 0, table.stderr
        assert re.search(rf"{s.running} +slow +hold +running +1/20 .*{s.worker}", table.stdout)
        assert re.search(r"\d+s left", table.stdout), table.stdout
        assert re.search(rf"{s.scheduled} +ops +noop .* ready .* in [45]m", table.stdout)
        assert f"older jobs: --before {s.ready}" in table.stdout and ANSI not in table.stdout
        shown = await cli(database_url, "job", str(s.dead))
        assert shown.exit_code == 0, shown.stderr
        for line in ("upstream timed out (retry in 0s)", "gave up: upstream said no", "naïve"):
            assert line in shown.stdout
        assert re.search(r"attempts +2 of 5", shown.stdout), shown.stdout
        held = await cli(database_url, "job", str(s.running))
        assert re.search(rf"worker +{s.worker}", held.stdout) and "lease until" in held.stdout


async def test_jobs_filter_by_task_and_payload_text(
    db: AsyncConnectionPool, database_url: str
) -> None:
    async with db.connection() as conn:
        ann = await enqueue(conn, "send_mail", {"to": "Ann@example.com"}, queue="mail")
        bob = await enqueue(conn, "send_mail", {"to": "bob@example.com"}, queue="mail")
        report = await enqueue(conn, "report", {"for": "ann"}, queue="reports")
    mails = await cli_json(database_url, "jobs", "--task", "send_mail")
    assert [j["id"] for j in mails] == [bob, ann]
    anns = await cli_json(database_url, "jobs", "--text", "ANN")
    assert [j["id"] for j in anns] == [report, ann]
    both = await cli_json(database_url, "jobs", "--task", "send_mail", "--text", "ann")
    assert [j["id"] for j in both] == [ann]
    table = await cli(database_url, "jobs", "--task", "report")
    assert table.exit_code == 0, table.stderr
    assert str(report) in table.stdout and str(ann) not in table.stdout


async def test_not_found_is_one_line_and_exit_1(db: AsyncConnectionPool, database_url: str) -> None:
    gone = await cli(database_url, "job", "999999999")
    assert gone.exit_code == 1
    assert one_error_line(gone) == (
        "error: job 999999999 not found (completed jobs are deleted; it may have finished)"
    )
    for command in ("retry", "discard"):
        result = await cli(database_url, command, "999999999")
        assert result.exit_code == 1
        assert one_error_line(result).startswith("error: job 999999999: nothing to ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["jobs", "--state", "done"], "error: --state must be one of ready, running, dead,"),
        (["retry"], "error: give a job ID or --all-dead (exactly one)"),
        (["retry", "7", "--all-dead"], "error: give a job ID or --all-dead (exactly one)"),
        (["retry", "7", "--queue", "plans"], "error: --queue goes with --all-dead"),
        (["pause", " "], "error: give a queue name"),
        (["limit", "mail"], "error: give a limit N, a --rate M/Ts, or --off"),
        (["limit", "mail", "3", "--off"], "error: give a limit N, a --rate M/Ts, or --off"),
        (["limit", "mail", "--rate", "often"], "error: --rate 'often': write it as STARTS/SECO"),
        (["limit", "mail", "--rate", "5/0s"], "error: a rate's seconds must be more than 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    # Refused before any connection: the database URL points nowhere.
    result = invoke("postgresql://nobody@127.0.0.1:1/none", *args)
    assert result.exit_code == 2
    assert one_error_line(result).startswith(message)


def test_a_database_without_the_schema_is_told_to_migrate(server_url: str) -> None:
    name = "pgenough_test_unmigrated"
    create_database(server_url, name)
    url = with_database(server_url, name)
    try:
        for args in (["status"], ["jobs"], ["job", "1"], ["retry", "--all-dead"], ["pause", "q"]):
            result = invoke(url, *args)
            assert result.exit_code == 1
            assert one_error_line(result) == "error: the schema is missing: run `pgenough migrate`"
        plans = CliRunner().invoke(plan_app, ["runs", "--json"], env={"DATABASE_URL": url})
        assert plans.exit_code == 1
        assert one_error_line(plans) == (
            "error: the schema is missing: run `pgenough-plans migrate`"
        )
        with psycopg.connect(url) as conn:  # looking did not migrate
            row = conn.execute("SELECT to_regnamespace('pgenough')").fetchone()
        assert row == (None,)
    finally:
        drop_database(server_url, name)


def test_unreachable_database_is_one_line_fast_and_keeps_the_password(
    worker_env: dict[str, str],
) -> None:
    env = dict(worker_env, DATABASE_URL="postgresql://app:s3cret@127.0.0.1:1/nope")
    for args in (["status", "--json"], ["retry", "--all-dead"]):
        started = time.monotonic()
        result = pgenough(*args, env=env, timeout=30)
        assert time.monotonic() - started < 10
        assert result.returncode == 1
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0] == "error: 127.0.0.1:1: connection refused"
        assert "s3cret" not in result.stderr and "Traceback" not in result.stderr


def test_a_core_only_database_is_all_pgenough_needs(
    server_url: str, worker_env: dict[str, str]
) -> None:
    """Right after ``pgenough migrate`` on a new database, every inspecting command works,
    and nothing of the plan service is there: no schema, no table, no migration track (the
    dashboard's track is pgenough's own: one table in its schema)."""
    name = f"pgenough_test_core_only_{os.getpid()}"
    create_database(server_url, name)
    url = with_database(server_url, name)
    env = dict(worker_env, DATABASE_URL=url)
    try:
        migrated = pgenough("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr
        with psycopg.connect(url, autocommit=True) as conn:
            enqueued = conn.execute(
                "INSERT INTO pgenough.jobs (kind, queue) VALUES ('noop', 'mail') RETURNING id"
            ).fetchone()
            assert enqueued is not None
            schemas = {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}
            tracks = {r[0] for r in conn.execute("SELECT track FROM pgenough.schema_migrations")}
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'pgenough'"
                )
            }
        assert "plans" not in schemas and tracks == {"core", "ui"}
        assert tables == {
            "jobs",
            "messages",
            "periodic",
            "schema_migrations",
            "workers",
            "job_counts",
            "queue_samples",
            "queue_pauses",
            "queue_limits",
            "queue_starts",
            "ui_revoked_sessions",
        }
        status = pgenough("status", env=env)
        assert status.returncode == 0, status.stderr
        assert re.search(r"mail +1 +0 +0 +0", status.stdout), status.stdout
        assert "failures in the last 1h" in status.stdout
        as_json_doc = json.loads(pgenough("status", "--json", env=env).stdout)
        assert [q["queue"] for q in as_json_doc["queues"]] == ["mail"]
        assert (as_json_doc["workers"], as_json_doc["periodic"]) == ([], [])
        assert "none running: `pgenough worker run module:app` starts one" in status.stdout
        for args in (["jobs"], ["failures"], ["job", str(enqueued[0])]):
            result = pgenough(*args, env=env)
            assert result.returncode == 0, (args, result.stderr)
    finally:
        drop_database(server_url, name)


def test_the_help_names_only_pgenoughs_commands(worker_env: dict[str, str]) -> None:
    shown = pgenough("--help", env=worker_env)
    assert shown.returncode == 0
    commands = set(re.findall(r"^│ (\S+) ", shown.stdout, re.MULTILINE))
    assert {"migrate", "worker", "status", "jobs", "job", "retry"} <= commands, shown.stdout
    assert not {"demo", "api", "provider-sim", "runs", "run", "fetch"} & commands
    for plan_word in ("plan service", "/search", "provider", "snapshot"):
        assert plan_word not in shown.stdout, plan_word
    worker = pgenough("worker", "--help", env=worker_env)
    listed = re.findall(r"^│ (\S+) ", worker.stdout, re.MULTILINE)
    assert "run" in listed and not {"fetch", "process"} & set(listed), worker.stdout
