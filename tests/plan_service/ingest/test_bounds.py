"""The bounds the feed module promises, end to end (issue 9, section 6): a depth bomb or an
element with a million attributes fails its run with the reason while the fetch worker's
memory stays flat (measured on a real ``pgenough-plans worker fetch --once`` process), and a field
over its size cap skips its plan only. Real HTTP, real PostgreSQL; every run's end state and
the earlier good plans are checked."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.ingest.feed import (
    MAX_ATTRIBUTES,
    MAX_DEPTH,
    MAX_GAP_BYTES,
    MAX_MARKUP_EQUALS,
    MAX_TITLE_LENGTH,
)
from tests.helpers.procs import ROOT
from tests.plan_service.api.helpers import ServerThread, api_app, api_settings
from tests.plan_service.ingest.feedgen import deep_document, huge_value, render, synthetic
from tests.plan_service.ingest.pipeline import (
    assert_finished,
    dump,
    dump_bytes,
    fetch,
    ingest,
    process,
)
from tests.plan_service.ingest.static import StaticServer
from tests.plan_service.ingest.test_feed import base, plan

pytestmark = pytest.mark.db

DEPTH_BOMB_LEVELS = 10_000_000  # 70 MB
ATTRIBUTE_BOMB = 1_200_000  # attributes of one element: 10 MB, just under libxml2's cap
RSS_MARGIN_KIB = 60 * 1024
LAUNCHER = ROOT / "bench" / "_rusage.py"  # reports the worker's own peak RSS (os.wait4)
PGENOUGH = Path(sys.executable).with_name("pgenough-plans")

GOOD = render(synthetic(300, seed=11))
DEPTH_REASON = f"document nested deeper than {MAX_DEPTH} elements"
ATTRIBUTES_REASON = f"more than {MAX_MARKUP_EQUALS} '=' between two '<'"
GAP_REASON = f"more than {MAX_GAP_BYTES} bytes without a new element"


def depth_bomb() -> Iterator[bytes]:
    """Valid plans first (they must never reach plans), then 10 million nested elements."""
    return deep_document(DEPTH_BOMB_LEVELS, synthetic(50, seed=12))


def attribute_bomb() -> Iterator[bytes]:
    """Valid plans, then one element with 1.2 million attributes, streamed in 64 KiB pieces."""
    *head, tail = (render(synthetic(50, seed=13), pretty=False).rpartition(b"</output>"))[:2]
    yield b"".join(head)
    yield b"<x"
    for start in range(0, ATTRIBUTE_BOMB, 8_000):
        yield b"".join(b' a%x=""' % n for n in range(start, start + 8_000))
    yield b"/>" + tail + b"</planList>"


def value_bomb() -> Iterator[bytes]:
    """One title of 400 MB (tests/plan_service/ingest/test_feed_memory.py measures the worker's
    RSS)."""
    return huge_value(400_000_000)


async def baseline(db: AsyncConnectionPool, server: StaticServer) -> bytes:
    """A good snapshot, processed: what a failed run must leave byte for byte."""
    result = await ingest(db, server.url("/good"), name="bounds")
    await assert_finished(db, result.run_id, "PROCESSED")
    before = await dump_bytes(db)
    assert len(await dump(db)) == 300
    return before


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (depth_bomb, DEPTH_REASON),
        (attribute_bomb, ATTRIBUTES_REASON),
        (value_bomb, GAP_REASON),
    ],
    ids=["depth", "attributes", "value"],
)
async def test_a_hostile_document_fails_its_run_and_harms_nothing(
    db: AsyncConnectionPool, body: Callable[[], Iterable[bytes]], reason: str
) -> None:
    with StaticServer({"/good": GOOD, "/bomb": body}) as server:
        before = await baseline(db, server)
        result = await fetch(db, server.url("/bomb"), name="bounds")
        await process(db)
        run = await assert_finished(db, result.run_id, "FAILED", reason)
        assert len(run["attempts"]) == 1  # a feed error is not retried
        assert await dump_bytes(db) == before
        # The provider's next good snapshot goes through as usual.
        after = await ingest(db, server.url("/good"), name="bounds")
    await assert_finished(db, after.run_id, "PROCESSED")
    assert await dump_bytes(db) == before


def measured_fetch(env: dict[str, str], tmp_path: Path, name: str, url: str) -> dict[str, int]:
    """Run ``pgenough-plans worker fetch --once`` for one provider; its exit code and peak RSS."""
    out = tmp_path / f"{name}.json"
    command = [str(PGENOUGH), "worker", "fetch", "--once", "--provider", f"{name}={url}"]
    launched = subprocess.run(
        [sys.executable, str(LAUNCHER), str(out), "300", *command],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=330,
    )
    assert launched.returncode == 0, launched.stderr
    usage = json.loads(out.read_text())
    return {"code": usage["code"], "maxrss_kib": usage["maxrss_kib"]}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "reason"),
    [(depth_bomb, DEPTH_REASON), (attribute_bomb, ATTRIBUTES_REASON)],
    ids=["depth", "attributes"],
)
async def test_the_fetch_workers_memory_stays_flat_on_a_hostile_document(
    db: AsyncConnectionPool,
    worker_env: dict[str, str],
    tmp_path: Path,
    body: Callable[[], Iterable[bytes]],
    reason: str,
    record_property: Callable[[str, object], None],
) -> None:
    """Before the bounds, 10 million nested elements took the worker from 70 MB to 420 MB and
    a 10 MB start tag of short attributes cost about 220 MB; now either costs what a small
    good snapshot does, give or take a generous margin (a memory bound, not a speed test)."""
    with StaticServer({"/good": GOOD, "/bomb": body}) as server:
        normal = measured_fetch(worker_env, tmp_path, "normal", server.url("/good"))
        hostile = measured_fetch(worker_env, tmp_path, "hostile", server.url("/bomb"))
    record_property("peak_rss_kib_good_snapshot", normal["maxrss_kib"])  # in the JUnit XML
    record_property("peak_rss_kib_hostile_document", hostile["maxrss_kib"])
    assert normal["code"] == 0
    assert hostile["code"] == 1  # --once exits 1 when a run failed
    assert hostile["maxrss_kib"] < normal["maxrss_kib"] + RSS_MARGIN_KIB, (normal, hostile)
    async with db.connection() as conn:
        cur = await conn.execute(
            "SELECT provider, status::text, reason FROM plans.runs ORDER BY id"
        )
        runs = await cur.fetchall()
    assert [r[:2] for r in runs] == [("normal", "STAGED"), ("hostile", "FAILED")]
    assert reason in str(runs[1][2])
    await process(db)
    async with db.connection() as conn:
        cur = await conn.execute("SELECT id FROM plans.runs WHERE provider = 'hostile'")
        row = await cur.fetchone()
    assert row is not None
    await assert_finished(db, row[0], "FAILED", reason)


async def test_fields_over_their_caps_skip_only_their_plans(
    db: AsyncConnectionPool, database_url: str
) -> None:
    """A 9 MB title was once stored and served (a 9.5 MB /search page): now one as long as
    the gap bound allows (longer fails the document) has its plans skipped with the reason,
    and so has a plan with too many attributes; the neighbours are stored and the page stays
    small."""
    snapshot = [
        base("1", [plan("1")]),
        base("2", [plan("2"), plan("3")], title="x" * (MAX_GAP_BYTES - 4096)),
        base("3", [plan("4") | {f"k{n}": "" for n in range(5_000)}, plan("5")]),
        base("4", [plan("6")], title="t" * MAX_TITLE_LENGTH),
    ]
    with StaticServer({"/s": render(snapshot)}) as server:
        result = await ingest(db, server.url("/s"), name="caps")
    run = await assert_finished(db, result.run_id, "PROCESSED")
    assert (run["plans_staged"], run["plans_skipped"]) == (3, 3)
    assert [(s["base_plan_id"], s["plan_id"], s["reason"]) for s in run["skip_samples"]] == [
        ("2", "2", f"title longer than {MAX_TITLE_LENGTH} characters"),
        ("2", "3", f"title longer than {MAX_TITLE_LENGTH} characters"),
        ("3", "4", f"plan with more than {MAX_ATTRIBUTES} attributes"),
    ]
    rows = await dump(db)
    assert [(r[1], r[2]) for r in rows] == [("1", "1"), ("3", "5"), ("4", "6")]
    assert max(len(r[4]) for r in rows) == MAX_TITLE_LENGTH

    with ServerThread(api_app(api_settings(database_url))) as api:
        async with httpx.AsyncClient(base_url=api.url, timeout=30) as client:
            response = await client.get("/search")
    assert response.status_code == 200
    assert len(response.json()["data"]["events"]) == 3
    assert len(response.content) < 5_000
