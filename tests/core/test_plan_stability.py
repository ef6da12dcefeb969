"""Every hot statement on the jobs table runs on an index plan, whatever the table's
statistics history: a worker that started on an empty queue and then meets a burst must not
keep a plan made for the empty table.

The trap (issue 20): psycopg prepares a statement after 5 executions and PostgreSQL then
keeps a *generic* plan when it costs no more than the custom ones did. Built while the table
was empty, that plan is a Seq Scan, kept until an ANALYZE or a VACUUM invalidates it; on
200k rows a claim then read every page (a Sort spilled to disk), a completion scanned the
table for one id and a heartbeat ran a nested loop over two Seq Scans. So each test runs the
product's own calls, on one connection, enough times on an empty or nearly empty analysed
table to get a generic plan, loads 200k rows without ANALYZE
(autovacuum off for the table meanwhile), then reads the plan of the next call as PostgreSQL
executed it, from ``auto_explain`` (``EXPLAIN (ANALYZE, BUFFERS)`` of every statement the
session runs, sent to the client as a notice): the buffers it touched are bounded by the
rows it handles, not the table, and no node scans the table sequentially. Nothing here
depends on timing.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    Interval,
    Job,
    Periodic,
    PeriodicTask,
    Worker,
    WorkerConfig,
    complete,
    get_job,
    open_pool,
)
from pgenough.core.admin import discard_job, retry_job
from pgenough.core.maintenance import MaintenanceConfig, requeue_stuck
from pgenough.core.queue import complete_many, record_failure
from pgenough.core.worker._executor import Executor
from pgenough_plans.ingest.process import PLANS_QUEUE
from tests.helpers.explain import Plans, explain_on

pytestmark = pytest.mark.db

ROWS = 200_000
PRIMES = 12
"""Executions on the empty table: psycopg prepares at the 6th, PostgreSQL builds the generic
plan at the 6th execution of the prepared statement, the 11th in all."""
PRIME_ID = 1_000_000
"""An id no row has, in the same int4 range as the real ones (psycopg sends a Python int as
the smallest type that holds it, and a statement with other types is another prepared one)."""
STATEMENT_TIMEOUT = 10.0
WORKER = "plan-test-worker"
BATCH = 10


@dataclass(frozen=True)
class Session:
    pool: AsyncConnectionPool
    """One connection: every call of the product below runs on it."""
    plans: Plans
    executor: Executor
    """A worker's executor of queue ``default``."""
    chunks: Executor
    """The plan service's (``pgenough worker process``): its chunk claims."""
    periodic: Periodic

    async def explain(self, call: Callable[[], Awaitable[object]]) -> list[dict[str, Any]]:
        """Run ``call`` with auto_explain on; the plans of what it executed."""
        async with self.pool.connection() as conn:
            await conn.execute("SET auto_explain.log_min_duration = 0")
        first = len(self.plans.reports)
        try:
            await call()
        finally:
            async with self.pool.connection() as conn:
                await conn.execute("SET auto_explain.log_min_duration = -1")
        # The SET that turned it off is reported too.
        return [r for r in self.plans.reports[first:] if "auto_explain" not in r["Query Text"]]


@pytest.fixture
async def session(
    db: AsyncConnectionPool, database_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[Session]:
    # A statement on the plan this test guards against runs for minutes (a heartbeat's
    # nested loop over two Seq Scans: an hour): bounded, a regression fails, not hangs.
    pool = await open_pool(
        database_url,
        min_size=1,
        max_size=1,
        name="plan-test",
        statement_timeout=STATEMENT_TIMEOUT,
        prepared_statements=getattr(request, "param", True),
    )
    plans = Plans()
    async with pool.connection() as conn:
        try:
            await explain_on(conn, plans, "log_min_duration = -1")
        except BaseException:
            await pool.close()
            raise
    # Nothing may ANALYZE the tables behind the test's back (that would fix the plans).
    async with db.connection() as conn:
        for table in ("pgenough.jobs", "pgenough.periodic"):
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    config = WorkerConfig(batch_size=BATCH, lease=60)
    worker = Worker(
        pool,
        {},
        config,
        replace(config, queue=PLANS_QUEUE, maintenance=config.maintenance),
        name=WORKER,
    )
    executor, chunks = worker._executors
    try:
        yield Session(pool, plans, executor, chunks, Periodic(pool, replica=WORKER))
    finally:
        await pool.close()
        async with db.connection() as conn:
            for table in ("pgenough.jobs", "pgenough.periodic"):
                await conn.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")


def fake_job(
    job_id: int, attempts: int = 1, queue: str = "default", created_at: datetime | None = None
) -> Job:
    """A claim of job ``job_id`` (``created_at``: the job's own, for a claim that is still
    its own: a claim is the id, the attempt and the enqueue time)."""
    now = datetime.now().astimezone()
    return Job(job_id, queue, "k", None, 0, attempts, 20, now, created_at or now)


@dataclass(frozen=True)
class Hot:
    """One of the product's calls that runs a hot statement, as the worker or a handler
    makes it, on the session's connection."""

    name: str
    prime: Callable[[Session], Awaitable[object]]
    """The call on the empty table."""
    measured: Callable[[Session, list[Job]], Awaitable[object]]
    """The call after the burst, on jobs picked for it (running, ours)."""
    rows: int
    """Rows the measured call handles, which bound the buffers it may touch."""


async def _claim(executor: Executor, s: Session, done: list[Job] | None = None) -> object:
    """A claim on the connection the claim loop holds, as it holds it (``_hold``)."""
    conn, restore = await executor._hold()
    try:
        return await executor._claim(conn, done or [], BATCH)
    finally:
        await executor._unhold(conn, restore)


async def _claim_after(s: Session) -> object:
    """The claim past the last claimed position (what most claims of a busy worker are)."""
    s.executor._after = (0, datetime(2000, 1, 1).astimezone(), 1)
    s.executor._rescan_at = float("inf")
    try:
        return await _claim(s.executor, s)
    finally:
        s.executor._after = None
        s.executor._rescan_at = 0.0


async def _ack_in_claim(s: Session, jobs: list[Job]) -> object:
    """The batched acknowledgement of finished jobs, in the claim statement."""
    return await _claim(s.executor, s, jobs)


async def _on_conn(s: Session, call: Callable[[Any], Awaitable[object]]) -> object:
    async with s.pool.connection() as conn:
        return await call(conn)


def _inflight(s: Session, jobs: list[Job]) -> None:
    s.executor.flight.inflight = {j.id: (j, None) for j in jobs}  # type: ignore[misc]


async def _beat(s: Session, jobs: list[Job]) -> None:
    _inflight(s, jobs)
    try:
        await s.executor.heartbeat.beat()
    finally:
        s.executor.flight.inflight = {}


async def _hand_back(s: Session, jobs: list[Job]) -> None:
    async with s.pool.connection() as conn:
        await s.executor._hand_back(conn, jobs)


RESCUE = MaintenanceConfig(batch=BATCH)
PRIMED = [fake_job(PRIME_ID + n) for n in range(BATCH)]

HOT = [
    Hot("claim", lambda s: _claim(s.executor, s), lambda s, _: _claim(s.executor, s), BATCH),
    Hot("claim_after", _claim_after, lambda s, _: _claim_after(s), BATCH),
    Hot("chunk claim", lambda s: _claim(s.chunks, s), lambda s, _: _claim(s.chunks, s), BATCH),
    Hot("ack in the claim", lambda s: _ack_in_claim(s, PRIMED), _ack_in_claim, 2 * BATCH),
    Hot(
        "complete",
        lambda s: _on_conn(s, lambda c: _swallow(complete(c, PRIMED[0]))),
        lambda s, jobs: _on_conn(s, lambda c: complete(c, jobs[0])),
        1,
    ),
    Hot(
        "complete_many",
        lambda s: _on_conn(s, lambda c: complete_many(c, PRIMED)),
        lambda s, jobs: _on_conn(s, lambda c: complete_many(c, jobs)),
        BATCH,
    ),
    Hot("heartbeat", lambda s: _beat(s, PRIMED), _beat, BATCH),
    Hot(
        "fail",
        lambda s: _on_conn(s, lambda c: record_failure(c, PRIMED[0], "boom", 1.0, give_up=False)),
        lambda s, jobs: _on_conn(
            s, lambda c: record_failure(c, jobs[0], "boom", 1.0, give_up=False)
        ),
        1,
    ),
    Hot("release", lambda s: _hand_back(s, PRIMED), _hand_back, BATCH),
    Hot(
        "requeue_stuck",
        lambda s: _on_conn(s, lambda c: requeue_stuck(c, RESCUE)),
        lambda s, _: _on_conn(s, lambda c: requeue_stuck(c, RESCUE)),
        BATCH,
    ),
    Hot(
        "retry_job",
        lambda s: _on_conn(s, lambda c: _swallow(retry_job(c, PRIME_ID))),
        lambda s, jobs: _on_conn(s, lambda c: _swallow(retry_job(c, jobs[0].id))),
        1,
    ),
    Hot(
        "discard_job",
        lambda s: _on_conn(s, lambda c: _swallow(discard_job(c, PRIME_ID))),
        lambda s, jobs: _on_conn(s, lambda c: discard_job(c, jobs[0].id)),
        1,
    ),
    Hot(
        "get_job",
        lambda s: _on_conn(s, lambda c: get_job(c, PRIME_ID)),
        lambda s, jobs: _on_conn(s, lambda c: get_job(c, jobs[0].id)),
        1,
    ),
]


async def _swallow(call: Awaitable[object]) -> None:
    """A call that raises on a row that is not there (the priming ids are nobody's)."""
    try:
        await call
    except Exception as exc:  # LeaseLost, JobNotFound
        if type(exc).__name__ not in ("LeaseLost", "JobNotFound"):
            raise


def problems(reports: list[dict[str, Any]], table: str, rows: int, pages: int) -> list[str]:
    """What is wrong with these plans: a sequential scan of ``table``, or more buffers than
    the rows handled justify (20 a row and 100 more: index pages, heap pages, the indexes an
    update maintains; an index plan claiming 10 jobs touches about 155), when the table has
    ``pages`` pages."""
    bound = 20 * rows + 100
    assert pages > 5 * bound, "the table is too small for the bound to tell the plans apart"
    found = []
    if not reports:
        found.append("no statement was reported")
    for report in reports:
        plan = report["Plan"]
        touched = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
        seq = [
            n
            for n in _nodes(plan)
            if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == table
        ]
        if seq or touched > bound:
            query = " ".join(report["Query Text"].split())[:80]
            found.append(
                f"{touched} buffers (bound {bound}, table {pages} pages),"
                f" {len(seq)} Seq Scan(s) of {table}: {query}"
            )
    return found


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out.extend(_nodes(child))
    return out


async def burst(db: AsyncConnectionPool) -> tuple[list[Job], int]:
    """200k ready jobs, some of them running (ours, leases live or expired); no ANALYZE.
    Returns running jobs of ours, and the table's pages."""
    async with db.connection() as conn, conn.transaction():
        # Running claims of ours among them, one row in 89: spread over the table's pages as
        # a busy queue's are (an UPDATE would put them all at its end), ids in the int4
        # range of PRIME_ID.
        await conn.execute(
            "INSERT INTO pgenough.jobs (queue, kind, payload, state, attempts, worker,"
            "                           lease_until, claimed_at)"
            " SELECT CASE WHEN n %% 10 = 0 THEN %(plans)s ELSE 'default' END, 'k',"
            "        jsonb_build_object('n', n),"
            "        CASE WHEN r THEN 'running' ELSE 'ready' END::pgenough.job_state,"
            "        CASE WHEN r THEN 1 ELSE 0 END, CASE WHEN r THEN %(worker)s END,"
            "        CASE WHEN r THEN now() + interval '1 hour' END, CASE WHEN r THEN now() END"
            " FROM generate_series(1, %(rows)s) n, LATERAL (SELECT n %% 89 = 0 AS r) running",
            {"plans": PLANS_QUEUE, "rows": ROWS, "worker": WORKER},
        )
        cur = await conn.execute(
            "SELECT id FROM pgenough.jobs WHERE state = 'running' AND id > 32767"
        )
        ids = sorted(row[0] for row in await cur.fetchall())
        # A few expired, for the rescuer.
        await conn.execute(
            "UPDATE pgenough.jobs SET lease_until = now() - interval '1 hour' WHERE id = ANY(%s)",
            (ids[-BATCH - 5 :],),
        )
        cur = await conn.execute("SELECT pg_relation_size('pgenough.jobs') / 8192")
        pages = int((await cur.fetchone())[0])  # type: ignore[index]
    rng = random.Random(7)
    picked = rng.sample(ids[: -BATCH - 5], 5 * len(HOT) * BATCH)
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT id, created_at FROM pgenough.jobs WHERE id = ANY(%s)", (picked,)
        )
        created = dict(await cur.fetchall())
    return [fake_job(i, created_at=created[i]) for i in picked], pages


HISTORIES = [
    "analysed empty",
    "analysed with 100 dead jobs",
    "analysed busy: 20k ready, none running",
    "vacuumed nearly empty after a burst",
]


@pytest.mark.parametrize("history", HISTORIES)
async def test_hot_statements_keep_an_index_plan_after_a_burst(
    db: AsyncConnectionPool, session: Session, history: str
) -> None:
    await _hot_statements_after_a_burst(db, session, history)


@pytest.mark.parametrize("session", [False], indirect=True, ids=["unprepared"])
@pytest.mark.parametrize("history", HISTORIES[-1:])
async def test_hot_statements_keep_an_index_plan_on_a_pool_that_does_not_prepare(
    db: AsyncConnectionPool, session: Session, history: str
) -> None:
    """``open_pool(prepared_statements=False)`` (behind a transaction pooler): the claim
    loop leaves the session's settings alone, and the claim rules out a Sort all the same."""
    await _hot_statements_after_a_burst(db, session, history)


async def _hot_statements_after_a_burst(
    db: AsyncConnectionPool, session: Session, history: str
) -> None:
    """The last history is not about cached plans: planned at each execution, the statements
    on a running job by id scanned the whole rescuer's index (its rows taken for none) until
    its predicate stopped being state = 'running' (core migration 0003). (A table never
    analysed since its TRUNCATE is planned as 10 pages, which gives index plans even cached:
    not a history that can show the trap.)"""
    async with db.connection() as conn:
        await conn.execute("TRUNCATE pgenough.jobs")
        if history == "analysed with 100 dead jobs":
            await conn.execute(
                "INSERT INTO pgenough.jobs (kind, state, finished_at)"
                " SELECT 'k', 'dead', now() FROM generate_series(1, 100)"
            )
        elif history.startswith("analysed busy"):
            # What autovacuum sees of a queue keeping up: ready jobs, no running one in its
            # sample, so every row of an index on running jobs looks like none.
            await conn.execute(
                "INSERT INTO pgenough.jobs (kind, queue)"
                " SELECT 'k', 'elsewhere' FROM generate_series(1, 20000)"
            )
        elif history.startswith("vacuumed"):
            # A busy queue between two bursts, as (auto)vacuum finds it: its pages full of
            # dead rows and a few live ones on pages across the table, so the table keeps its
            # pages while its statistics say 20 rows. An index with 20 rows in 1,000 pages
            # looks like 50 pages a row: at each execution the claim was then planned as a
            # Seq Scan and a Sort of the table (on 150k ready jobs, 208 ms a claim), until
            # an ANALYZE of the next burst.
            await conn.execute(
                "INSERT INTO pgenough.jobs (kind) SELECT 'k' FROM generate_series(1, %s)",
                (ROWS,),
            )
            await conn.execute("DELETE FROM pgenough.jobs WHERE id % 10000 <> 0")
            await conn.execute("VACUUM pgenough.jobs")
        await conn.execute("ANALYZE pgenough.jobs")
    for hot in HOT:
        for _ in range(PRIMES):
            await hot.prime(session)
    running, pages = await burst(db)
    found = []
    for n, hot in enumerate(HOT):
        jobs = running[n * BATCH : (n + 1) * BATCH]
        reports = await session.explain(lambda h=hot, j=jobs: h.measured(session, j))  # type: ignore[misc]
        found += [f"{hot.name}: {p}" for p in problems(reports, "jobs", hot.rows, pages)]
    assert not found, "plans that read the table:\n" + "\n".join(found)


async def test_the_periodic_claim_keeps_an_index_plan_after_a_burst(
    db: AsyncConnectionPool, session: Session
) -> None:
    task = PeriodicTask("plan-test", Interval(60), _nothing)
    async with db.connection() as conn:
        await conn.execute("ANALYZE pgenough.periodic")
        now = (await (await conn.execute("SELECT now()")).fetchone())[0]  # type: ignore[index]
    for _ in range(PRIMES):
        async with session.pool.connection() as conn:
            await session.periodic.claim_at(conn, task, now)
    async with db.connection() as conn:
        await conn.execute(
            "INSERT INTO pgenough.periodic (name, period, schedule)"
            " SELECT 'other-' || n, 1, 'every 60s' FROM generate_series(1, %s) n",
            (ROWS,),
        )
        cur = await conn.execute("SELECT pg_relation_size('pgenough.periodic') / 8192")
        pages = int((await cur.fetchone())[0])  # type: ignore[index]

    async def claim() -> None:
        async with session.pool.connection() as conn:
            await session.periodic.claim_at(conn, task, now)

    assert problems(await session.explain(claim), "periodic", 1, pages) == []


async def _nothing() -> None:
    pass


@pytest.mark.parametrize("history", ["analysed empty", "vacuumed nearly empty after a burst"])
def test_the_benchmarks_raw_ceiling_keeps_an_index_plan_after_a_burst(
    database_url: str, history: str
) -> None:
    """bench.queue's raw SKIP LOCKED loop (bench/harness/systems/raw.py) is the queue's
    ceiling: it must not fall into the traps either (its cached plan was a nested-loop semi
    join over Seq Scans, O(rows²))."""
    from bench.harness.systems.raw import RAW_SCHEMA, raw_connect, raw_take

    plans = Plans()
    with raw_connect(database_url) as conn:
        conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT:g}s'")
        conn.execute("DROP TABLE IF EXISTS raw_jobs; DROP TYPE IF EXISTS job_state")
        conn.execute(RAW_SCHEMA)
        try:
            conn.execute("ALTER TABLE raw_jobs SET (autovacuum_enabled = false)")
            if history.startswith("vacuumed"):  # as in the product's test above
                conn.execute(
                    "INSERT INTO raw_jobs (kind, payload)"
                    " SELECT 'k', '{}' FROM generate_series(1, %s)",
                    (ROWS,),
                )
                conn.execute("DELETE FROM raw_jobs WHERE id % 10000 <> 0")
                conn.execute("VACUUM raw_jobs")
            conn.execute("ANALYZE raw_jobs")
            try:
                conn.execute("LOAD 'auto_explain'")
            except psycopg.errors.InsufficientPrivilege as exc:
                pytest.skip(f"auto_explain cannot be loaded on this server: {exc}")
            for setting in ("log_analyze", "log_buffers"):
                conn.execute(f"SET auto_explain.{setting} = on")
            conn.execute("SET auto_explain.log_timing = off")
            conn.execute("SET auto_explain.log_format = json")
            conn.execute("SET auto_explain.log_level = notice")
            conn.add_notice_handler(plans.on_notice)
            left = ROWS // 10000 if history.startswith("vacuumed") else 0
            assert sum(len(raw_take(conn, BATCH)) for _ in range(PRIMES)) == left
            conn.execute(
                "INSERT INTO raw_jobs (kind, payload)"
                " SELECT 'k', jsonb_build_object('n', n) FROM generate_series(1, %s) n",
                (ROWS,),
            )
            row = conn.execute("SELECT pg_relation_size('raw_jobs') / 8192").fetchone()
            assert row is not None
            conn.execute("SET auto_explain.log_min_duration = 0")
            assert len(raw_take(conn, BATCH)) == BATCH
            conn.execute("SET auto_explain.log_min_duration = -1")
            reports = [r for r in plans.reports if "raw_jobs" in r["Query Text"]]
            assert problems(reports, "raw_jobs", BATCH, int(row[0])) == []
        finally:
            conn.execute("DROP TABLE IF EXISTS raw_jobs; DROP TYPE IF EXISTS job_state")
