"""The ``pgenough-plans`` command as a user runs it: a subprocess."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from pgenough.dashboard.throttle import FREE_FAILURES
from pgenough_plans import __version__
from tests.helpers.procs import ROOT
from tests.test_cli import free_port

PLANS = str(Path(sys.executable).with_name("pgenough-plans"))


def plans(
    *args: str, env: dict[str, str], timeout: float = 120, cwd: str | os.PathLike[str] = ROOT
) -> subprocess.CompletedProcess[str]:
    """``pgenough-plans *args``, to its end."""
    return subprocess.run(
        [PLANS, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_version(worker_env: dict[str, str]) -> None:
    result = plans("--version", env=worker_env)
    assert result.returncode == 0
    assert result.stdout.strip() == f"pgenough-plans {__version__}"


@pytest.mark.db
@pytest.mark.slow
def test_demo_serves_search_within_its_first_fetch_cycle(
    db: object, worker_env: dict[str, str]
) -> None:
    port = free_port()
    demo = subprocess.Popen(
        [
            PLANS,
            "demo",
            "--port",
            str(port),
            "--plans",
            "2000",
            "--interval",
            "60",
        ],
        cwd=ROOT,
        env=dict(worker_env, PGENOUGH_UI_TOKEN="demo-token"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    events: list[object] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not events:
            assert demo.poll() is None, demo.communicate()
            try:
                resp = httpx.get(f"http://127.0.0.1:{port}/search?limit=5", timeout=5)
            except httpx.TransportError:
                time.sleep(0.2)  # not listening yet
                continue
            assert resp.status_code == 200, resp.text
            events = resp.json()["data"]["events"]
            if not events:
                time.sleep(0.2)  # the first fetch (of a 60 s cycle) is still landing
        assert len(events) == 5
        signed_in = {"authorization": "Bearer demo-token"}
        dashboard = httpx.get(f"http://127.0.0.1:{port}/ui/", headers=signed_in, timeout=5)
        assert dashboard.status_code == 200 and "fever-sim" in dashboard.text
        # No proxy is trusted: a fresh X-Forwarded-For per wrong token is still one client.
        guesses = [
            httpx.get(
                f"http://127.0.0.1:{port}/ui/api/overview",
                headers={"authorization": "Bearer guess", "x-forwarded-for": f"192.0.2.{n}"},
                timeout=5,
            ).status_code
            for n in range(FREE_FAILURES + 1)
        ]
        assert guesses == [401] * FREE_FAILURES + [429], guesses
    finally:
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=60)
    assert demo.returncode == 0, err
    assert f"search: curl 'http://127.0.0.1:{port}/search?" in out
    assert f"dashboard: http://127.0.0.1:{port}/ui" in out
    assert re.search(r"^fetch  run \d+ STAGED: 1993 plans staged", out, re.MULTILINE), out
    assert re.search(r"^process run \d+ PROCESSED: \d+ plans written", out, re.MULTILINE), out


def test_bad_provider_spec_is_one_clear_line(worker_env: dict[str, str]) -> None:
    result = plans("worker", "fetch", "--once", "--provider", "no-url-here", env=worker_env)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: provider 'no-url-here': expected NAME=URL"


@pytest.mark.db
@pytest.mark.slow
def test_worker_modes_and_the_simulator_from_the_command_line(
    db: object, worker_env: dict[str, str], database_url: str
) -> None:
    port = free_port()
    sim = subprocess.Popen(
        [
            PLANS,
            "provider-sim",
            "--plans",
            "300",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=worker_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert sim.stdout is not None
        assert sim.stdout.readline().startswith("provider simulator: http://127.0.0.1:")
        url = f"http://127.0.0.1:{port}/planList"
        ok = plans(
            "worker", "fetch", "--once", "--provider", f"good={url}?version=1", env=worker_env
        )
        assert ok.returncode == 0, ok.stderr
        assert "STAGED" in ok.stdout
        bad = plans(
            "worker",
            "fetch",
            "--once",
            "--provider",
            f"good={url}?fault=404",
            "--provider",
            f"other={url}?version=2",
            env=worker_env,
        )
        assert bad.returncode == 1  # one run failed
        assert "FAILED" in bad.stdout and "STAGED" in bad.stdout
        drained = plans("worker", "process", "--until-idle", env=worker_env)
        assert drained.returncode == 0, drained.stderr
        assert "chunks applied: " in drained.stdout
    finally:
        sim.terminate()
        sim.wait(10)
    with psycopg.connect(database_url) as conn:
        statuses = conn.execute(
            "SELECT provider, status::text FROM plans.runs ORDER BY id"
        ).fetchall()
        written = conn.execute("SELECT count(*) FROM plans.plans").fetchone()
    assert statuses[0] == ("good", "PROCESSED")
    assert sorted(statuses[1:]) == [("good", "FAILED"), ("other", "PROCESSED")]
    assert written is not None and written[0] > 300


def scrape_until(port: int, needle: str, timeout: float = 30.0) -> str:
    """The worker's /metrics once it shows ``needle`` (the workers are other processes: there
    is no event to wait on, so this polls, with a deadline)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        except httpx.TransportError:
            text = ""
        if needle in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} not in the metrics after {timeout}s:\n{text[-2000:]}")


def test_workers_serve_their_own_metrics(db: object, worker_env: dict[str, str]) -> None:
    exe = PLANS
    sim_port, fetch_port, process_port = free_port(), free_port(), free_port()
    procs = [
        subprocess.Popen(
            [exe, "provider-sim", "--plans", "300", "--port", str(sim_port)],
            cwd=ROOT,
            env=worker_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [exe, "worker", "process", "--metrics-port", str(process_port)],
            cwd=ROOT,
            env=worker_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ),
        subprocess.Popen(
            [
                exe,
                "worker",
                "fetch",
                "--interval",
                "60",
                "--metrics-port",
                str(fetch_port),
                "--provider",
                f"good=http://127.0.0.1:{sim_port}/planList?version=1",
            ],
            cwd=ROOT,
            env=worker_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ),
    ]
    try:
        fetched = scrape_until(
            fetch_port, 'pgenough_plans_fetches_total{outcome="staged",provider="good"} 1.0'
        )
        assert 'pgenough_db_pool_max{pool="fetch-' in fetched
        staged = re.search(r'pgenough_plans_staged_total\{provider="good"\} (\S+)', fetched)
        assert staged is not None and float(staged.group(1)) > 0
        # Every staged plan is written once the process worker has applied the run's chunks.
        processed = scrape_until(
            process_port, f'pgenough_plans_written_total{{provider="good"}} {staged.group(1)}'
        )
        assert 'pgenough_plans_chunks_applied_total{provider="good"}' in processed
        assert 'pgenough_jobs_completed_total{queue="plans"}' in processed
        for proc in procs[1:]:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_metrics_port_in_use_is_one_clear_line(worker_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = plans(
            "worker", "process", "--until-idle", "--metrics-port", str(port), env=worker_env
        )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: metrics: cannot listen on 127.0.0.1:{port}: address already in use"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "abc"], "error: pgenough-plans run: Invalid value for 'ID'"),
        (["runs", "--limit", "0"], "error: pgenough-plans runs: Invalid value for '--limit'"),
        (["runs", "--bogus"], "error: pgenough-plans runs: No such option: --bogus"),
        (["nope"], "error: pgenough-plans: No such command 'nope'"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(
    worker_env: dict[str, str], args: list[str], says: str
) -> None:
    result = plans(*args, env=worker_env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(says), result.stderr


def test_no_arguments_show_the_help(worker_env: dict[str, str]) -> None:
    result = plans(env=worker_env)
    assert result.returncode == 2
    assert "Usage: pgenough-plans [OPTIONS] COMMAND" in result.stdout + result.stderr


@pytest.mark.db
def test_the_largest_bigint_is_a_valid_run_id_and_limit(
    db: object, worker_env: dict[str, str]
) -> None:
    top = str(2**63 - 1)
    assert plans("runs", "--limit", top, "--before", top, env=worker_env).returncode == 0
    missing = plans("run", top, env=worker_env)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"error: run {top} not found"
