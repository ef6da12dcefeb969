"""A plan listed more than once in one snapshot (issue 9, section 5): its last listing gives
the content whatever the chunking and the order or concurrency of processing, any listing
makes it ever-online, and the run counts the extra listings. Real HTTP, real workers, real
PostgreSQL."""

from __future__ import annotations

import re
from typing import Any

import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool
from rich.console import Console

from pgenough.jsonable import as_json
from pgenough_plans.ingest import inspect, store
from pgenough_plans.ingest.fetch import FetchConfig
from pgenough_plans.render import run_detail as render_run_detail
from tests.plan_service.api.helpers import api_settings, serving
from tests.plan_service.ingest.feedgen import render, synthetic
from tests.plan_service.ingest.model import expected_rows
from tests.plan_service.ingest.pipeline import (
    assert_finished,
    dump,
    dump_bytes,
    fetch,
    ingest,
    process,
    run_row,
)
from tests.plan_service.ingest.records import parse_bytes, write_records
from tests.plan_service.ingest.static import StaticServer
from tests.plan_service.ingest.test_feed import base, plan, zone

pytestmark = pytest.mark.db
PROVIDER = "dups"
ONE_PAGE_CHUNKS = FetchConfig(chunk_pages=1)  # each staging page is a chunk of its own


def listing(base_id: str, plan_id: str, n: int, **extra: Any) -> dict[str, Any]:
    """Listing number ``n`` of a plan: its own title, end and price, so it shows which won."""
    extra.setdefault("title", f"listing {n}")
    return base(
        base_id,
        [plan(plan_id, plan_end_date=f"2021-06-30T2{n}:30:00", zones=[zone(f"{n}.00")])],
        **extra,
    )


def duplicated_snapshot() -> tuple[list[dict[str, Any]], int]:
    """Copies far apart (first and last pages of staging), three copies, sell modes that
    disagree, an end and prices that the last copy drops, and two copies side by side; and
    how many listings repeat a plan listed earlier."""
    filler = synthetic(600, seed=3)
    head = [listing(f"d{k}", "1", 1) for k in range(5)]
    head += [
        listing("triple", "1", 1, sell_mode="online"),
        listing("turns-online", "1", 1, sell_mode="offline"),
        listing("drops", "1", 1),
    ]
    middle = [listing("triple", "1", 2, sell_mode="offline")]
    tail = [listing(f"d{k}", "1", 2) for k in range(5)]
    tail += [
        listing("triple", "1", 3, sell_mode="offline"),
        listing("turns-online", "1", 2, sell_mode="online"),
        base("drops", [plan("1", plan_end_date=None, zones=[])], title="no end, no zones"),
        base(
            "adjacent",
            [plan("1", zones=[zone("1.00")]), plan("1", zones=[zone("2.00")])],
            title="side by side",
        ),
    ]
    snapshot = head + filler[:300] + middle + filler[300:] + tail
    return snapshot, 5 + 2 + 1 + 1 + 1


async def staged_pages(pool: AsyncConnectionPool, run_id: int) -> dict[tuple[str, str], set[int]]:
    """The staging pages of every plan staged more than once."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            sql.SQL(
                "SELECT base_plan_id, plan_id, array_agg((ctid::text::point)[0]::int)"
                " FROM {} GROUP BY 1, 2 HAVING count(*) > 1"
            ).format(store.staging_table(run_id))
        )
        return {(b, p): set(pages) for b, p, pages in await cur.fetchall()}


async def pages_before_the_merge(
    pool: AsyncConnectionPool, doc: bytes
) -> dict[tuple[str, str], set[int]]:
    """Where the copies of each plan land when the document is staged as the fetch worker
    stages it, before the seal merges them: with one page a chunk, the page is the chunk."""
    scratch = 2**40  # a run id no test run reaches
    records, _ = parse_bytes(doc)
    async with pool.connection() as conn:
        await store.create_staging(conn, scratch, PROVIDER)
        writer = store.StagingWriter(scratch)
        for offset in range(0, len(records), 5000):  # the fetch worker's COPY batches
            await write_records(conn, writer, records[offset : offset + 5000])
    try:
        return await staged_pages(pool, scratch)
    finally:
        async with pool.connection() as conn:
            await store.drop_staging(conn, scratch)


async def hold_back_all_but_the_last_chunk(pool: AsyncConnectionPool, run_id: int) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE pgenough.jobs SET run_at = now() + interval '1 hour'"
            " WHERE payload->>'run_id' = %(run)s AND id <> (SELECT max(id) FROM pgenough.jobs"
            "  WHERE payload->>'run_id' = %(run)s)",
            {"run": str(run_id)},
        )


async def release_chunks(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        await conn.execute("UPDATE pgenough.jobs SET run_at = now()")


@pytest.mark.parametrize("order", ["concurrency-1", "concurrency-4", "last-chunk-first"])
async def test_the_last_listing_wins_whatever_the_chunks_and_workers(
    db: AsyncConnectionPool, order: str
) -> None:
    snapshot, duplicates = duplicated_snapshot()
    doc = render(snapshot)
    pages = await pages_before_the_merge(db, doc)
    assert len(pages) == 5 + 4
    spread = {key: p for key, p in pages.items() if key[0] != "adjacent"}
    assert all(len(p) >= 2 for p in spread.values()), spread  # in different chunks
    assert len(pages[("adjacent", "1")]) == 1  # and two copies in one chunk
    with StaticServer({"/planList": doc}) as server:
        result = await fetch(db, server.url("/planList"), PROVIDER, config=ONE_PAGE_CHUNKS)
        assert result.status == "STAGED"
        run = await run_row(db, result.run_id)
        assert run["plans_duplicate"] == duplicates
        assert run["chunks_total"] > max(max(p) for p in pages.values())
        assert await staged_pages(db, result.run_id) == {}  # one row a plan once sealed

        if order == "last-chunk-first":
            await hold_back_all_but_the_last_chunk(db, result.run_id)
            assert (await process(db, concurrency=1)).completed == 1
            await release_chunks(db)
            await process(db, concurrency=1)
        else:
            await process(db, concurrency=int(order.rsplit("-", 1)[1]))
        run = await assert_finished(db, result.run_id, "PROCESSED")
        assert run["plans_duplicate"] == duplicates

        records, _ = parse_bytes(doc)
        rows = await dump(db)
        assert rows == expected_rows(PROVIDER, [(run["started_at"], records)])
        by_key = {(r[1], r[2]): r for r in rows}
        for k in range(5):
            assert by_key[(f"d{k}", "1")][4] == "listing 2"
        triple = by_key[("triple", "1")]
        assert (triple[4], triple[5], str(triple[12]), triple[14]) == (
            "listing 3",
            "offline",
            "3.00",
            True,  # its first listing was online: sticky
        )
        assert by_key[("turns-online", "1")][14] is True
        assert by_key[("drops", "1")][8:9] + by_key[("drops", "1")][12:14] == (None,) * 3
        assert str(by_key[("adjacent", "1")][12]) == "2.00"

        # The same snapshot again: a new run, the same canonical bytes, nothing rewritten.
        before = await dump_bytes(db)
        again = await fetch(db, server.url("/planList"), PROVIDER, config=ONE_PAGE_CHUNKS)
        await process(db, concurrency=4)
    again_run = await assert_finished(db, again.run_id, "PROCESSED")
    assert again_run["plans_duplicate"] == duplicates
    assert await dump_bytes(db) == before
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT plans_written FROM plans.runs WHERE id = %s", (again.run_id,)
        )
        assert await cur.fetchone() == (0,)


async def test_operators_see_the_duplicates_of_a_run(
    db: AsyncConnectionPool, database_url: str
) -> None:
    """The run's count, wherever a run's counts are shown: the read model and its JSON, the
    terminal's run detail, the dashboard's run page."""
    snapshot = [listing("1", "1", 1), listing("1", "1", 2), listing("1", "1", 3)]
    with StaticServer({"/planList": render(snapshot)}) as server:
        result = await ingest(db, server.url("/planList"), name=PROVIDER)
    await assert_finished(db, result.run_id, "PROCESSED")
    async with db.connection() as conn:
        detail = await inspect.get_run(conn, result.run_id)
        [summary] = await inspect.list_runs(conn)
    assert detail is not None
    assert (detail.plans_staged, detail.plans_duplicate, detail.plans_written) == (3, 2, 1)
    assert summary.plans_duplicate == 2
    assert as_json(detail)["plans_duplicate"] == 2
    shown = Console(width=200, record=True)
    shown.print(render_run_detail(detail, detail.started_at))
    assert "3 staged, 0 skipped, 2 duplicate, 1 written" in shown.export_text()
    async with serving(api_settings(database_url)) as (_, client):
        page = (await client.get(f"/ui/runs/{result.run_id}")).text
    assert re.search(r"plans duplicate</dt><dd>2</dd>", page), page
