"""``pgenough-plans api`` and ``pgenough-plans migrate --api-role`` as a user runs them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.helpers.procs import ROOT
from tests.plan_service.api.helpers import api_process, free_port

PGENOUGH = os.path.join(os.path.dirname(sys.executable), "pgenough-plans")


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGENOUGH, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_an_impossible_bulkhead_is_one_clear_line(worker_env: dict[str, str]) -> None:
    env = dict(worker_env, PGENOUGH_API_MAX_CONCURRENT_SEARCHES="9")
    result = run("api", "--port", str(free_port()), env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "error: invalid configuration: api_max_concurrent_searches (9) must be at most"
        " pool_max_size - 2 (8)"
    )


def test_a_password_needs_a_role(worker_env: dict[str, str]) -> None:
    result = run("migrate", "--api-password", "x", env=worker_env)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --api-password needs --api-role"


@pytest.mark.db
@pytest.mark.slow
def test_migrate_creates_the_api_role_and_the_api_serves_with_it(
    db: object, worker_env: dict[str, str], database_url: str
) -> None:
    role = f"pgenough_api_{uuid.uuid4().hex[:8]}"
    try:
        result = run("migrate", "--api-role", role, "--api-password", "pw", env=worker_env)
        assert result.returncode == 0, result.stderr
        assert (
            f"API role {role} created: CONNECT, USAGE on schema plans,"
            " SELECT on plans.plans" in result.stdout
        )
        again = run("migrate", "--api-role", role, env=worker_env)
        assert f"API role {role} updated" in again.stdout

        env = dict(
            worker_env,
            DATABASE_URL=make_conninfo(database_url, user=role, password="pw"),
            PGENOUGH_API_MIGRATE="0",
        )
        refused = run("api", "--port", str(free_port()), env=dict(env, PGENOUGH_API_MIGRATE="1"))
        assert refused.returncode == 1
        assert "PGENOUGH_API_MIGRATE=0" in refused.stderr

        with api_process(env) as base:
            response = httpx.get(base + "/search", params={"limit": "3"}, timeout=10)
            assert response.status_code == 200
            assert response.json()["error"] is None
            assert httpx.get(base + "/openapi.json", timeout=10).status_code == 200
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


LONGEST_TARGET = 65_535
"""httptools' URL parser keeps offsets in 16 bits: a longer request-target is refused."""


def raw_response(base: str, target: str) -> bytes:
    """What the server sends back for ``GET target``, up to its closing the connection or
    the end of a response with a Content-Length (the bytes as sent, no client in between)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: api\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = [
                int(line.split(b":")[1])
                for line in head.lower().split(b"\r\n")
                if line.startswith(b"content-length:")
            ]
            if length and len(body) >= length[0]:
                break
        return data


def target_of(length: int) -> str:
    """A /search request-target of exactly ``length`` bytes (a parameter /search ignores)."""
    prefix = "/search?_="
    return prefix + "a" * (length - len(prefix))


@pytest.mark.db
def test_a_request_target_past_64_kib_is_uvicorns_bare_400(
    db: object, worker_env: dict[str, str]
) -> None:
    """As docs/plan-service/api.md says: up to 65,535 bytes of path and query string are
    served; a longer one never reaches the app: uvicorn (httptools) answers a bare 400 and
    closes the connection."""
    with api_process(worker_env) as base:
        served = raw_response(base, target_of(LONGEST_TARGET))
        assert served.startswith(b"HTTP/1.1 200 OK\r\n"), served[:200]
        assert served.endswith(b'{"data":{"events":[]},"error":null}')
        for length in (LONGEST_TARGET + 1, 70 * 1024, 1024 * 1024):
            refused = raw_response(base, target_of(length))
            head, _, body = refused.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), (length, refused[:200])
            assert b"connection: close" in head.lower() and b"x-request-id" not in head.lower()
            assert body == b"Invalid HTTP request received."
        # The server carries on.
        assert httpx.get(base + "/health/live", timeout=10).status_code == 200
