"""graphile-worker (Node; ``bench/graphile/``): its migration, its bulk ``add_jobs``, and a
drain by ``workers`` node processes started together on a GO line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
from bench.harness.systems.base import KIND, DrainSpec
from psycopg.conninfo import conninfo_to_dict

GRAPHILE_DIR = Path(__file__).resolve().parents[2] / "graphile"
GRAPHILE_LOCAL_QUEUE = 500


def graphile_command(mode: str, url: str, *args: str) -> list[str]:
    return ["node", str(GRAPHILE_DIR / "worker.js"), mode, conninfo_to_uri(url), *args]


def conninfo_to_uri(url: str) -> str:
    """node-postgres takes URIs only; the benchmark's databases are key=value conninfo."""
    p = conninfo_to_dict(url)
    auth = quote(str(p.get("user", "")), safe="")
    if p.get("password"):
        auth += ":" + quote(str(p["password"]), safe="")
    host = str(p.get("host", "localhost"))
    if host.startswith("/"):  # a socket directory: node-postgres reads it from ?host=
        return f"postgresql://{auth}@/{quote(str(p.get('dbname', '')))}?host={quote(host)}"
    port = f":{p['port']}" if p.get("port") else ""
    return f"postgresql://{auth}@{host}{port}/{quote(str(p.get('dbname', '')))}"


def graphile_env() -> dict[str, str]:
    # Its per-job "Completed task" info line, off as in graphile-worker's own perf test.
    return {**os.environ, "NO_LOG_SUCCESS": "1"}


def graphile_missing() -> str | None:
    """Why graphile-worker cannot run here (None: it can); runs ``npm ci`` if it can help."""
    if shutil.which("node") is None:
        return "node not found; install Node.js 20 and run npm ci --prefix bench/graphile"
    if not (GRAPHILE_DIR / "node_modules" / "graphile-worker").is_dir():
        if shutil.which("npm") is None:
            return "bench/graphile/node_modules missing and npm not found"
        print("graphile-worker: npm ci --prefix bench/graphile", flush=True)
        done = subprocess.run(
            ["npm", "ci", "--prefix", str(GRAPHILE_DIR), "--no-audit", "--no-fund"],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            return f"npm ci failed: {done.stderr.strip()[-300:]}"
    return None


def graphile_version() -> str:
    try:
        meta = json.loads((GRAPHILE_DIR / "node_modules/graphile-worker/package.json").read_text())
    except (OSError, ValueError):
        return "-"
    return str(meta.get("version", "-"))


def setup_graphile(url: str) -> None:
    subprocess.run(graphile_command("migrate", url), check=True, env=graphile_env())


def enqueue_graphile(url: str, n: int, name: str) -> float:
    """graphile-worker's bulk API: ``add_jobs`` with the statement its ``addJobs`` sends."""
    specs = json.dumps([{"identifier": KIND, "payload": {"n": i}} for i in range(n)])
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        row = conn.execute(
            "SELECT count(*) FROM graphile_worker.add_jobs(array("
            "SELECT json_populate_recordset(null::graphile_worker.job_spec, %s::json)), false)",
            (specs,),
        ).fetchone()
        elapsed = time.perf_counter() - start
    assert row is not None
    assert row[0] == n, (row, n)
    return elapsed


def run_graphile_drain(spec: DrainSpec, workers: int) -> tuple[float, int]:
    """``workers`` node processes; each prints READY once connected, migrated and warmed
    up; the clock starts when GO is written to all of them and stops at the last one's DONE
    (its run-once pass found no job left and flushed its completions)."""
    procs = [
        subprocess.Popen(
            graphile_command("drain", spec.url, str(spec.pool_size)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=graphile_env(),
        )
        for _ in range(workers)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            if line != "READY":
                raise RuntimeError(f"graphile worker did not start (said {line!r})")
        start = time.time()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()
        ends: list[float] = []
        done = 0
        for p in procs:
            assert p.stdout is not None
            said = p.stdout.readline().split()
            if len(said) != 3 or said[0] != "DONE":
                raise RuntimeError(f"graphile worker failed (said {' '.join(said)!r})")
            ends.append(float(said[1]))
            done += int(said[2])
        for p in procs:
            p.wait(30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    return max(ends) - start, done
