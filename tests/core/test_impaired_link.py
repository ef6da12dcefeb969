"""Workers on other hosts, over a link with latency, stalls and resets (issue 25): what a
fault on the path does to a worker, through the proxy of tests/helpers/netproxy.py, whose
stalls are black holes (no packet crosses: the peers' own TCP timers decide, and
``PGENOUGH_NETWORK_TIMEOUT`` sets ours).

- One connection dies silently under the heartbeat: the worker keeps its claims.
- A periodic task whose connection is reset: one warning line, and it runs again.
- A sustained run: two worker processes (``pgenough worker run tests.helpers.linkapp:app``),
  hosts A and B, each through its own link with 20 ms RTT, a producer next to the database
  enqueueing throughout. Host A's link stalls and resets its connections at random moments
  (seeded); host B's link stalls twice, on purpose, for every connection: once well below the
  network timeout (libpq's keepalives and ``tcp_user_timeout``, the server's for its end)
  and once well above it and above the lease. What must hold: every job's effect committed
  exactly once (``effects``: job id as primary key, written with the completion), every batch
  item once (``link_tallies``: no constraint), no handler run twice on one claim (a job's
  calls <= its attempts), the queue empty at the end, both workers making progress, a clean
  stop; and the throughput reached is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import statistics
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import Job, Periodic, Worker, WorkerConfig, complete, enqueue, open_pool
from pgenough.core.db import with_network_timeout
from pgenough.core.maintenance import MaintenanceConfig
from tests.helpers.linkapp import TALLIES_TABLE, effect, tally
from tests.helpers.netproxy import Faults, Proxy
from tests.helpers.procs import Proc

pytestmark = [pytest.mark.db, pytest.mark.slow]


async def _scalar(pool: AsyncConnectionPool, query: str, *params: Any) -> Any:
    async with pool.connection() as conn:
        row = await (await conn.execute(query, params or None)).fetchone()
    return row[0] if row else None


def loop_time() -> float:
    return asyncio.get_running_loop().time()


HEARTBEAT = b"SET lease_until = now()"
"""The heartbeat statement's text (``queue.sql``, sent unprepared every time)."""


async def test_a_heartbeat_stuck_on_a_dead_connection_does_not_cost_the_claims(
    db: AsyncConnectionPool, database_url: str
) -> None:
    """One connection of a healthy worker dies silently (a NAT forgot it, a stall on its
    flow only) just as the heartbeat uses it: the heartbeat must not wait for the network
    timeout to give up on it while the leases run out. With a network timeout longer than
    what the lease leaves after a heartbeat interval (here 6 s against 3 - 1 s; with the
    defaults, 20 s against 30 - 10 s: no margin), the claims of jobs still running would
    expire and run again elsewhere."""
    lease, network_timeout, job_s = 3.0, 6.0, 7.0
    link = Proxy(database_url)
    runs: list[int] = []
    async with link.running():
        assert link.url is not None
        pool = await open_pool(
            with_network_timeout(link.url, network_timeout),
            min_size=2,
            max_size=6,
            prepared_statements=False,
            name="heartbeat-stall",
        )

        async def slow(job: Job) -> None:
            runs.append(job.attempts)
            await asyncio.sleep(job_s)
            async with pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, %s, 'slow')",
                    (job.id, job.attempts),
                )
                await complete(conn, job)

        config = WorkerConfig(
            concurrency=1,
            batch_size=1,
            lease=lease,
            poll_interval=0.2,
            maintenance=MaintenanceConfig(rescue_interval=0.25),
        )
        worker = Worker(pool, {"slow": slow}, config)
        link.stall_when(HEARTBEAT, seconds=60)  # the first heartbeat's connection: dead
        async with db.connection() as conn:
            await enqueue(conn, "slow", {})
        task = asyncio.create_task(worker.run())
        try:
            deadline = loop_time() + 3 * job_s
            while await _scalar(db, "SELECT count(*) FROM effects") == 0:
                assert loop_time() < deadline, f"no effect after {3 * job_s:g} s (runs {runs})"
                await asyncio.sleep(0.1)
        finally:
            worker.stop()
            await task
            await pool.close()
    assert [e.kind for e in link.events] == ["stall"]  # the heartbeat's connection was hit
    attempts = await _scalar(db, "SELECT attempts FROM effects")
    assert (runs, attempts, worker.stats.lost) == ([1], 1, 0)


async def test_a_periodic_task_whose_connection_fails_says_so_in_one_line(
    db: AsyncConnectionPool, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A reset under a periodic duty (the rescuer's, the cleaner's, yours) is the network's
    doing, not a bug of the task: one warning line with the reason, no traceback, and the
    next tick runs it again."""
    marker = b"periodic-reset-marker"
    link = Proxy(database_url)
    ran: list[float] = []
    async with link.running():
        assert link.url is not None
        pool = await open_pool(link.url, max_size=2, name="periodic-reset")
        runner = Periodic(pool)

        async def tick() -> None:
            async with pool.connection() as conn:
                await conn.execute(f"SELECT '{marker.decode()}'")
            ran.append(loop_time())

        runner.every(0.2, "link.reset-tick", tick)
        link.reset_when(marker)
        task = asyncio.create_task(runner.run())
        try:
            deadline = loop_time() + 10
            while not ran:
                assert loop_time() < deadline, "the task did not run after the reset"
                await asyncio.sleep(0.05)
        finally:
            runner.stop()
            await task
            await pool.close()
    assert [e.kind for e in link.events] == ["reset"]
    failed = [r for r in caplog.records if "link.reset-tick failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in caplog.records]
    assert failed[0].levelno == logging.WARNING and failed[0].exc_info is None
    assert "it runs again at its next tick" in failed[0].getMessage()


RTT = 0.020
NETWORK_TIMEOUT = 6.0
"""The workers' ``PGENOUGH_NETWORK_TIMEOUT`` (the default is 20 s: shortened to fit the run;
what matters is each stall's length against it)."""
LEASE = 8.0
SHORT_STALL = 2.0
"""Below the network timeout: no keepalive probe is due (idle 3 s) and nothing unacknowledged
ages past ``tcp_user_timeout`` (6 s), even with TCP's retransmission backoff (the last
retransmission before it is 3 s after the first send)."""
LONG_STALL = 14.0
"""Above the network timeout (twice it) and above the lease."""
SHORT_AT, LONG_AT = 6.0, 14.0
"""When (seconds after production starts) B's link stalls."""
PRODUCE_S = 36.0
TICK = 0.1
BACKLOG = 200
"""Effect jobs the producer keeps ready: the workers, not the producer, set the pace, so the
throughput printed is what the impaired link lets them reach."""
MAX_PER_TICK = 100
TALLIES_PER_TICK = 2
READY = "SELECT count(*) FROM pgenough.jobs WHERE queue = %s AND state = 'ready'"
RANDOM_FAULTS = Faults(stall_rate=0.8, stall_s=(0.05, 1.5), reset_rate=0.5, seed=25)
"""Host A's link: a stall every 1.25 s and a reset every 2 s on average, each on one of its
connections that is carrying bytes (a statement, a commit, a claim in flight), drawn at
random; the stalls all well below the network timeout."""


async def _lines(proc: Proc, predicate: Any, timeout: float) -> str:
    """``proc.expect`` off the event loop: the proxies run on it."""
    return await asyncio.to_thread(proc.expect, predicate, timeout)


async def _rest(proc: Proc) -> list[str]:
    """Every line the (exited) process printed."""
    with contextlib.suppress(EOFError):
        await asyncio.to_thread(proc.expect, lambda line: False, 30)
    return proc.lines


async def test_sustained_run_over_a_link_with_latency_stalls_and_resets(
    db: AsyncConnectionPool, database_url: str, worker_env: dict[str, str], tmp_path: Path
) -> None:
    async with db.connection() as conn:
        await conn.execute("DROP TABLE IF EXISTS link_tallies")
        await conn.execute(TALLIES_TABLE)
    link_a = Proxy(database_url, delay=RTT / 2)
    link_b = Proxy(database_url, delay=RTT / 2)
    procs: dict[str, Proc] = {}
    loop = asyncio.get_running_loop()
    async with link_a.running(), link_b.running():
        try:
            for host, link in (("A", link_a), ("B", link_b)):
                assert link.url is not None
                env = {
                    **worker_env,
                    "DATABASE_URL": link.url,
                    "LINK_HOST": host,
                    "LINK_REPORT": str(tmp_path / f"{host}.json"),
                    "PGENOUGH_NETWORK_TIMEOUT": str(NETWORK_TIMEOUT),
                    "PGENOUGH_WORKER_LEASE": str(LEASE),
                    "PGENOUGH_RESCUE_INTERVAL": "1",
                    "PGENOUGH_WORKER_POLL_INTERVAL": "1",
                }
                procs[host] = Proc.pgenough(
                    env, "worker", "run", "tests.helpers.linkapp:app", "--concurrency", "10"
                )
            names = {}
            for host, proc in procs.items():
                line = await _lines(proc, lambda s: "task(s); queues" in s, 60)
                names[host] = next(w for w in line.split() if w.startswith("worker-")).rstrip(":")
            link_a.inject(RANDOM_FAULTS)

            # -- the run: a producer next to the database, B's stalls on schedule --
            effect_ids: list[int] = []
            tallies = 0
            start = loop.time()
            progress: list[tuple[float, int, int]] = []  # (t, effects of A, effects of B)

            async def produce() -> None:
                """Keep ``BACKLOG`` effect jobs ready (the workers' pace sets the rate) and
                add ``TALLIES_PER_TICK`` batch items, every ``TICK``."""
                nonlocal tallies
                tick = 0
                async with db.connection() as conn:
                    while (t := loop.time() - start) < PRODUCE_S:
                        ready = await _scalar(db, READY, effect.queue)
                        async with conn.transaction():
                            for _ in range(min(MAX_PER_TICK, max(0, BACKLOG - ready))):
                                job_id = await effect.enqueue(conn, n=len(effect_ids))
                                assert job_id is not None
                                effect_ids.append(job_id)
                            for _ in range(TALLIES_PER_TICK):
                                await tally.enqueue(conn, n=tallies)
                                tallies += 1
                        tick += 1
                        await asyncio.sleep(max(0.0, start + tick * TICK - loop.time()))
                        if tick % 10 == 0:
                            cur = await conn.execute(
                                "SELECT count(*) FILTER (WHERE worker = 'A'),"
                                " count(*) FILTER (WHERE worker = 'B') FROM effects"
                            )
                            a, b = (await cur.fetchone()) or (0, 0)
                            progress.append((t, a, b))

            producer = asyncio.create_task(produce())

            # B's short stall: a pause; every connection of B lives through it.
            await asyncio.sleep(start + SHORT_AT - loop.time())
            before_short = link_b.open_connections()
            assert before_short, "host B has no connection open"
            link_b.stall_link(SHORT_STALL)
            await asyncio.sleep(SHORT_STALL + NETWORK_TIMEOUT / 2)
            died = [c for c in before_short if not c.is_open]
            assert not died, f"connections of B died in a {SHORT_STALL:g} s stall: {died}"

            # B's long stall: a dead link; every connection of B found dead, by both ends.
            await asyncio.sleep(start + LONG_AT - loop.time())
            before_long = link_b.open_connections()
            async with db.connection() as conn:
                cur = await conn.execute(
                    "SELECT id, attempts, clock_timestamp() FROM pgenough.jobs"
                    " WHERE state = 'running' AND kind = %s AND worker LIKE %s",
                    (effect.name, names["B"] + "%"),
                )
                rows = await cur.fetchall()
                long_at = await _scalar(db, "SELECT clock_timestamp()")
            # The claims B held when its link died: job id -> its attempt.
            held_by_b = {job_id: attempts for job_id, attempts, _ in rows}
            ports = [c.upstream_port for c in before_long if c.upstream_port]
            link_b.stall_link(LONG_STALL)
            healed_at = loop.time() + LONG_STALL
            if ports:  # a TCP server: its end of each session gives up too (server_side)
                await asyncio.sleep(NETWORK_TIMEOUT + 3)
                assert link_b.link_stalled()
                left = await _scalar(
                    db, "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)", ports
                )
                assert left == 0, f"{left} session(s) of B outlived the dead link on the server"
            await asyncio.sleep(healed_at - loop.time() + 5)
            alive = [c for c in before_long if c.is_open]
            assert not alive, f"connections of B outlived a {LONG_STALL:g} s dead link: {alive}"
            b_after_heal = await _scalar(db, "SELECT count(*) FROM effects WHERE worker = 'B'")

            await producer
            produced_at = loop.time()
            link_a.calm()

            # -- the end: everything done, exactly once --
            n_effects, n_tallies = len(effect_ids), tallies
            deadline = loop.time() + 30
            while True:
                done = await _scalar(db, "SELECT count(*) FROM effects")
                items = await _scalar(db, "SELECT count(DISTINCT n) FROM link_tallies")
                left = await _scalar(db, "SELECT count(*) FROM pgenough.jobs")
                if (done, items, left) == (n_effects, n_tallies, 0):
                    break
                assert loop.time() < deadline, (
                    f"after the run: {done}/{n_effects} effects, {items}/{n_tallies} items,"
                    f" {left} job(s) left: "
                    + str(
                        await _scalar(
                            db,
                            "SELECT json_agg(json_build_object('id', id, 'state', state,"
                            " 'attempts', attempts, 'last_error', last_error))"
                            " FROM (SELECT * FROM pgenough.jobs LIMIT 5) j",
                        )
                    )
                )
                await asyncio.sleep(0.2)
            finished_at = loop.time()
            b_last = await _scalar(db, "SELECT count(*) FROM effects WHERE worker = 'B'")
            for proc in procs.values():
                proc.popen.terminate()
            codes = {host: await asyncio.to_thread(p.wait, 60) for host, p in procs.items()}
            logs = {host: await _rest(p) for host, p in procs.items()}
        finally:
            for proc in procs.values():
                proc.kill()

    # Exactly once: each job's effect (primary key) and each batch item (no constraint).
    async with db.connection() as conn:
        cur = await conn.execute("SELECT job_id, attempts, worker FROM effects")
        effects = {job_id: (attempts, host) for job_id, attempts, host in await cur.fetchall()}
        cur = await conn.execute(
            "SELECT n, count(*) FROM link_tallies GROUP BY n HAVING count(*) <> 1"
        )
        doubled = await cur.fetchall()
        # The jobs B ran when its link died: committed by B before the link went silent
        # (a commit in flight), or, their leases run out, taken back and run again (by A,
        # or by B after the heal: a later attempt); never committed by B on the claim it
        # held (its transaction died with its connection, and the lease check refuses a
        # late completion).
        cur = await conn.execute(
            "SELECT job_id, worker, attempts, at > %s FROM effects WHERE job_id = ANY(%s)",
            (long_at + timedelta(seconds=1), list(held_by_b)),
        )
        held_effects = await cur.fetchall()
    assert set(effects) == set(effect_ids)
    assert not doubled, f"batch items committed more than once: {doubled[:10]}"
    late = [
        (job_id, attempts)
        for job_id, host, attempts, after in held_effects
        if host == "B" and after and attempts == held_by_b[job_id]
    ]
    assert not late, f"B committed claims (job, attempt) it held when its link died: {late}"
    taken_back = [job_id for job_id, _, attempts, _ in held_effects if attempts > held_by_b[job_id]]
    assert not held_by_b or taken_back, "none of B's claims was taken back"

    # No handler ran twice on one claim: a job's calls (over both hosts) never exceed the
    # attempts counted by the claims, the last of which committed its effect.
    reports = {host: json.loads((tmp_path / f"{host}.json").read_text()) for host in procs}
    calls: dict[int, int] = {}
    for report in reports.values():
        for job_id, n in report["invocations"].items():
            calls[int(job_id)] = calls.get(int(job_id), 0) + n
    over = {j: (n, effects[j][0]) for j, n in calls.items() if n > effects[j][0]}
    assert not over, (
        f"jobs run more often than claimed (calls, attempts): {list(over.items())[:10]}"
    )
    assert set(calls) == set(effect_ids)

    # A clean stop, no traceback, and what each host went through said in its log.
    assert codes == {"A": 0, "B": 0}, codes
    for host, lines in logs.items():
        tracebacks = [line for line in lines if "Traceback" in line]
        assert not tracebacks, f"host {host}:\n" + "\n".join(lines[-60:])
    b_log = "\n".join(logs["B"])
    assert "listener lost" in b_log  # the dead link, noticed by the listener
    assert "claim failed" in b_log  # and by the claim loops

    # Progress: A through its random faults in every stretch of the run, B after the heal.
    by_a = [a for _, a, _ in progress]
    assert all(a2 > a1 for a1, a2 in zip(by_a, by_a[4:], strict=False)), (
        f"host A made no progress for 4 s: {progress}"
    )
    assert b_last > b_after_heal, "host B made no progress after its link healed"

    # Report: what the link did, and the throughput reached.
    stats_a, stats_b = link_a.stats, link_b.stats
    assert stats_a.stalls >= 10 and stats_a.resets >= 5, stats_a
    retries = sum(calls.values()) - len(effect_ids)
    by_host = {h: sum(1 for _, w in effects.values() if w == h) for h in ("A", "B")}
    rescued = sum(1 for attempts, _ in effects.values() if attempts > 1)
    print(
        f"\nimpaired link, {RTT * 1000:g} ms RTT: {len(effect_ids)} jobs + {n_tallies} batch"
        f" items in {finished_at - start:.1f} s ({len(effect_ids) / (finished_at - start):.0f}"
        f" jobs/s; produced for {produced_at - start:.0f} s, done {finished_at - produced_at:.1f}"
        f" s after the last enqueue); effects by host {by_host}; {rescued} job(s) took more than"
        f" one attempt, {retries} handler call(s) beyond one per job; {len(taken_back)} of the"
        f" {len(held_by_b)} job(s) B ran when its link died taken back and run again"
    )
    print(
        f"link A (random faults): {stats_a}; {stats_a.round_trips / by_host['A']:.1f} round"
        " trips per effect job it ran (claims, transactions, heartbeats, batch items, duties)"
    )
    print(f"link B (a {SHORT_STALL:g} s and a {LONG_STALL:g} s stall): {stats_b}")
    rates = [
        (a2 + b2 - a1 - b1) / (t2 - t1)
        for (t1, a1, b1), (t2, a2, b2) in itertools.pairwise(progress)
    ]
    print(f"completions/s per second of the run: median {statistics.median(rates):.0f}")
