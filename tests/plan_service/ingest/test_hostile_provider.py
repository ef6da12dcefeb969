"""Providers that misbehave beyond what our simulator does, over real sockets (see
``badprovider.py``), against a real PostgreSQL: every failure ends ITS run as FAILED with a
reason naming it, records the attempt, drops the staging table, leaves the earlier plans
byte-identical, and never touches another provider's run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.ingest import inspect
from pgenough_plans.ingest.fetch import (
    FetchConfig,
    RunResult,
    fetch_all,
    fetch_provider,
    lock_name,
    provider_client,
)
from pgenough_plans.ingest.process import fail_stale_runs
from pgenough_plans.sim.data import render_snapshot
from tests.plan_service.ingest.badprovider import (
    BadProvider,
    deflated,
    gzipped,
    in_turn,
    lying_length,
    paced,
    redirect,
    respond,
    status,
    trickle,
)
from tests.plan_service.ingest.pipeline import (
    advisory_holders,
    dump_bytes,
    fetch,
    ingest,
    loose_ends,
    provider,
    run_row,
    running,
    until_phase,
)

pytestmark = pytest.mark.db

DOCUMENT = b"".join(render_snapshot(seed=5, version=1, plans=300))
"""A valid snapshot of 300 plans (about 130 KB)."""


@pytest.fixture
def bad() -> Iterator[BadProvider]:
    with BadProvider() as server:
        server["/good"] = respond(DOCUMENT, headers={"Content-Type": "application/xml"})
        yield server


async def assert_failed(
    db: AsyncConnectionPool, result: RunResult, reason: str, attempts: int | None = None
) -> dict[str, Any]:
    assert result.status == "FAILED", result
    assert result.reason is not None
    assert reason in result.reason, result.reason
    run = await run_row(db, result.run_id)
    assert run["status"] == "FAILED"
    assert run["reason"] == result.reason
    assert not run["has_staging"]
    if attempts is not None:
        assert len(run["attempts"]) == attempts, run["attempts"]
    assert await loose_ends(db) == (0, 0)
    return run


@pytest.fixture
async def baseline(db: AsyncConnectionPool, bad: BadProvider) -> bytes:
    """A good snapshot of provider ``bad``, processed: what its failed runs must not touch."""
    result = await ingest(db, bad.url("/good"), "bad")
    assert result.status == "STAGED"
    assert result.plans_staged > 250
    return await dump_bytes(db)


# -- redirects ------------------------------------------------------------------------------


async def test_a_redirect_loop_fails_its_run_at_once(
    db: AsyncConnectionPool, bad: BadProvider, baseline: bytes
) -> None:
    bad["/loop"] = redirect("/loop")
    result = await fetch(db, bad.url("/loop"), "bad")
    run = await assert_failed(db, result, "redirect loop: more than 10 redirects", attempts=1)
    assert run["attempts"][0]["redirects"] == 10
    assert bad.hits("/loop") == 11  # followed 10 times, then refused: not retried
    assert await dump_bytes(db) == baseline


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "ftp://127.0.0.1/planList", "gopher://127.0.0.1:70/x"]
)
async def test_a_redirect_to_another_scheme_fails_at_once_naming_it(
    db: AsyncConnectionPool, bad: BadProvider, target: str
) -> None:
    bad["/away"] = redirect(target, status=301)
    result = await fetch(db, bad.url("/away"), "bad")
    await assert_failed(
        db, result, f"redirect refused: HTTP 301 to '{target}'; only http and https", 1
    )
    assert bad.hits("/away") == 1


async def test_a_location_that_is_no_url_fails_at_once(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    bad["/broken"] = redirect("http://[::1")
    result = await fetch(db, bad.url("/broken"), "bad")
    await assert_failed(db, result, "redirect refused: the Location header is not a URL", 1)


async def test_redirects_within_the_host_are_followed(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    bad["/old"] = redirect("/moved", status=301)
    bad["/moved"] = redirect(bad.url("/good"), status=308)
    result = await fetch(db, bad.url("/old"), "bad")
    assert result.status == "STAGED"
    run = await run_row(db, result.run_id)
    assert run["attempts"][0]["redirects"] == 2
    assert run["attempts"][0]["url"] == bad.url("/good")


async def test_a_redirect_to_another_port_follows_the_setting(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    with BadProvider() as other:
        other["/feed"] = respond(DOCUMENT)
        bad["/elsewhere"] = redirect(other.url("/feed"), status=307)
        refused = await fetch(db, bad.url("/elsewhere"), "bad")
        await assert_failed(
            db, refused, f"redirect refused: HTTP 307 to another host, '{other.url('/feed')}'", 1
        )
        assert other.hits("/feed") == 0
        followed = await fetch(db, bad.url("/elsewhere"), "bad", redirect_other_hosts=True)
        assert followed.status == "STAGED"
        assert other.hits("/feed") == 1


# -- bodies that do not decode --------------------------------------------------------------


@pytest.mark.parametrize(
    "behaviour",
    [gzipped(DOCUMENT), deflated(DOCUMENT), deflated(DOCUMENT, raw=True)],
    ids=["gzip", "deflate", "raw-deflate"],
)
async def test_compressed_bodies_are_decoded(
    db: AsyncConnectionPool, bad: BadProvider, baseline: bytes, behaviour: Any
) -> None:
    bad["/packed"] = behaviour
    result = await fetch(db, bad.url("/packed"), "bad")
    assert result.status == "STAGED"
    plain = await fetch(db, bad.url("/good"), "bad")
    assert (result.plans_staged, result.plans_skipped) == (plain.plans_staged, plain.plans_skipped)
    assert bad.requests[-2].headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (gzipped(DOCUMENT, corrupt=True), "gzip body does not decode"),
        (gzipped(DOCUMENT, cut=12), "gzip body is truncated"),
        (
            respond(DOCUMENT, headers={"Content-Encoding": "br"}),
            "unsupported Content-Encoding 'br'",
        ),
        (
            respond(b"\x00" * 100, headers={"Content-Encoding": "deflate"}),
            "deflate body does not decode",
        ),
    ],
    ids=["corrupt-gzip", "truncated-gzip", "brotli", "corrupt-deflate"],
)
async def test_a_body_that_does_not_decode_fails_its_run(
    db: AsyncConnectionPool, bad: BadProvider, baseline: bytes, behaviour: Any, reason: str
) -> None:
    bad["/packed"] = behaviour
    result = await fetch(db, bad.url("/packed"), "bad")
    run = await assert_failed(db, result, reason, attempts=1)
    assert run["attempts"][0]["status"] == 200
    assert await dump_bytes(db) == baseline


# -- bodies that lie or never end -----------------------------------------------------------


async def test_a_content_length_lie_is_retried_as_a_broken_transfer(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    bad["/liar"] = in_turn(lying_length(DOCUMENT[:5000], len(DOCUMENT)), respond(DOCUMENT))
    result = await fetch(db, bad.url("/liar"), "bad")
    assert result.status == "STAGED"
    run = await run_row(db, result.run_id)
    assert [a.get("error", "")[:16] for a in run["attempts"]] == ["transport error:", ""]

    bad["/liar"] = lying_length(DOCUMENT[:5000], len(DOCUMENT))
    failed = await fetch(db, bad.url("/liar"), "bad", max_attempts=2)
    await assert_failed(db, failed, "transport error", attempts=2)


async def test_a_trickle_below_the_floor_is_retried_then_fails(
    db: AsyncConnectionPool, bad: BadProvider, baseline: bytes
) -> None:
    bad["/trickle"] = trickle(DOCUMENT, per_second=1, first=200)
    began = time.monotonic()
    result = await fetch(
        db, bad.url("/trickle"), "bad", low_speed_time=1.0, low_speed_limit=1024, max_attempts=2
    )
    elapsed = time.monotonic() - began
    run = await assert_failed(db, result, "too slow: ", attempts=2)
    assert "below the floor of 1024 bytes/s (attempt 2 of 2)" in result.reason  # type: ignore[operator]
    assert run["attempts"][0]["retry_in"] > 0  # retried like a timeout
    assert elapsed < 15, elapsed
    assert await advisory_holders(db, lock_name("bad")) == []
    assert await dump_bytes(db) == baseline


async def test_the_run_deadline_ends_a_stream_above_the_floor(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    big = b"".join(render_snapshot(seed=5, version=2, plans=3000))
    bad["/slowly"] = paced(big, per_second=100_000)  # ~13 s for the whole body
    result = await fetch(
        db, bad.url("/slowly"), "bad", config=FetchConfig(chunk_pages=16, deadline=1.5)
    )
    await assert_failed(
        db,
        result,
        "deadline: the fetch did not finish within 1.5 s (it was streaming the body"
        " (attempt 1 of 4))",
        attempts=0,
    )


async def test_a_retry_after_longer_than_the_stale_limit_keeps_the_run_alive(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    """Waiting to retry heartbeats: the reaper must not take a run that is only waiting."""
    bad["/busy"] = in_turn(status(503, retry_after="2"), respond(DOCUMENT))
    config = FetchConfig(chunk_pages=16, heartbeat=0.2, stale_after=1.0)
    task = asyncio.create_task(fetch(db, bad.url("/busy"), "bad", config=config))
    await until_phase(db, "bad", "waiting 2 s to retry after HTTP 503", running(task))
    for _ in range(8):
        async with db.connection() as conn:
            assert await fail_stale_runs(conn, stale_after=1.0) == []
        await asyncio.sleep(0.25)
    assert (await task).status == "STAGED"


# -- stopping, and what else can go wrong mid-fetch -----------------------------------------


async def start_fetch(
    db: AsyncConnectionPool, url: str, stop: asyncio.Event, **kw: Any
) -> asyncio.Task[RunResult | None]:
    async def go() -> RunResult | None:
        async with provider_client() as client:
            return await fetch_provider(
                db,
                client,
                provider(url, "bad", **kw),
                FetchConfig(chunk_pages=16),
                owner="test",
                stop=stop,
            )

    return asyncio.create_task(go())


@pytest.mark.parametrize(
    ("route", "behaviour", "phase"),
    [
        (
            "/trickle",
            trickle(DOCUMENT, per_second=1, first=500),
            "streaming the body (attempt 1 of 4)",
        ),
        (
            "/busy",
            status(503, retry_after="60"),
            "waiting 60 s to retry after HTTP 503 (attempt 1 of 4)",
        ),
    ],
    ids=["streaming", "waiting-to-retry"],
)
async def test_a_stop_ends_the_fetch_at_once_saying_what_it_was_doing(
    db: AsyncConnectionPool, bad: BadProvider, route: str, behaviour: Any, phase: str
) -> None:
    bad[route] = behaviour
    stop = asyncio.Event()
    task = await start_fetch(db, bad.url(route), stop)
    await until_phase(db, "bad", phase, running(task))
    assert len(await advisory_holders(db, lock_name("bad"))) == 1
    async with db.connection() as conn:  # what `pgenough run ID` and the dashboard show
        (shown,) = await inspect.list_runs(conn, status="RUNNING")
        detail = await inspect.get_run(conn, shown.id)
    assert detail is not None
    assert detail.phase == phase
    stop.set()
    began = time.monotonic()
    result = await asyncio.wait_for(task, 5)
    assert time.monotonic() - began < 2
    assert result is not None
    await assert_failed(db, result, f"worker stopped while {phase}")
    assert await advisory_holders(db, lock_name("bad")) == []


async def test_a_lost_database_connection_fails_the_run_on_another(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    bad["/trickle"] = trickle(DOCUMENT, per_second=2, first=500)
    task = await start_fetch(db, bad.url("/trickle"), asyncio.Event())
    await until_phase(db, "bad", "streaming the body", running(task))
    (holder,) = await advisory_holders(db, lock_name("bad"))
    async with db.connection() as conn:
        await conn.execute("SELECT pg_terminate_backend(%s)", (holder,))
    result = await asyncio.wait_for(task, 10)
    assert result is not None
    await assert_failed(
        db, result, "database connection lost while streaming the body (attempt 1 of 4): "
    )


async def test_a_bug_in_a_callback_fails_only_its_run(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    def broken(progress: object) -> None:
        raise RuntimeError("progress display broke")

    async with provider_client() as client:
        result = await fetch_provider(
            db,
            client,
            provider(bad.url("/good"), "bad"),
            FetchConfig(chunk_pages=16, copy_batch=50),
            owner="test",
            on_progress=broken,
        )
    assert result is not None
    await assert_failed(
        db,
        result,
        "internal error while streaming the body (attempt 1 of 4): RuntimeError: progress"
        " display broke",
    )


async def test_one_bad_provider_never_touches_another(
    db: AsyncConnectionPool, bad: BadProvider
) -> None:
    """Every kind of failure at once, beside a healthy provider, in one round."""
    bad["/loop"] = redirect("/loop")
    bad["/file"] = redirect("file:///etc/passwd")
    bad["/gzip"] = gzipped(DOCUMENT, corrupt=True)
    bad["/trickle"] = trickle(DOCUMENT, per_second=1)
    bad["/gone"] = status(410)
    expected = {
        "loop": "redirect loop",
        "file": "redirect refused",
        "gzip": "gzip body does not decode",
        "trickle": "too slow",
        "gone": "HTTP 410 (not retried)",
    }
    providers = [
        provider(bad.url(f"/{name}"), name, low_speed_time=1.0, max_attempts=2) for name in expected
    ]
    providers.append(provider(bad.url("/good"), "healthy"))
    results = await fetch_all(db, providers, FetchConfig(chunk_pages=16), owner="test")
    by_name = {r.provider: r for r in results if r is not None}
    assert by_name["healthy"].status == "STAGED"
    assert by_name["healthy"].plans_staged > 250
    for name, reason in expected.items():
        await assert_failed(db, by_name[name], reason)
    assert await loose_ends(db) == (0, 0)


async def test_the_client_fetch_uses_never_follows_redirects_itself() -> None:
    async with provider_client() as client:
        assert client.follow_redirects is False
        assert isinstance(client, httpx.AsyncClient)
