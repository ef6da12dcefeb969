"""``pgenough status/runs/run/failures/jobs/job`` and the repairs, on real ingestions and real
failures; their error lines; and the worker commands' progress displays (only for a terminal)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from click.testing import Result
from psycopg_pool import AsyncConnectionPool
from typer.testing import CliRunner

from pgenough.cli import app
from pgenough.core import enqueue, get_job, list_jobs
from pgenough.core.db import create_database, drop_database, with_database
from pgenough.jsonable import as_json
from pgenough.sim.server import SimServer
from tests.helpers.procs import ROOT
from tests.plans.pipeline import break_chunks, fetch, heal_chunks, ingest, process
from tests.ui import scenes

PGENOUGH = os.path.join(os.path.dirname(sys.executable), "pgenough")
ANSI = "\x1b["
ANSI_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def invoke(database_url: str, *args: str) -> Result:
    """The command in this process, as a user would type it, against ``database_url``."""
    return CliRunner().invoke(app, list(args), env={"DATABASE_URL": database_url})


async def cli(database_url: str, *args: str) -> Result:
    # In a thread: the command runs its own event loop (asyncio.run), as it does for users.
    return await asyncio.to_thread(invoke, database_url, *args)


async def cli_json(database_url: str, *args: str) -> Any:
    result = await cli(database_url, *args, "--json")
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


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(plans=1_500, seed=11) as server:
        yield server


@pytest.fixture
async def broken_chunks(db: AsyncConnectionPool) -> AsyncIterator[None]:
    await break_chunks(db)
    yield
    await heal_chunks(db)


pytestmark = pytest.mark.db


async def test_inspect_commands_show_a_real_ingestion(
    db: AsyncConnectionPool, sim: SimServer, database_url: str
) -> None:
    ok = await ingest(db, f"{sim.url}?version=1&fault=malformed:0.05", name="alpha")
    bad = await fetch(db, f"{sim.url}?fault=404", name="beta")

    status = await cli_json(database_url, "status")
    alpha, beta = status["providers"]
    assert (alpha["provider"], alpha["last_run_id"], alpha["last_status"]) == (
        "alpha",
        ok.run_id,
        "PROCESSED",
    )
    assert (alpha["plans_staged"], alpha["plans_skipped"], alpha["plans_written"]) == (
        ok.plans_staged,
        ok.plans_skipped,
        ok.plans_staged,
    )
    assert alpha["plans_skipped"] > 0 and alpha["throughput"] > 0
    assert (beta["last_run_id"], beta["last_status"]) == (bad.run_id, "FAILED")
    assert "404" in beta["last_reason"] and beta["last_success_at"] is None
    assert status["failures"]["runs_failed"] == 1
    assert sum(p["plans"] for p in status["throughput"]) == ok.plans_staged

    runs = await cli_json(database_url, "runs")
    assert [r["id"] for r in runs] == [bad.run_id, ok.run_id]
    assert runs[1]["bytes"] == ok.bytes and runs[1]["chunks_done"] == runs[1]["chunks_total"]
    failed = await cli_json(database_url, "runs", "--failed")
    assert [(r["id"], r["status"]) for r in failed] == [(bad.run_id, "FAILED")]
    assert "HTTP 404" in failed[0]["reason"]
    assert [r["id"] for r in await cli_json(database_url, "runs", "--provider", "alpha")] == [
        ok.run_id
    ]
    assert [r["id"] for r in await cli_json(database_url, "runs", "--status", "processed")] == [
        ok.run_id
    ]
    assert [r["id"] for r in await cli_json(database_url, "runs", "--before", str(bad.run_id))] == [
        ok.run_id
    ]
    assert len(await cli_json(database_url, "runs", "--limit", "1")) == 1

    detail = await cli_json(database_url, "run", str(ok.run_id))
    assert (detail["id"], detail["status"], detail["plans_staged"]) == (
        ok.run_id,
        "PROCESSED",
        ok.plans_staged,
    )
    assert [a["status"] for a in detail["attempts"]] == [200]
    assert detail["skip_samples"] and all(s["reason"] for s in detail["skip_samples"])
    assert detail["jobs"] == [] and detail["row_failures"] == []

    failures = await cli_json(database_url, "failures")
    assert failures["jobs"] == []
    assert [(r["id"], r["reason"]) for r in failures["runs"]] == [(bad.run_id, failed[0]["reason"])]

    # The tables say the same to a person.
    table = await cli(database_url, "status")
    assert table.exit_code == 0, table.stderr
    assert re.search(rf"alpha +{ok.run_id} +PROCESSED", table.stdout), table.stdout
    assert re.search(rf"beta +{bad.run_id} +FAILED", table.stdout), table.stdout
    assert f"{ok.plans_staged:,}" in table.stdout and "HTTP 404" in table.stdout
    assert "failures in the last 1h" in table.stdout and ANSI not in table.stdout
    shown = await cli(database_url, "run", str(ok.run_id))
    assert "HTTP attempts" in shown.stdout and "skipped records" in shown.stdout
    listed = await cli(database_url, "runs", "--failed")
    assert "HTTP 404" in listed.stdout and "alpha" not in listed.stdout


async def test_a_dead_chunk_is_shown_retried_from_the_cli_and_its_run_completes(
    db: AsyncConnectionPool, sim: SimServer, database_url: str, broken_chunks: None
) -> None:
    staged = await fetch(db, f"{sim.url}?version=1")
    async with db.connection() as conn:
        await conn.execute("UPDATE pgenough.jobs SET max_attempts = 1")  # dead at once
    await process(db)

    failures = await cli_json(database_url, "failures", "--queue", "plans")
    dead = failures["jobs"]
    assert len(dead) > 1 and {j["state"] for j in dead} == {"dead"}
    assert all("disk full (test)" in j["last_error"] for j in dead)
    assert (await cli_json(database_url, "failures", "--queue", "other"))["jobs"] == []
    run = await cli_json(database_url, "run", str(staged.run_id))
    assert run["status"] == "STAGED"
    assert {j["id"] for j in run["jobs"]} == {j["id"] for j in dead}
    status = await cli_json(database_url, "status")
    assert status["failures"]["jobs_dead"] == len(dead)
    assert [q["dead"] for q in status["queues"] if q["queue"] == "plans"] == [len(dead)]
    table = await cli(database_url, "failures")
    assert "disk full (test)" in table.stdout and "dead" in table.stdout

    await heal_chunks(db)
    first = await cli(database_url, "retry", str(dead[0]["id"]))
    assert first.exit_code == 0, first.stderr
    assert first.stdout.startswith(f"retried job {dead[0]['id']} (plans/apply_chunk): ready")
    rest = await cli_json(database_url, "retry", "--all-dead", "--queue", "plans")
    assert rest == {"retried": len(dead) - 1, "queue": "plans"}
    await process(db)

    run = await cli_json(database_url, "run", str(staged.run_id))
    assert (run["status"], run["jobs"], run["plans_written"]) == (
        "PROCESSED",
        [],
        staged.plans_staged,
    )
    assert (await cli_json(database_url, "failures"))["jobs"] == []


async def test_discard_and_requeue_stuck(db: AsyncConnectionPool, database_url: str) -> None:
    async with db.connection() as conn:
        doomed = await enqueue(conn, "noop", queue="ops")
        stuck = await enqueue(conn, "noop", queue="ops")
        assert doomed is not None and stuck is not None
        # What a worker killed mid-job leaves behind: a claim whose lease has run out.
        await conn.execute(
            "UPDATE pgenough.jobs SET state = 'running', attempts = 1, worker = 'gone',"
            " claimed_at = now() - interval '2 min', lease_until = now() - interval '1 min'"
            " WHERE id = %s",
            (stuck,),
        )

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
        assert re.search(rf"{s.running} +slow +hold +- +running +1/20 .*{s.worker}", table.stdout)
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


async def test_not_found_is_one_line_and_exit_1(db: AsyncConnectionPool, database_url: str) -> None:
    missing = await cli(database_url, "run", "999999999", "--json")
    assert missing.exit_code == 1
    assert one_error_line(missing) == "error: run 999999999 not found"
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
        (["runs", "--status", "DONE"], "error: --status must be one of RUNNING, STAGED,"),
        (["runs", "--failed", "--status", "staged"], "error: --failed and --status disagree"),
        (["jobs", "--state", "done"], "error: --state must be one of ready, running, dead,"),
        (["retry"], "error: give a job ID or --all-dead (exactly one)"),
        (["retry", "7", "--all-dead"], "error: give a job ID or --all-dead (exactly one)"),
        (["retry", "7", "--queue", "plans"], "error: --queue goes with --all-dead"),
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
        for args in (
            ["status"],
            ["runs", "--json"],
            ["jobs"],
            ["job", "1"],
            ["retry", "--all-dead"],
        ):
            result = invoke(url, *args)
            assert result.exit_code == 1
            assert one_error_line(result) == (
                "error: pgenough's schema is missing: run `pgenough migrate`"
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


def test_progress_is_drawn_only_for_a_terminal(
    db: object, sim: SimServer, worker_env: dict[str, str]
) -> None:
    url = f"{sim.url}?version=1"
    piped = pgenough("worker", "fetch", "--once", "--provider", f"piped={url}", env=worker_env)
    assert piped.returncode == 0, piped.stderr
    drained = pgenough("worker", "process", "--until-idle", env=worker_env)
    assert drained.returncode == 0, drained.stderr
    for result in (piped, drained):
        assert ANSI not in result.stderr + result.stdout
        assert "fetch piped" not in result.stderr and " left, " not in result.stderr
    status = pgenough("status", "--json", env=worker_env)
    assert json.loads(status.stdout)["providers"][0]["last_status"] == "PROCESSED"

    forced = dict(worker_env, PGENOUGH_FORCE_PROGRESS="1")
    shown = pgenough("worker", "fetch", "--once", "--provider", f"shown={url}", env=forced)
    assert shown.returncode == 0, shown.stderr
    assert "fetch shown" in shown.stderr and "plans staged" in shown.stderr
    assert ANSI not in shown.stdout and "STAGED" in shown.stdout  # the table, untouched
    bar = pgenough("worker", "process", "--until-idle", env=forced)
    assert bar.returncode == 0, bar.stderr
    assert "process" in bar.stderr and " left, " in bar.stderr
    assert re.search(r"(\d+)/\1 chunks, 0 left", ANSI_CODES.sub("", bar.stderr)), bar.stderr
    assert bar.stdout.startswith("chunks applied: ")
    forced_json = pgenough("status", "--json", env=forced)
    assert json.loads(forced_json.stdout)["providers"][1]["provider"] == "shown"
