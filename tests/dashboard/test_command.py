"""``pgenough dashboard``: the dashboard on its own server, as a user runs it (the installed
entry point, a process of its own), on a fresh database migrated by ``pgenough migrate``
alone: it serves the queue's pages at its root, and leaves no application's table behind;
its settings' errors are one line; a stop ends its live streams and exits 0."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from pgenough.core.db import create_database, drop_database, with_database
from tests.dashboard.helpers import csrf_of, html, text
from tests.helpers.netproxy import free_port
from tests.helpers.procs import ROOT, Proc

pytestmark = pytest.mark.db

PGENOUGH = str(Path(sys.executable).with_name("pgenough"))


def pgenough(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGENOUGH, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def fresh_env(server_url: str, worker_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The environment of a new database, not migrated yet."""
    name = f"pgenough_dash_{uuid.uuid4().hex[:10]}"
    create_database(server_url, name)
    try:
        yield dict(worker_env, DATABASE_URL=with_database(server_url, name))
    finally:
        drop_database(server_url, name)


def test_it_serves_the_queues_pages_on_a_core_only_database(fresh_env: dict[str, str]) -> None:
    url = fresh_env["DATABASE_URL"]
    migrated = pgenough("migrate", env=fresh_env)
    assert migrated.returncode == 0, migrated.stderr
    assert "applied ui/0001_revoked_sessions" in migrated.stdout
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgenough.jobs (kind, queue, payload, state, finished_at, attempts,"
            " last_error, errors) VALUES ('send_mail', 'mail', '{\"to\": \"ann\"}', 'dead',"
            " now(), 1, 'Boom: no SMTP', jsonb_build_array(jsonb_build_object('attempt', 1,"
            " 'at', now(), 'error', 'Boom: no SMTP', 'traceback', 'Traceback ... Boom')))"
            " RETURNING id"
        ).fetchone()
    assert row is not None
    port = free_port()
    env = dict(fresh_env, PGENOUGH_UI_ACTIONS="1", PGENOUGH_DASHBOARD_PORT=str(port))
    server = Proc.pgenough(env, "dashboard")
    try:
        server.expect(lambda line: f"dashboard at http://127.0.0.1:{port}/" in line)
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=20) as client:
            overview = html(client.get("/"))
            assert 'href="/jobs?queue=mail"' in overview and 'data-base=""' in overview
            assert "mail 0 0 0 1" in text(overview)
            failures = html(client.get("/failures"))
            assert "Boom: no SMTP" in failures
            assert "Traceback ... Boom" in html(client.get(f"/jobs/{row[0]}"))
            assert client.get("/static/live.js").status_code == 200
            retried = client.post(
                "/jobs/retry", data={"csrf": csrf_of(failures), "ids": str(row[0])}
            )
            assert retried.status_code == 303 and retried.headers["location"] == "/"
            assert "1 job will run again now" in client.get("/").text
            with client.stream("GET", "/events") as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                # Stopped with a browser still following: the stream ends, the server exits.
                server.popen.send_signal(signal.SIGTERM)
                assert server.wait(30) == 0
    finally:
        server.kill()
    with psycopg.connect(url) as conn:
        schemas = {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}
        tracks = {r[0] for r in conn.execute("SELECT track FROM pgenough.schema_migrations")}
        state = conn.execute("SELECT state::text FROM pgenough.jobs").fetchone()
    assert "plans" not in schemas and tracks == {"core", "ui"}
    assert state == ("ready",)


def test_it_migrates_a_new_database_itself(fresh_env: dict[str, str]) -> None:
    port = free_port()
    server = Proc.pgenough(fresh_env, "dashboard", "--port", str(port), "--host", "127.0.0.1")
    try:
        server.expect(lambda line: "dashboard at " in line)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            assert "No jobs queued." in html(client.get("/"))
        server.popen.send_signal(signal.SIGINT)
        assert server.wait(30) == 0
    finally:
        server.kill()


def test_bad_settings_and_a_busy_port_are_one_line(worker_env: dict[str, str]) -> None:
    env = dict(worker_env, PGENOUGH_UI_ALLOWED_HOSTS="dash.example.com, http://x")
    result = pgenough("dashboard", "--port", "0", env=env)
    assert result.returncode == 2
    assert one_error_line(result) == (
        "error: invalid configuration: ui_allowed_hosts: 'http://x' is not a host name"
        " (comma-separated names, or * for any)"
    )
    result = pgenough("dashboard", env=dict(worker_env, PGENOUGH_UI_TICK="0"))
    assert result.returncode == 2
    assert one_error_line(result).startswith("error: invalid configuration: ui_tick: ")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = pgenough("dashboard", "--port", str(port), env=worker_env)
    assert result.returncode == 1
    assert (
        one_error_line(result)
        == f"error: cannot listen on 127.0.0.1:{port}: address already in use"
    )


def test_the_help_names_the_command(worker_env: dict[str, str]) -> None:
    result = pgenough("dashboard", "--help", env=worker_env)
    assert result.returncode == 0, result.stderr
    assert "--host" in result.stdout and "--port" in result.stdout
    assert "dashboard" in pgenough("--help", env=dict(os.environ)).stdout
