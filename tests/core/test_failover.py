"""A primary that fails over to its standby during a sustained run (issue 25): workers
(``pgenough worker run``, real processes) and a producer on a multi-host connection string
(``target_session_attrs=read-write``), the primary stopped as a crash would
(``pg_ctl stop -m immediate``) and the standby promoted.

Everything reconnects to the new primary without a restart: enqueues and completions resume
within ``RESUME`` of the promotion, each worker's listener is back on it, its periodic duties
claim their ticks there (the rescuer hands back the claims the crash left running), and the
backlog drains. Nothing is done twice (an effect per job, written with its completion). What
was acknowledged is measured: with asynchronous replication the acknowledged commits the
standby had not received are lost (counted and printed, with the in-doubt ones: the
connection broke during their COMMIT); with a synchronous standby none is, asserted.

The servers are the test's own (``tests/helpers/standby.py``): not ``db`` tests.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgenough.core import complete, enqueue, migrate
from pgenough.core.errors import LeaseLost
from pgenough.core.queue import claim, complete_many, fail_job
from pgenough.core.worker._listener import LISTENER_APPLICATION_PREFIX
from tests.helpers import failoverapp
from tests.helpers.failover import Producer, measure, project_env, read_acks
from tests.helpers.procs import WORKER_STARTED, Proc, wait_for
from tests.helpers.standby import StandbyPair, standby_pair

pytestmark = [pytest.mark.slow]

SPEC = "tests.helpers.failoverapp:app"
WORKERS = 2
RATE = 100.0
"""Enqueues a second."""
LEASE = 3.0
RESUME = 10.0
"""Seconds after the promotion within which enqueues and completions must be acknowledged
again, and the listeners and periodic duties be back on the new primary."""
STALLED = range(10**9, 10**9 + 4)
"""Numbers of the jobs whose first attempt holds its transaction open across the crash."""
STALL = 1.5
DRAIN = 30.0
"""Seconds after the producer stops within which every job on the new primary is done (the
claims the crash left running wait for their lease and the rescuer)."""


def scalar(url: str, query: str, *params: Any) -> Any:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(query, params or None).fetchone()
    assert row is not None
    return row[0]


def drain_lines(proc: Proc) -> list[str]:
    """Every line ``proc`` has printed so far (its log: stderr is merged)."""
    with contextlib.suppress(TimeoutError, EOFError):
        proc.expect(lambda _: False, timeout=0.2)
    return proc.lines


def completions_after(files: list[Path], since: float) -> int:
    done, _ = read_acks(files)
    return sum(1 for c in done if c.at > since)


def start_workers(env: dict[str, str], tmp_path: Path) -> tuple[list[Proc], list[Path]]:
    procs: list[Proc] = []
    files = [tmp_path / f"acks-{i}" for i in range(WORKERS)]
    for path in files:
        proc = Proc.pgenough(
            {**env, failoverapp.ACK_FILE: str(path)}, "worker", "run", SPEC, "--concurrency", "4"
        )
        procs.append(proc)
    for proc in procs:
        proc.expect(lambda line: bool(WORKER_STARTED.search(line)), timeout=60)
    return procs, files


def stop_workers(procs: list[Proc]) -> list[int | None]:
    for proc in procs:
        if proc.popen.poll() is None:
            proc.popen.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(30))
        except Exception:
            codes.append(None)
        finally:
            proc.kill()
    return codes


def listeners(url: str) -> int:
    return int(
        scalar(
            url,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
            f"{LISTENER_APPLICATION_PREFIX}%",
        )
    )


def prepare(pair: StandbyPair) -> str:
    """The schema on the primary; the multi-host URL."""
    url = pair.failover_url()
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn)
        conn.execute(failoverapp.EFFECTS_TABLE)
    return url


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_workers_and_a_producer_ride_a_failover(mode: str, tmp_path: Path) -> None:
    synchronous = mode == "sync"
    with standby_pair(synchronous_commit=True, synchronous=synchronous) as pair:
        if synchronous:
            pair.wait_synchronous()
        url = prepare(pair)
        env = project_env(
            url,
            PGENOUGH_WORKER_LEASE=str(LEASE),
            PGENOUGH_RESCUE_INTERVAL="1",
            PGENOUGH_WORKER_POLL_INTERVAL="0.5",
            PGENOUGH_LOG_LEVEL="INFO",
            PGENOUGH_NETWORK_TIMEOUT="5",
        )
        procs, files = start_workers(env, tmp_path)
        producer = Producer(url, RATE)
        try:
            wait_for(lambda: listeners(pair.primary_url) == WORKERS, 30, "the listeners")
            producer.start()
            wait_for(lambda: completions_after(files, 0) >= RATE, 30, "a second of completions")
            # A few jobs in flight at the crash, their transactions open, their claims on the
            # standby: their attempts fail and they run again on the new primary.
            with psycopg.connect(url) as conn:
                for n in STALLED:
                    failoverapp.effect.enqueue(conn, n=n, stall=STALL)
            running = "SELECT count(*) FROM pgenough.jobs WHERE state = 'running' AND payload @> %s"
            wait_for(
                lambda: scalar(url, running, Jsonb({"stall": STALL})) == len(STALLED),
                30,
                "the stalled jobs claimed",
            )
            pair.wait_replayed()

            stopped_at = time.time()
            pair.stop_primary()
            pair.promote()
            promoted_at = time.time()
            new = pair.standby_url
            promoted_db = scalar(new, "SELECT now()")

            # Without a restart: enqueues, completions, listeners and periodic duties resume.
            producer.wait_ok_after(promoted_at, timeout=RESUME)
            wait_for(lambda: completions_after(files, promoted_at) > 0, RESUME, "completions")
            wait_for(lambda: listeners(new) == WORKERS, RESUME, "the listeners on the new primary")
            wait_for(
                lambda: (
                    scalar(
                        new,
                        "SELECT count(*) FROM pgenough.periodic WHERE claimed_at > %s",
                        promoted_db,
                    )
                    > 0
                ),
                RESUME,
                "a periodic duty claimed on the new primary",
            )
            producer.wait_ok_after(promoted_at, count=int(2 * RATE), timeout=30)
            producer.stop()

            def drained() -> bool:
                return bool(scalar(new, "SELECT count(*) FROM pgenough.jobs") == 0)

            wait_for(drained, DRAIN, "every job done on the new primary")
            figures = measure(mode, producer, files, new, stopped_at, promoted_at)
            print(figures.line())
            assert all(p.popen.poll() is None for p in procs), "a worker exited"
        finally:
            if producer.is_alive():
                producer.stop()
            codes = stop_workers(procs)
        logs = "\n".join(line for proc in procs for line in drain_lines(proc))
        assert codes == [0] * WORKERS, logs[-3000:]
        assert "Traceback" not in logs, logs[-3000:]
        assert figures.duplicates == 0
        assert figures.undone == []
        assert figures.lost_after_promotion == []
        stalled = scalar(
            new,
            "SELECT array_agg(attempts ORDER BY n) FROM failover_effects WHERE n >= %s",
            STALLED[0],
        )
        assert len(stalled) == len(STALLED) and min(stalled) >= 2, stalled
        if synchronous:
            assert figures.enqueues_lost == []
            assert figures.completions_lost == []


def test_a_promoted_node_still_naming_a_synchronous_standby_waits_on_every_commit() -> None:
    """The hazard ``StandbyPair.promote`` handles: the standby inherited
    ``synchronous_standby_names``; promoted as it is, with no standby of its own, each commit
    waits (``SyncRep``) until the setting is emptied, and then completes."""
    with standby_pair(synchronous=True) as pair:
        pair.wait_synchronous()
        url = pair.failover_url()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (x int)")
        pair.stop_primary()
        pair.promote(keep_synchronous=True)
        committed = threading.Event()

        def write() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("INSERT INTO t VALUES (1)")
            committed.set()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        wait_for(lambda: scalar(pair.standby_url, waiting) == 1, 30, "a commit waiting")
        assert not committed.is_set()
        pair.clear_synchronous()
        assert committed.wait(30)
        writer.join(10)
        assert scalar(pair.standby_url, "SELECT count(*) FROM t") == 1


async def test_a_claim_lost_in_a_failover_cannot_complete_the_job_that_took_its_id() -> None:
    """The new primary lacks the old one's last commits, the sequence's among them: it hands
    out again the ids of jobs it never received. A handler still running such a job (claimed
    on the old primary, its claim lost with it) must not complete, acknowledge or fail the
    new job that took its id: a claim is the job's id, its attempt AND its enqueue time.
    (Without the enqueue time, the stale completion deleted the new job, whose own handler
    then found its claim gone: a job acknowledged after the failover, never done.)"""
    with standby_pair(synchronous_commit=True) as pair:
        url = pair.failover_url()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate(conn)
            await enqueue(conn, "k", queue="q")  # the sequence's state, on the standby
        pair.wait_replayed()
        pair.stop_standby()  # from here on the standby receives nothing: the lost tail
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for n in range(40):  # past the 32 ids the sequence logs ahead
                await enqueue(conn, "k", {"n": n}, queue="q")
            stale = (await claim(conn, queue="q", worker="old", lease=60, limit=100, done=[])).jobs
        pair.kill_primary()
        pair.start_standby()
        pair.promote()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for n in range(40):
                await enqueue(conn, "k", {"n": 100 + n}, queue="q")
            fresh = (await claim(conn, queue="q", worker="new", lease=60, limit=100, done=[])).jobs
            # The claims of jobs enqueued on the old primary only, whose ids new jobs took
            # (the first job, replicated, is the same job on both: not one of them).
            created = {j.id: j.created_at for j in fresh}
            retaken = [j for j in stale if j.id in created and created[j.id] != j.created_at]
            assert retaken, "the new primary handed out none of the lost ids again"
            for job in retaken:
                with pytest.raises(LeaseLost):
                    async with conn.transaction():
                        await complete(conn, job)
            assert not await complete_many(conn, retaken)
            await claim(conn, queue="q", worker="old", lease=60, limit=0, done=retaken)  # ack
            for job in retaken:
                assert await fail_job(conn, job, "stale", 0.0, give_up=False) is None
            cur = await conn.execute(
                "SELECT count(*) FROM pgenough.jobs WHERE state = 'running' AND worker = 'new'"
            )
            assert await cur.fetchone() == (len(fresh),)  # every new claim untouched
