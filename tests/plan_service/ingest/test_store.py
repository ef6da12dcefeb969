"""The plans tables' own rules, below the pipeline."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue_many
from pgenough_plans.ingest import store
from pgenough_plans.ingest.feed import PlanRecord
from pgenough_plans.ingest.fetch import chunk_jobs
from pgenough_plans.ingest.store import plan_uuid
from tests.plan_service.ingest.records import write_records

pytestmark = pytest.mark.db


@pytest.mark.parametrize(
    ("provider", "base_plan_id", "plan_id"),
    [("fever", "291", "291"), ("prövïdér-ñ", "🎭", "x\x1fy"), ("a", "", "b")],
)
async def test_sql_and_python_derive_the_same_plan_id(
    db: AsyncConnectionPool, provider: str, base_plan_id: str, plan_id: str
) -> None:
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT plans.plan_uuid(%s, %s, %s)", (provider, base_plan_id, plan_id)
        )
        row = await cur.fetchone()
    assert row is not None
    assert row[0] == plan_uuid(provider, base_plan_id, plan_id)
    assert row[0].version == 3


async def test_sql_and_python_plan_ids_agree_in_bulk(db: AsyncConnectionPool) -> None:
    """Every variant digit and a spread of inputs: the PL/pgSQL function (migration 0006)
    derives exactly what Python's uuid3 does."""
    keys = [(f"p{i % 7}", f"b{i}\u00e9\\", f"{i * 7919}\U0001f3ad") for i in range(3000)]
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT plans.plan_uuid(p, b, n) FROM unnest(%s::text[], %s::text[], %s::text[])"
            " WITH ORDINALITY AS k(p, b, n, i) ORDER BY i",
            ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
        )
        got = [row[0] for row in await cur.fetchall()]
    assert got == [plan_uuid(*k) for k in keys]
    assert {str(u)[19] for u in got} == set("89ab")


async def test_a_row_postgres_refuses_is_isolated_and_its_neighbours_written(
    db: AsyncConnectionPool,
) -> None:
    from tests.plan_service.ingest.pipeline import process, run_row

    async with db.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO plans.runs (provider, url, owner, status, chunks_total)"
            " VALUES ('poison', 'http://x', 'test', 'STAGED', 1) RETURNING id"
        )
        row = await cur.fetchone()
        assert row is not None
        run_id = row[0]
        await store.create_staging(conn, run_id, "poison")
        # Seq 5 breaks a CHECK of plans (min above max): the parser never stages such a
        # row, which is exactly why the worker must survive one.
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} (seq, base_plan_id, plan_id, title, sell_mode,"
                " organizer_company_id, starts_at, ends_at, sell_from, sell_to, sold_out,"
                " min_price, max_price) SELECT n, 'b', n::text, 'title', 'online', NULL,"
                " '2030-01-01Z', '2030-01-02Z', NULL, NULL, false,"
                " CASE WHEN n = 5 THEN 9 ELSE 1 END, 2 FROM generate_series(0, 9) n"
            ).format(store.staging_table(run_id))
        )
        await enqueue_many(conn, chunk_jobs(run_id, await store.chunk_ranges(conn, run_id)))
    await process(db)
    run = await run_row(db, run_id)
    assert run["status"] == "PROCESSED"
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT plan_id FROM plans.plans WHERE provider = 'poison' ORDER BY plan_id::int"
        )
        assert [r[0] for r in await cur.fetchall()] == ["0", "1", "2", "3", "4", "6", "7", "8", "9"]
        cur = await conn.execute(
            "SELECT seq, base_plan_id, plan_id, error FROM plans.plan_failures"
        )
        [(seq, base, plan, error)] = await cur.fetchall()
        cur = await conn.execute("SELECT rows_failed FROM plans.runs WHERE id = %s", (run_id,))
        assert await cur.fetchone() == (1,)
    assert (seq, base, plan) == (5, "b", "5")
    assert "check constraint" in error


async def test_the_reaper_fails_runs_whose_worker_stopped_heartbeating(
    db: AsyncConnectionPool,
) -> None:
    from pgenough_plans.ingest.process import fail_stale_runs
    from tests.plan_service.ingest.pipeline import run_row

    async with db.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO plans.runs (provider, url, owner, heartbeat_at) VALUES"
            " ('a', 'http://x', 'gone', now() - interval '10 minutes'),"
            " ('b', 'http://x', 'alive', now()) RETURNING id"
        )
        stale, alive = [r[0] for r in await cur.fetchall()]
        for run_id in (stale, alive):
            await store.create_staging(conn, run_id, "poison")
        assert await fail_stale_runs(conn, stale_after=60) == [stale]
    dead = await run_row(db, stale)
    assert dead["status"] == "FAILED"
    assert str(dead["reason"]).startswith("fetch worker stopped heartbeating at ")
    assert not dead["has_staging"]
    live = await run_row(db, alive)
    assert (live["status"], live["has_staging"]) == ("RUNNING", True)


async def stage(
    conn: AsyncConnection[Any], provider: str, started_at: datetime, *rows: PlanRecord
) -> int:
    """A STAGED run of ``provider`` whose snapshot started at ``started_at``, with ``rows``."""
    cur = await conn.execute(
        "INSERT INTO plans.runs (provider, url, owner, status, started_at, chunks_total)"
        " VALUES (%s, 'http://x', 'test', 'STAGED', %s, 1) RETURNING id",
        (provider, started_at),
    )
    row = await cur.fetchone()
    assert row is not None
    run_id = int(row[0])
    await store.create_staging(conn, run_id, provider)
    await write_records(conn, store.StagingWriter(run_id), rows)
    return run_id


def listing(sell_mode: str, title: str) -> PlanRecord:
    start = datetime(2030, 1, 1, 20, tzinfo=UTC)
    return PlanRecord(
        base_plan_id="b",
        plan_id="1",
        title=title,
        sell_mode=sell_mode,
        organizer_company_id=None,
        starts_at=start,
        ends_at=None,
        sell_from=None,
        sell_to=None,
        sold_out=None,
        min_price=None,
        max_price=None,
        zones=0,
    )


@pytest.mark.parametrize("first", ["newer", "older"])
async def test_an_older_and_a_newer_snapshot_applied_at_once_keep_content_and_the_flag(
    db: AsyncConnectionPool, first: str
) -> None:
    """Two chunks with the same new plan, from an older snapshot (online) and a newer one
    (offline), applied in two transactions at once: the first holds its rows, the second
    starts its statement and waits, then the first commits. Whichever came first: the newer
    snapshot's content, and ever-online (sticky) from the older one. When the older one
    waits, the plan row it must flag was committed after its statement's snapshot: an
    UPDATE would not see it."""
    provider = "race"
    t_old, t_new = datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 1, 2, tzinfo=UTC)
    async with db.connection() as conn:
        old_run = await stage(conn, provider, t_old, listing("online", "older"))
        new_run = await stage(conn, provider, t_new, listing("offline", "newer"))
    runs = {"older": (old_run, t_old), "newer": (new_run, t_new)}
    (first_run, first_at), (second_run, second_at) = (
        runs[first],
        runs["newer" if first == "older" else "older"],
    )

    async def apply(conn: AsyncConnection[Any], run_id: int, at: datetime) -> None:
        await store.apply_chunk(
            conn, run_id=run_id, provider=provider, snapshot_at=at, lo="(0,0)", hi="(1,0)"
        )

    async with db.connection() as holder, db.connection() as waiter, db.connection() as watch:
        async with holder.transaction():
            await apply(holder, first_run, first_at)
            pid = waiter.info.backend_pid

            async def second() -> None:
                async with waiter.transaction():
                    await apply(waiter, second_run, second_at)

            waiting = asyncio.create_task(second())
            # until the second statement waits for the first transaction
            await until_waiting_for_a_lock(watch, pid, waiting)
        await asyncio.wait_for(waiting, 10)
        cur = await watch.execute(
            "SELECT title, sell_mode, ever_online FROM plans.plans WHERE provider = %s",
            (provider,),
        )
        assert await cur.fetchall() == [("newer", "offline", True)]
        cur = await watch.execute(
            "SELECT seen_at, run_id FROM plans.plan_seen WHERE provider = %s", (provider,)
        )
        assert await cur.fetchall() == [(t_new, new_run)]


async def until_waiting_for_a_lock(
    watch: AsyncConnection[Any], pid: int, task: asyncio.Future[Any]
) -> None:
    """Return once backend ``pid`` waits for a lock; fail if ``task`` ends first or 10 s
    pass."""
    deadline = time.monotonic() + 10
    while True:
        cur = await watch.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        )
        row = await cur.fetchone()
        if row is not None and row[0] == "Lock":
            return
        assert not task.done() and time.monotonic() < deadline, "no lock wait"
        await asyncio.sleep(0.01)


async def test_copies_in_a_staging_table_sealed_without_the_merge_end_with_the_last(
    db: AsyncConnectionPool,
) -> None:
    """A run sealed by an older pgenough (no merge_duplicates) with two copies of a plan in
    one chunk: the upsert refuses the statement (it may not affect a row twice), the
    bisection applies the copies apart, and the seq guard keeps the last one."""
    from tests.plan_service.ingest.pipeline import process, run_row

    async with db.connection() as conn:
        run_id = await stage(
            conn,
            "unmerged",
            datetime(2030, 1, 1, tzinfo=UTC),
            listing("online", "first"),
            listing("offline", "last"),
        )
        await enqueue_many(conn, chunk_jobs(run_id, await store.chunk_ranges(conn, run_id)))
    await process(db)
    assert (await run_row(db, run_id))["status"] == "PROCESSED"
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT title, sell_mode, ever_online FROM plans.plans WHERE provider = 'unmerged'"
        )
        assert await cur.fetchall() == [("last", "offline", True)]
        cur = await conn.execute("SELECT count(*) FROM plans.plan_failures")
        assert await cur.fetchone() == (0,)


async def test_copy_text_stages_exactly_what_records_stage(db: AsyncConnectionPool) -> None:
    """The fetch worker's COPY text (``FeedParser(copy_text=True)``) and the typed records
    through psycopg's row formatting load identical staging rows, awkward values included."""
    from pgenough_plans.ingest.feed import FeedParser
    from pgenough_plans.sim.data import render_snapshot
    from tests.plan_service.ingest.feedgen import render
    from tests.plan_service.ingest.records import parse_bytes

    awkward = render(
        [
            {
                "base_plan_id": "b\\1",
                "sell_mode": "ONLINE",
                "title": "tab\there\nnew\rline back\\slash & <amp> \u00e9\U0001f3ad",
                "organizer_company_id": "o\\rg",
                "plans": [
                    {
                        "plan_id": "p\\t1",
                        "plan_start_date": "2021-06-30T21:00:00.123456+02:00",
                        "plan_end_date": "2021-06-30T23:00:00Z",
                        "sell_from": "2021-02-30T00:00:00",
                        "sell_to": "2021-06-30T19:00:00.5",
                        "sold_out": "1",
                        "zones": [{"price": "007"}, {"price": "0.0000001"}, {"price": "12.50"}],
                    },
                    {"plan_id": "p2", "plan_start_date": "0001-01-01T00:00:00",
                     "plan_end_date": "", "sold_out": "maybe", "zones": [{"name": "no price"}]},
                ],
            },
            {
                "base_plan_id": "b2",
                "sell_mode": "offline",
                "title": "",
                "organizer_company_id": "not an id",
                "plans": [{"plan_id": "p3", "plan_start_date": "9999-12-31T23:59:59",
                           "sell_from": "2021-06-30T19:00:00", "sold_out": "false"}],
            },
        ]
    )  # fmt: skip
    for document in (awkward, b"".join(render_snapshot(seed=3, version=2, plans=500))):
        records, _ = parse_bytes(document)
        parser = FeedParser(copy_text=True)
        lines = parser.feed_copy(document[:100]) + parser.feed_copy(document[100:])
        lines += parser.close_copy()
        assert len(lines) == len(records) > 0
        async with db.connection() as conn:
            tables = []
            for run_id, write in ((9001, "records"), (9002, "lines")):
                await store.drop_staging(conn, run_id)
                await store.create_staging(conn, run_id, "copy")
                writer = store.StagingWriter(run_id)
                if write == "records":
                    await write_records(conn, writer, records[:7])
                    await write_records(conn, writer, records[7:])
                else:
                    await writer.write_copy(conn, lines[:7])
                    await writer.write_copy(conn, lines[7:])
                tables.append(store.staging_table(run_id))
            cur = await conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM ((TABLE {0} EXCEPT ALL TABLE {1})"
                    " UNION ALL (TABLE {1} EXCEPT ALL TABLE {0})) d"
                ).format(*tables)
            )
            assert await cur.fetchone() == (0,)
            cur = await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(tables[1]))
            assert await cur.fetchone() == (len(records),)
            for run_id in (9001, 9002):
                await store.drop_staging(conn, run_id)


async def test_a_started_copy_runs_while_the_fetch_goes_on(db: AsyncConnectionPool) -> None:
    """``start_copy`` returns with its COPY still running (the fetch worker parses the next
    batch meanwhile): here the COPY waits for a lock another session holds, and the caller
    goes on. ``flush`` waits for it and counts its rows; the next batch is numbered after it;
    a second start with one in flight is refused; a COPY that fails reports at ``flush``."""
    from pgenough_plans.ingest.feed import FeedParser
    from pgenough_plans.sim.data import render_snapshot

    document = b"".join(render_snapshot(seed=5, version=1, plans=50))
    parser = FeedParser(copy_text=True)
    lines = parser.feed_copy(document) + parser.close_copy()
    assert len(lines) == 50
    run_id = 9003
    table = store.staging_table(run_id)
    async with db.connection() as conn, db.connection() as locker, db.connection() as watch:
        await store.drop_staging(conn, run_id)
        await store.create_staging(conn, run_id, "copy")
        writer = store.StagingWriter(run_id)
        async with locker.transaction():
            await locker.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
            writer.start_copy(conn, lines[:20])
            with pytest.raises(RuntimeError, match="in flight"):
                writer.start_copy(conn, lines[20:])
            copying = asyncio.ensure_future(writer.flush())
            await until_waiting_for_a_lock(watch, conn.info.backend_pid, copying)
        assert await asyncio.wait_for(copying, 10) == 20
        assert await writer.flush() == 0
        writer.start_copy(conn, lines[20:])
        assert await writer.write_copy(conn, []) == 30  # waits for the one in flight first
        cur = await conn.execute(sql.SQL("SELECT seq FROM {} ORDER BY seq").format(table))
        assert [row[0] for row in await cur.fetchall()] == list(range(50))
        await store.drop_staging(conn, run_id)
        writer.start_copy(conn, lines[:1])  # into a table that is gone
        with pytest.raises(psycopg.errors.UndefinedTable):
            await writer.flush()
        writer.reset()
        assert writer.seq == 0
