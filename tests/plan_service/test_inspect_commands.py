"""``pgenough-plans status/runs/run/failures`` on real ingestions and real failures, with
``pgenough``'s own repairs of the plans queue's jobs; and the worker commands' progress
displays (only for a terminal)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from click.testing import Result
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.cli import app
from pgenough_plans.sim.server import SimServer
from tests.plan_service.ingest.pipeline import break_chunks, fetch, heal_chunks, ingest, process
from tests.plan_service.test_commands import plans
from tests.test_cli_inspect import ANSI, ANSI_CODES, one_error_line
from tests.test_cli_inspect import cli as pgenough_cli
from tests.test_cli_inspect import cli_json as pgenough_json
from tests.test_cli_inspect import invoke as base_invoke


def invoke(database_url: str, *args: str) -> Result:
    """``pgenough-plans *args`` in this process, against ``database_url``."""
    return base_invoke(database_url, *args, program=app)


async def cli(database_url: str, *args: str) -> Result:
    return await pgenough_cli(database_url, *args, program=app)


async def cli_json(database_url: str, *args: str) -> Any:
    return await pgenough_json(database_url, *args, program=app)


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

    failures = await cli_json(database_url, "failures")
    dead = failures["jobs"]
    assert len(dead) > 1 and {j["state"] for j in dead} == {"dead"}
    assert all("disk full (test)" in j["last_error"] for j in dead)
    every_queue = await pgenough_json(database_url, "failures", "--queue", "plans")
    assert every_queue["jobs"] == dead
    assert (await pgenough_json(database_url, "failures", "--queue", "other"))["jobs"] == []
    run = await cli_json(database_url, "run", str(staged.run_id))
    assert run["status"] == "STAGED"
    assert {j["id"] for j in run["jobs"]} == {j["id"] for j in dead}
    status = await cli_json(database_url, "status")
    assert status["failures"]["jobs_dead"] == len(dead)
    assert [q["dead"] for q in status["queues"] if q["queue"] == "plans"] == [len(dead)]
    table = await cli(database_url, "failures")
    assert "disk full (test)" in table.stdout and "dead" in table.stdout

    await heal_chunks(db)
    first = await pgenough_cli(database_url, "retry", str(dead[0]["id"]))
    assert first.exit_code == 0, first.stderr
    assert first.stdout.startswith(f"retried job {dead[0]['id']} (plans/apply_chunk): ready")
    rest = await pgenough_json(database_url, "retry", "--all-dead", "--queue", "plans")
    assert rest == {"retried": len(dead) - 1, "queue": "plans"}
    await process(db)

    run = await cli_json(database_url, "run", str(staged.run_id))
    assert (run["status"], run["jobs"], run["plans_written"]) == (
        "PROCESSED",
        [],
        staged.plans_staged,
    )
    assert (await cli_json(database_url, "failures"))["jobs"] == []


def test_progress_is_drawn_only_for_a_terminal(
    db: object, sim: SimServer, worker_env: dict[str, str]
) -> None:
    url = f"{sim.url}?version=1"
    piped = plans("worker", "fetch", "--once", "--provider", f"piped={url}", env=worker_env)
    assert piped.returncode == 0, piped.stderr
    drained = plans("worker", "process", "--until-idle", env=worker_env)
    assert drained.returncode == 0, drained.stderr
    for result in (piped, drained):
        assert ANSI not in result.stderr + result.stdout
        assert "fetch piped" not in result.stderr and " left, " not in result.stderr
    status = plans("status", "--json", env=worker_env)
    assert json.loads(status.stdout)["providers"][0]["last_status"] == "PROCESSED"

    forced = dict(worker_env, PGENOUGH_FORCE_PROGRESS="1")
    shown = plans("worker", "fetch", "--once", "--provider", f"shown={url}", env=forced)
    assert shown.returncode == 0, shown.stderr
    assert "fetch shown" in shown.stderr and "plans staged" in shown.stderr
    assert ANSI not in shown.stdout and "STAGED" in shown.stdout  # the table, untouched
    bar = plans("worker", "process", "--until-idle", env=forced)
    assert bar.returncode == 0, bar.stderr
    assert "process" in bar.stderr and " left, " in bar.stderr
    assert re.search(r"(\d+)/\1 chunks, 0 left", ANSI_CODES.sub("", bar.stderr)), bar.stderr
    assert bar.stdout.startswith("chunks applied: ")
    forced_json = plans("status", "--json", env=forced)
    assert json.loads(forced_json.stdout)["providers"][1]["provider"] == "shown"


async def test_not_found_is_one_line_and_exit_1(db: AsyncConnectionPool, database_url: str) -> None:
    missing = await cli(database_url, "run", "999999999", "--json")
    assert missing.exit_code == 1
    assert one_error_line(missing) == "error: run 999999999 not found"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["runs", "--status", "DONE"], "error: --status must be one of RUNNING, STAGED,"),
        (["runs", "--failed", "--status", "staged"], "error: --failed and --status disagree"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    # Refused before any connection: the database URL points nowhere.
    result = invoke("postgresql://nobody@127.0.0.1:1/none", *args)
    assert result.exit_code == 2
    assert one_error_line(result).startswith(message)
