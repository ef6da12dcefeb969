"""``pgenough worker run MODULE:APP``: the user's tasks in real worker processes.

One process serves many queues with ONE listening connection and ONE set of maintenance
duties; SIGTERM lets running jobs finish or hands them back; usage errors are one line."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import get_job
from pgenough.core.admin import list_jobs
from pgenough.core.worker._listener import LISTENER_APPLICATION_PREFIX
from tests.helpers import failapp, taskapp
from tests.helpers.procs import ROOT, WORKER_STARTED, Proc, wait_until

pytestmark = [pytest.mark.db, pytest.mark.slow]

PGENOUGH = str(Path(sys.executable).with_name("pgenough"))
SPEC = "tests.helpers.taskapp:app"
FAILAPP = "tests.helpers.failapp:app"
METRICS = re.compile(r"metrics at (http://\S+/metrics)")


async def scalar(db: AsyncConnectionPool, query: str, *params: Any) -> Any:
    async with db.connection() as conn:
        row = await (await conn.execute(query, params)).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


async def listener_pids(db: AsyncConnectionPool, worker: str) -> list[int]:
    """The backends of ``worker``'s listening connections."""
    pids = await scalar(
        db,
        "SELECT coalesce(array_agg(pid), '{}') FROM pg_stat_activity WHERE application_name = %s",
        f"{LISTENER_APPLICATION_PREFIX}{worker}",
    )
    return list(pids)


async def listeners(db: AsyncConnectionPool, worker: str) -> int:
    return len(await listener_pids(db, worker))


def start(env: dict[str, str], *args: str) -> tuple[Proc, str, str | None]:
    """A worker process, once it has started: (process, its name, its /metrics URL)."""
    proc = Proc.pgenough(env, "worker", "run", SPEC, *args)
    url: str | None = None
    while True:
        line = proc.expect(
            lambda s: bool(WORKER_STARTED.search(s) or METRICS.search(s)), timeout=60
        )
        if m := METRICS.search(line):
            url = m.group(1)
            continue
        m = WORKER_STARTED.search(line)
        assert m is not None
        return proc, m.group(1), url


def metric(url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if (
            sample.startswith(name + "{") and all(f'{k}="{v}"' in sample for k, v in labels.items())
        ) or (sample == name and not wanted):
            total += float(value)
    return total


def run_pgenough(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGENOUGH, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def stop(proc: Proc, timeout: float = 60) -> int:
    if proc.popen.poll() is None:
        proc.popen.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    finally:
        proc.kill()


async def test_five_queues_in_one_process_share_one_listening_connection(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    # Polling so slow that only notifications can get the jobs done within the wait below:
    # the one listener must wake the executor of each of the five queues.
    env = {**worker_env, "PGENOUGH_WORKER_POLL_INTERVAL": "120"}
    proc, name, url = start(env, "--metrics-port", "0")
    try:
        assert url is not None
        await wait_until(lambda: _listening(db, name), timeout=30, what="the listener")
        async with db.connection() as conn:
            for n, queue in enumerate(taskapp.QUEUES):
                await taskapp.app.tasks[f"work.{queue}"].enqueue(conn, n=n)
        await wait_until(lambda: _effects(db, 5), timeout=30, what="one job done per queue")
        assert await listeners(db, name) == 1
        # Everything the process holds: its pool's connections and the one listener.
        backends = await scalar(
            db,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
            f"%{name}%",
        )
        assert backends >= 2
        assert await scalar(db, "SELECT count(*) FROM pgenough.jobs") == 0
        for queue in taskapp.QUEUES:
            assert metric(url, "pgenough_jobs_completed_total", queue=queue) == 1
        # Each job's log lines carry its id and queue.
        async with db.connection() as conn:
            rows = await (await conn.execute("SELECT job_id, worker FROM effects")).fetchall()
        wanted = {(f"working on {q} ", f"[job_id={j} queue={q}]") for j, q in rows}
        seen: set[tuple[str, str]] = set()

        def all_seen(line: str) -> bool:
            seen.update(w for w in wanted if w[0] in line and line.endswith(w[1]))
            return seen == wanted

        proc.expect(all_seen)
    finally:
        assert stop(proc) == 0, proc.stderr


async def _listening(db: AsyncConnectionPool, name: str) -> bool:
    return await listeners(db, name) == 1


async def _effects(db: AsyncConnectionPool, n: int) -> bool:
    return int(await scalar(db, "SELECT count(*) FROM effects")) >= n


@pytest.mark.serial  # a wall-clock bound: the parallel pass's load breaks it
async def test_three_processes_of_five_queues_sweep_once_per_interval(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    env = {**worker_env, "PGENOUGH_RESCUE_INTERVAL": "1"}
    began = await db_second(db)
    procs = [start(env, "--metrics-port", "0") for _ in range(3)]
    try:
        for _, name, _ in procs:
            await wait_until(lambda n=name: _listening(db, n), timeout=30, what="listeners")
        first = await db_second(db)
        await wait_until(
            lambda: _db_second_at_least(db, first + 6), timeout=30, what="six rescue intervals"
        )
        urls = [url for _, _, url in procs]
        assert all(urls)
        claims = [metric(u, "pgenough_periodic_claims_total", task="pgenough.rescue") for u in urls]  # type: ignore[arg-type]
        runs = [metric(u, "pgenough_periodic_runs_total", task="pgenough.rescue") for u in urls]  # type: ignore[arg-type]
        last = await db_second(db)
        # ONE set of duties per process: each tried each period once, not once per queue.
        # Every process ran since before `first`: at least the six periods, at most the ones
        # from its start-up (within the 60 s start budget) on.
        periods = last - first + 1
        for n in claims:
            assert periods - 1 <= n <= periods + 60, claims
        # And across the three, each period was swept by exactly one of them.
        swept = await scalar(
            db, "SELECT period FROM pgenough.periodic WHERE name = %s", "pgenough.rescue"
        )
        assert swept >= last - 1
        # Each period from the first start on was run at most once (a loaded machine may skip
        # some: a process need not try every period, so runs are not bounded by claims / 3).
        assert periods - 1 <= sum(runs) <= last - began + 1, (runs, claims, began, first, last)
        assert sum(claims) < 2 * 3 * periods + 60  # five queues each would be 15 a period
    finally:
        codes = [stop(p) for p, _, _ in procs]
    assert codes == [0, 0, 0]


async def db_second(db: AsyncConnectionPool) -> int:
    """The database clock's current second (periods are counted by it)."""
    return int(await scalar(db, "SELECT floor(extract(epoch FROM now()))::bigint"))


async def _db_second_at_least(db: AsyncConnectionPool, second: int) -> bool:
    return await db_second(db) >= second


async def test_the_listener_comes_back_after_its_backend_is_terminated(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    env = {**worker_env, "PGENOUGH_WORKER_POLL_INTERVAL": "120"}
    proc, name, _ = start(env)
    try:
        await wait_until(lambda: _listening(db, name), timeout=30, what="the listener")
        [old] = await listener_pids(db, name)
        assert await scalar(db, "SELECT pg_terminate_backend(%s)", old)
        await wait_until(lambda: _new_listener(db, name, old), timeout=30, what="a new listener")
        async with db.connection() as conn:
            for queue in taskapp.QUEUES:
                await taskapp.app.tasks[f"work.{queue}"].enqueue(conn, n=1)
        # Only the new listener can wake them: polling is two minutes away.
        await wait_until(lambda: _effects(db, 5), timeout=30, what="the five jobs")
        assert await listeners(db, name) == 1
    finally:
        assert stop(proc) == 0, proc.stderr


async def _new_listener(db: AsyncConnectionPool, name: str, old: int) -> bool:
    pids = await listener_pids(db, name)
    return bool(pids) and old not in pids


async def test_a_worker_killed_mid_jobs_loses_and_duplicates_nothing(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    """kill -9 while holding claims: a second process rescues them when their leases
    expire, and every job's effect is written exactly once (it commits with completion)."""
    env = {**worker_env, "PGENOUGH_WORKER_LEASE": "2", "PGENOUGH_RESCUE_INTERVAL": "1"}
    total = 60
    async with db.connection() as conn:
        await taskapp.paced.enqueue_many(conn, [{"n": n, "seconds": 0.2} for n in range(total)])
    first, _, _ = start(env, "--queue", "reports=8")
    try:
        await wait_until(lambda: _effects(db, 10), timeout=60, what="some jobs done")
        running = await scalar(db, "SELECT count(*) FROM pgenough.jobs WHERE state = 'running'")
        first.popen.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        first.kill()
    assert running > 0  # it died holding claims
    second, _, _ = start(env, "--queue", "reports=8")
    try:
        await wait_until(lambda: _effects(db, total), timeout=120, what="every job done")
        await wait_until(lambda: _no_jobs(db), timeout=30, what="the queue empty")
    finally:
        assert stop(second) == 0, second.stderr
    async with db.connection() as conn:
        notes = [r[0] for r in await (await conn.execute("SELECT worker FROM effects")).fetchall()]
    assert sorted(notes) == sorted(f"paced {n}" for n in range(total))


async def test_a_worker_killed_mid_batch_commits_each_effect_exactly_once(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    """kill -9 while a batch transaction is open (its effects written, not committed): a
    second process takes the jobs back once their leases expire, and every job's effect
    exists exactly once - in a table without a unique constraint to hide a duplicate."""
    env = {**worker_env, "PGENOUGH_WORKER_LEASE": "2", "PGENOUGH_RESCUE_INTERVAL": "1"}
    total = 120
    async with db.connection() as conn:
        await conn.execute(taskapp.TALLIES_TABLE)
        await conn.execute("TRUNCATE tallies")
        await taskapp.tally.enqueue_many(conn, [{"n": n, "seconds": 1.0} for n in range(total)])
    # Three batches of 10 (the claim size) in flight at once.
    first, name, _ = start(env, "--queue", f"{taskapp.TALLY_QUEUE}=30")
    try:
        await wait_until(lambda: _tallied(db, 10), timeout=60, what="a batch committed")
        await wait_until(lambda: _open_batch(db, name), timeout=30, what="a batch open")
        first.popen.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        first.kill()
    running = await scalar(db, "SELECT count(*) FROM pgenough.jobs WHERE state = 'running'")
    assert running > 0  # it died holding claims
    assert await scalar(db, "SELECT count(*) FROM tallies") < total
    second, _, _ = start(env, "--queue", f"{taskapp.TALLY_QUEUE}=30")
    try:
        await wait_until(lambda: _no_jobs(db), timeout=120, what="the queue empty")
    finally:
        assert stop(second) == 0, second.stderr
    async with db.connection() as conn:
        cur = await conn.execute("SELECT n, count(*) FROM tallies GROUP BY n ORDER BY n")
        counts = await cur.fetchall()
    assert counts == [(n, 1) for n in range(total)]


async def _tallied(db: AsyncConnectionPool, n: int) -> bool:
    return int(await scalar(db, "SELECT count(*) FROM tallies")) >= n


async def _open_batch(db: AsyncConnectionPool, worker: str) -> bool:
    """A connection of ``worker`` is inside a transaction that has written (its xid set)."""
    return bool(
        await scalar(
            db,
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name LIKE %s"
            " AND state = 'idle in transaction' AND backend_xid IS NOT NULL",
            f"%{worker}%",
        )
    )


async def _no_jobs(db: AsyncConnectionPool) -> bool:
    return int(await scalar(db, "SELECT count(*) FROM pgenough.jobs")) == 0


async def test_sigterm_lets_a_running_job_finish(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    proc, _, _ = start(worker_env, "--shutdown-timeout", "30")
    async with db.connection() as conn:
        job_id = await taskapp.sleepy.enqueue(conn, seconds=1.5)
    line = proc.expect(lambda s: "sleeping 1.5s" in s)
    assert f"job_id={job_id}" in line
    assert stop(proc) == 0, proc.stderr
    async with db.connection() as conn:
        assert await get_job(conn, job_id) is None  # type: ignore[arg-type]
        rows = await (await conn.execute("SELECT job_id, worker FROM effects")).fetchall()
    assert rows == [(job_id, "slept")]
    proc.expect(lambda s: "SIGTERM received, finishing running jobs (up to 30s)" in s)


async def test_sigterm_hands_back_a_job_that_outlives_the_shutdown_timeout(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    proc, _, _ = start(worker_env, "--shutdown-timeout", "0.3")
    async with db.connection() as conn:
        job_id = await taskapp.sleepy.enqueue(conn, seconds=600)
    proc.expect(lambda s: "sleeping 600s" in s)
    assert stop(proc, timeout=30) == 0, proc.stderr
    async with db.connection() as conn:
        job = await get_job(conn, job_id)  # type: ignore[arg-type]
        assert await (await conn.execute("SELECT count(*) FROM effects")).fetchone() == (0,)
    assert job is not None
    assert (job.state, job.worker, job.attempts) == ("ready", None, 1)
    assert job.last_error is not None and job.last_error.startswith("interrupted")
    proc.expect(lambda s: "released 1 interrupted job(s)" in s)


async def test_until_idle_drains_the_queues_and_exits_zero(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    async with db.connection() as conn:
        for n in range(20):
            await taskapp.app.tasks["work.billing"].enqueue(conn, n=n)
            await taskapp.app.tasks["work.search"].enqueue(conn, n=n)
    done = await asyncio.to_thread(
        run_pgenough,
        worker_env,
        *("worker", "run", SPEC, "--until-idle", "-q", "billing", "-q", "search=3"),
    )
    assert done.returncode == 0, done.stderr
    assert "queues billing (2), search (3)" in done.stderr
    async with db.connection() as conn:
        assert await list_jobs(conn) == []
        assert await (await conn.execute("SELECT count(*) FROM effects")).fetchone() == (40,)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["not a spec!"], 2, "is not MODULE:ATTRIBUTE"),
        (["nosuch.tasks:app"], 2, "cannot import 'nosuch.tasks': no module named 'nosuch'"),
        (["tests.helpers.taskapp:missing"], 2, "has no attribute 'missing'"),
        (["tests.helpers.taskapp:not_an_app"], 2, "is a object, not a pgenough App"),
        (
            ["tests.helpers.broken_taskapp:app"],
            2,
            "importing 'tests.helpers.broken_taskapp' failed: RuntimeError: SMTP_HOST is not set",
        ),
        ([SPEC, "--queue", "emails=0"], 2, "the concurrency must be 1 to 10000"),
        ([SPEC, "--queue", "emails", "--queue", "emails"], 2, "give each queue once"),
        ([SPEC, "--batch-size", "0"], 2, "--batch-size"),
        ([SPEC, "--batch-size", "1001"], 2, "less than or equal to 1000"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    worker_env: dict[str, str], args: list[str], code: int, message: str
) -> None:
    done = run_pgenough(worker_env, "worker", "run", *args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_database_is_one_line_and_exit_1(worker_env: dict[str, str]) -> None:
    with socket_nobody_listens_on() as port:
        env = {**worker_env, "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/x"}
        done = run_pgenough(env, "worker", "run", SPEC)
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr


def socket_nobody_listens_on() -> Any:
    """A port bound (so nothing else takes it) but never listening: connections are refused."""
    import contextlib
    import socket

    @contextlib.contextmanager
    def bound() -> Any:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            yield sock.getsockname()[1]

    return bound()


def test_worker_process_is_the_plan_services_app() -> None:
    from pgenough_plans.ingest import process

    assert set(process.app.tasks) == {"apply_chunk", "pgenough.plans.reap", "pgenough.plans.vacuum"}
    assert process.app.queues == ["plans"]
    assert [s.task.name for s in process.app.schedules] == [
        "pgenough.plans.reap",
        "pgenough.plans.vacuum",
    ]


async def test_batch_size_bounds_each_claim_and_so_each_batch(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    """``--batch-size 3``: seven jobs of a batch task run as batches of 3, 3 and 1 (the
    default, 10, would have run them as one); the setting does the same."""
    for args, env in (
        (("--batch-size", "3"), {}),
        ((), {"PGENOUGH_WORKER_BATCH_SIZE": "3"}),
    ):
        async with db.connection() as conn:
            await conn.execute(taskapp.TALLIES_TABLE)
            await conn.execute("TRUNCATE tallies")
            await taskapp.tally.enqueue_many(conn, [{"n": n} for n in range(7)])
        done = await asyncio.to_thread(
            run_pgenough,
            {**worker_env, **env},
            *("worker", "run", SPEC, "--until-idle", "-q", f"{taskapp.TALLY_QUEUE}=10", *args),
        )
        assert done.returncode == 0, done.stderr
        assert "batch size 3" in done.stderr
        sizes = sorted(int(n) for n in re.findall(r"tallied (\d+) item", done.stderr))
        assert sizes == [1, 3, 3], done.stderr


def test_an_eager_app_under_a_worker_is_warned_about(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    done = run_pgenough(
        {**worker_env, "PGENOUGH_EAGER": "1"}, "worker", "run", SPEC, "--until-idle"
    )
    assert done.returncode == 0, done.stderr
    assert f"{SPEC} is eager (App(eager=True) or PGENOUGH_EAGER)" in done.stderr


async def test_a_failure_is_in_the_json_log_the_summary_and_pgenough_job(
    db: AsyncConnectionPool, worker_env: dict[str, str]
) -> None:
    """A failed attempt's traceback, from the raise in the task's file: in the JSON log
    line (``exc_info``), in ``pgenough job ID`` (tables and ``--json``); the final line
    counts it; each job done has its INFO line, which ``--quiet`` silences."""
    async with db.connection() as conn:
        doomed = await failapp.fail_once.enqueue(conn, n=7)
        fine = await failapp.ok.enqueue(conn, n=1)
    done = await asyncio.to_thread(
        run_pgenough,
        worker_env,
        *("--log-format", "json", "worker", "run", FAILAPP, "--until-idle"),
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    [failed] = [line for line in lines if line.get("job_id") == doomed]
    assert failed["level"] == "ERROR" and failed["logger"] == "pgenough.jobs"
    assert failed["message"].endswith(": ValueError: no such order 7")
    assert failapp.WHERE in failed["exc_info"]
    assert failed["exc_info"].endswith("ValueError: no such order 7")
    [ok] = [line for line in lines if line.get("job_id") == fine]
    assert ok["level"] == "INFO" and f"job {fine} done (fail.ok, " in ok["message"]
    [summary] = [line["message"] for line in lines if " stopped: " in line["message"]]
    assert summary.endswith(
        ": 1 job(s) completed, 1 failed attempt(s) (0 to retry), 1 dead-lettered, 0 lost"
        " claim(s), 0 handed back (no task here for their kind)"
    )

    shown = await asyncio.to_thread(run_pgenough, worker_env, "job", str(doomed))
    assert shown.returncode == 0, shown.stderr
    assert "traceback of attempt 1" in shown.stdout
    assert f"line {failapp.RAISE_LINE}, in fail_once" in shown.stdout
    assert failapp.FILE in shown.stdout.replace("\n", "")  # a long path may wrap
    as_json = await asyncio.to_thread(run_pgenough, worker_env, "job", str(doomed), "--json")
    [attempt] = json.loads(as_json.stdout)["errors"]
    assert failapp.WHERE in attempt["traceback"]

    async with db.connection() as conn:
        quiet_one = await failapp.ok.enqueue(conn, n=2)
    quiet = await asyncio.to_thread(
        run_pgenough, worker_env, "worker", "run", FAILAPP, "--until-idle", "--quiet"
    )
    assert quiet.returncode == 0, quiet.stderr
    assert f"job {quiet_one} " not in quiet.stderr
    assert "1 job(s) completed" in quiet.stderr
    async with db.connection() as conn:
        louder = await failapp.ok.enqueue(conn, n=3)
    settled = await asyncio.to_thread(
        run_pgenough,
        {**worker_env, "PGENOUGH_LOG_JOBS": "0"},
        *("worker", "run", FAILAPP, "--until-idle"),
    )
    assert settled.returncode == 0 and f"job {louder} " not in settled.stderr
