"""The plan service's log lines carry the run and job they are about, as text or JSON, and
never a database password."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.logs import ContextFilter, JsonFormatter
from pgenough_plans.sim.server import SimServer
from tests.plan_service.ingest.pipeline import fetch, process
from tests.plan_service.test_commands import plans
from tests.test_logs import PASSWORD

LOGGERS = ("pgenough", "pgenough_plans")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """JSON lines of every pgenough and plan service logger, as the CLI's handler writes
    them."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    loggers = [logging.getLogger(name) for name in LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield stream
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.db
async def test_fetch_and_process_lines_carry_the_run_and_the_job(
    db: AsyncConnectionPool, captured: io.StringIO
) -> None:
    with SimServer(plans=500, seed=3) as sim:
        sim.set_faults(["503", "ok"])
        result = await fetch(db, f"{sim.url}?version=1", "logged")
    await process(db)
    entries = lines(captured)
    fetched = [e for e in entries if e["logger"] == "pgenough_plans.ingest.fetch"]
    assert len(fetched) >= 2  # "fetching" and "STAGED"
    assert all(e["run_id"] == result.run_id and e["provider"] == "logged" for e in fetched)
    processed = [e for e in entries if "PROCESSED" in str(e["message"])]
    assert len(processed) == 1
    assert processed[0]["run_id"] == result.run_id
    assert processed[0]["queue"] == "plans" and isinstance(processed[0]["job_id"], int)
    # Outside the run, the test's own lines carry nothing of it.
    logging.getLogger("pgenough.test").warning("after")
    assert "run_id" not in lines(captured)[-1]


def test_a_password_in_database_url_is_never_logged(worker_env: dict[str, str]) -> None:
    urls = [
        f"postgresql://app:{PASSWORD}@127.0.0.1:1/nope?connect_timeout=2",
        f"host=127.0.0.1 port=1 user=app password={PASSWORD} connect_timeout=2",
        f"postgresql//app:{PASSWORD}@127.0.0.1:1/nope",  # unparsable: libpq quotes it
    ]
    commands = [["migrate"], ["worker", "process", "--until-idle"], ["api", "--port", "0"]]
    for url in urls:
        env = dict(worker_env, DATABASE_URL=url, PGENOUGH_LOG_LEVEL="DEBUG")
        for command in commands:
            result = plans("--log-format", "json", *command, env=env)
            assert result.returncode != 0, (url, command)
            assert PASSWORD not in result.stdout + result.stderr, (url, command, result.stderr)


@pytest.mark.db
def test_json_lines_of_a_real_fetch_carry_the_run_id(worker_env: dict[str, str]) -> None:
    with SimServer(plans=300, seed=5) as sim:
        env = dict(worker_env, PGENOUGH_LOG_FORMAT="text")  # the option beats the setting
        result = plans(
            "--log-format",
            "json",
            "worker",
            "fetch",
            "--once",
            "--provider",
            f"cli-json={sim.url}?version=1",
            env=env,
        )
    assert result.returncode == 0, result.stderr
    entries = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    fetched = [e for e in entries if e["logger"] == "pgenough_plans.ingest.fetch"]
    assert fetched and all(isinstance(e["run_id"], int) for e in fetched), entries
    assert all(e["provider"] == "cli-json" for e in fetched)
    assert {"ts", "level", "logger", "message"} <= set(fetched[0])


@pytest.mark.db
def test_the_setting_selects_json(worker_env: dict[str, str]) -> None:
    # A real fetch: it logs lines of its own (the event loop may log none: uvloop is silent).
    with SimServer(plans=50, seed=6) as sim:
        env = dict(worker_env, PGENOUGH_LOG_FORMAT="json", PGENOUGH_LOG_LEVEL="DEBUG")
        result = plans(
            "worker", "fetch", "--once", "--provider", f"setting-json={sim.url}", env=env
        )
    assert result.returncode == 0, result.stderr
    logged = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    assert any(e["logger"] == "pgenough_plans.ingest.fetch" for e in logged), result.stderr
    assert all(e["level"] for e in logged)
