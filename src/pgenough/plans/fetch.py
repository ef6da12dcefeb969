"""The fetch worker: one run per provider fetch, streamed into staging, sealed when whole.

Per provider, under that provider's advisory lock (a concurrent fetcher skips it):

1. any run of the provider still ``RUNNING`` lost its worker (the lock was free): ``FAILED``;
2. open a run (``RUNNING``) and its staging table;
3. stream the body through the incremental parser into COPY batches, heartbeating progress;
4. seal: ``STAGED`` and its chunk jobs enqueued, in one transaction (the enqueue's NOTIFY
   wakes idle process workers on commit); a snapshot without plans is ``PROCESSED`` at once;
5. or, on any failure (provider, transport, XML), ``FAILED`` with the reason and the staging
   table dropped in the same transaction: nothing of it can reach ``plans``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    DatabaseError,
    LockNotAcquired,
    NewJob,
    advisory_lock,
    bind_log_context,
    enqueue_many,
    log_context,
    named_queries,
)
from pgenough.plans import metrics, store
from pgenough.plans.errors import FeedError, ProviderError, RunLost
from pgenough.plans.events import run_changed
from pgenough.plans.feed import FeedParser, PlanRecord
from pgenough.plans.provider import Attempt, ProviderConfig
from pgenough.plans.provider import fetch as provider_fetch

log = logging.getLogger(__name__)
_Q = named_queries("pgenough.plans", "runs")

PLANS_QUEUE = "plans"
CHUNK_KIND = "apply_chunk"
DEFAULT_COPY_BATCH = 5000
DEFAULT_HEARTBEAT = 5.0
DEFAULT_STALE_AFTER = 60.0


@dataclass(frozen=True)
class FetchConfig:
    copy_batch: int = DEFAULT_COPY_BATCH
    """Parsed plans per COPY statement."""
    chunk_pages: int = store.DEFAULT_CHUNK_PAGES
    """Staging pages per unit of process work."""
    heartbeat: float = DEFAULT_HEARTBEAT
    stale_after: float = DEFAULT_STALE_AFTER
    """A RUNNING run not heartbeating for this long is declared dead by the reaper."""

    def __post_init__(self) -> None:
        if self.copy_batch < 1 or self.chunk_pages < 1:
            raise ValueError("copy_batch and chunk_pages must be >= 1")
        if self.stale_after <= self.heartbeat:
            raise ValueError("stale_after must be longer than the heartbeat interval")


@dataclass(frozen=True)
class RunResult:
    run_id: int
    provider: str
    status: str
    """STAGED, PROCESSED (an empty snapshot) or FAILED."""
    reason: str | None
    plans_staged: int
    plans_skipped: int
    bytes: int


@dataclass
class Progress:
    """What a streaming run has done so far (also handed to progress callbacks)."""

    bytes: int = 0
    staged: int = 0
    skipped: int = 0


def lock_name(provider: str) -> str:
    return f"pgenough.fetch:{provider}"


async def fetch_provider(
    pool: AsyncConnectionPool,
    client: httpx.AsyncClient,
    provider: ProviderConfig,
    config: FetchConfig = FetchConfig(),
    *,
    owner: str,
    on_progress: Callable[[Progress], None] | None = None,
    rng: random.Random | None = None,
) -> RunResult | None:
    """Fetch one snapshot of ``provider``; None when another fetcher holds its lock."""
    with log_context(provider=provider.name):
        try:
            async with advisory_lock(pool, lock_name(provider.name), wait=False) as lock:
                conn = lock.conn
                async with conn.transaction():
                    cur = await conn.execute(_Q["fail_orphaned_runs"], {"provider": provider.name})
                    orphans = [int(r[0]) for r in await cur.fetchall()]
                    for orphan in orphans:
                        await store.drop_staging(conn, orphan)
                        await run_changed(conn, orphan, provider.name, "FAILED")
                for orphan in orphans:
                    metrics.record_failed(provider.name, "orphaned")
                    log.warning(
                        "run %d of %s was orphaned by a dead fetch worker: FAILED",
                        orphan,
                        provider.name,
                    )
                started = time.monotonic()
                result = await _run(pool, conn, client, provider, config, owner, on_progress, rng)
                metrics.FETCH_DURATION.labels(provider.name).observe(time.monotonic() - started)
                return result
        except LockNotAcquired:
            metrics.FETCHES.labels(provider.name, "skipped_locked").inc()
            log.info("provider %s is being fetched by another worker; skipped", provider.name)
            return None


async def _run(
    pool: AsyncConnectionPool,
    conn: psycopg.AsyncConnection[Any],
    client: httpx.AsyncClient,
    provider: ProviderConfig,
    config: FetchConfig,
    owner: str,
    on_progress: Callable[[Progress], None] | None,
    rng: random.Random | None,
) -> RunResult:
    async with conn.transaction():
        cur = await conn.execute(
            _Q["open_run"], {"provider": provider.name, "url": provider.url, "owner": owner}
        )
        row = await cur.fetchone()
        assert row is not None
        run_id, started_at = int(row[0]), row[1]
        await store.create_staging(conn, run_id, provider.name)
        await run_changed(conn, run_id, provider.name, "RUNNING")
    bind_log_context(run_id=run_id)
    log.info("run %d: fetching %s from %s", run_id, provider.name, provider.url)
    progress = Progress()
    parser = FeedParser()
    writer = store.StagingWriter(run_id)
    last_beat = time.monotonic()

    async def beat(force: bool = False) -> None:
        nonlocal last_beat
        if force or time.monotonic() - last_beat >= config.heartbeat:
            last_beat = time.monotonic()
            cur = await conn.execute(
                _Q["heartbeat_run"],
                {
                    "id": run_id,
                    "bytes": progress.bytes,
                    "staged": progress.staged,
                    "skipped": parser.skipped,
                },
            )
            if await cur.fetchone() is None:
                raise RunLost(run_id)

    async def consume(body: AsyncIterator[bytes]) -> None:
        batch: list[PlanRecord] = []
        async for chunk in body:
            progress.bytes += len(chunk)
            batch.extend(parser.feed(chunk))
            if len(batch) >= config.copy_batch:
                progress.staged += await writer.write(conn, batch)
                batch = []
                progress.skipped = parser.skipped
                if on_progress:
                    on_progress(progress)
            # Beat per network chunk, not per COPY batch: a slow but live stream can take
            # longer than stale_after to fill a batch, and must not look dead to the reaper.
            await beat()
        batch.extend(parser.close())
        if batch:
            progress.staged += await writer.write(conn, batch)
        progress.skipped = parser.skipped
        if on_progress:
            on_progress(progress)

    async def restart() -> None:
        nonlocal parser
        await store.truncate_staging(conn, run_id)
        writer.reset()
        parser = FeedParser()
        progress.bytes = progress.staged = progress.skipped = 0

    async def record(attempt: Attempt) -> None:
        await conn.execute(
            _Q["record_attempt"], {"id": run_id, "attempt": json.dumps(attempt.as_json())}
        )

    try:
        await provider_fetch(client, provider, consume, on_attempt=record, restart=restart, rng=rng)
    except (ProviderError, FeedError) as exc:
        failed = await _fail(conn, run_id, provider.name, str(exc), progress, parser)
        metrics.record_failed(provider.name, metrics.failure_reason(exc))
        return failed
    except (RunLost, psycopg.errors.UndefinedTable) as exc:
        # The reaper failed the run and dropped its staging table under us (a COPY into
        # the dropped table is how that shows when it wins the race with the heartbeat).
        # The reaper counted the failure; this fetch only stops.
        if not isinstance(exc, RunLost):
            if await _still_running(conn, run_id):
                raise
            exc = RunLost(run_id)
        log.error("run %d (%s): %s", run_id, provider.name, exc)
        return RunResult(
            run_id,
            provider.name,
            "FAILED",
            str(exc),
            progress.staged,
            parser.skipped,
            progress.bytes,
        )
    return await _seal(conn, run_id, provider.name, started_at, config, progress, parser)


async def _still_running(conn: psycopg.AsyncConnection[Any], run_id: int) -> bool:
    cur = await conn.execute(_Q["get_run"], {"id": run_id})
    row = await cur.fetchone()
    return row is not None and row[3] == "RUNNING"


def _samples(parser: FeedParser) -> str:
    return json.dumps(
        [
            {"reason": s.reason, "base_plan_id": s.base_plan_id, "plan_id": s.plan_id}
            for s in parser.skip_samples
        ]
    )


async def _fail(
    conn: psycopg.AsyncConnection[Any],
    run_id: int,
    provider: str,
    reason: str,
    progress: Progress,
    parser: FeedParser,
) -> RunResult:
    async with conn.transaction():
        await conn.execute(
            _Q["fail_run"],
            {
                "id": run_id,
                "reason": reason,
                "bytes": progress.bytes,
                "staged": progress.staged,
                "skipped": parser.skipped,
                "samples": _samples(parser),
            },
        )
        await store.drop_staging(conn, run_id)
        await run_changed(conn, run_id, provider, "FAILED")
    log.error("run %d (%s) FAILED: %s", run_id, provider, reason)
    return RunResult(
        run_id, provider, "FAILED", reason, progress.staged, parser.skipped, progress.bytes
    )


async def _seal(
    conn: psycopg.AsyncConnection[Any],
    run_id: int,
    provider: str,
    started_at: datetime,
    config: FetchConfig,
    progress: Progress,
    parser: FeedParser,
) -> RunResult:
    duplicates = await store.merge_duplicates(conn, run_id)
    await store.analyze_staging(conn, run_id)
    chunks = await store.chunk_ranges(conn, run_id, config.chunk_pages)
    async with conn.transaction():
        await conn.execute(
            _Q["seal_run"],
            {
                "id": run_id,
                "bytes": progress.bytes,
                "variant": parser.variant,
                "staged": progress.staged,
                "skipped": parser.skipped,
                "duplicates": duplicates,
                "samples": _samples(parser),
                "chunks": len(chunks),
            },
        )
        if chunks:
            await enqueue_many(conn, chunk_jobs(run_id, chunks))
            status = "STAGED"
        else:
            await conn.execute(_Q["mark_processed"], {"id": run_id})
            await store.drop_staging(conn, run_id)
            status = "PROCESSED"
        await run_changed(conn, run_id, provider, status)
    metrics.record_sealed(provider, status, progress.staged, parser.skipped, duplicates)
    log.info(
        "run %d (%s) %s: %d plans staged, %d skipped, %d duplicate(s), %d chunk(s), %.1f MB",
        run_id,
        provider,
        status,
        progress.staged,
        parser.skipped,
        duplicates,
        len(chunks),
        progress.bytes / 1e6,
    )
    return RunResult(
        run_id, provider, status, None, progress.staged, parser.skipped, progress.bytes
    )


def chunk_jobs(run_id: int, chunks: Sequence[tuple[str, str]]) -> list[NewJob]:
    return [
        NewJob(
            CHUNK_KIND,
            {"run_id": run_id, "lo": lo, "hi": hi},
            queue=PLANS_QUEUE,
            dedupe_key=f"run:{run_id}:{lo}",
        )
        for lo, hi in chunks
    ]


async def fail_stale_runs(
    conn: psycopg.AsyncConnection[Any], stale_after: float = DEFAULT_STALE_AFTER
) -> list[int]:
    """The reaper: fail RUNNING runs whose worker stopped heartbeating; drop their staging."""
    async with conn.transaction():
        cur = await conn.execute(_Q["fail_stale_runs"], {"stale_after": stale_after})
        rows = await cur.fetchall()
        failed = [int(run_id) for run_id, _ in rows]
        for run_id, provider in rows:
            await store.drop_staging(conn, run_id)
            await run_changed(conn, run_id, provider, "FAILED")
    for _, provider in rows:
        metrics.record_failed(provider, "stale")
    if failed:
        log.warning(
            "failed %d run(s) whose fetch worker stopped heartbeating: %s", len(failed), failed
        )
    return failed


async def fetch_all(
    pool: AsyncConnectionPool,
    providers: Sequence[ProviderConfig],
    config: FetchConfig = FetchConfig(),
    *,
    owner: str,
    client: httpx.AsyncClient | None = None,
    on_progress: Callable[[str, Progress], None] | None = None,
) -> list[RunResult | None]:
    """Fetch every provider once, concurrently and independently."""
    own = client is None
    client = client or httpx.AsyncClient(follow_redirects=True)
    try:

        async def one(p: ProviderConfig) -> RunResult | None:
            cb = (lambda prog: on_progress(p.name, prog)) if on_progress else None
            return await fetch_provider(pool, client, p, config, owner=owner, on_progress=cb)

        return list(await asyncio.gather(*(one(p) for p in providers)))
    finally:
        if own:
            await client.aclose()


async def fetch_loop(
    pool: AsyncConnectionPool,
    providers: Sequence[ProviderConfig],
    interval: float,
    stop: asyncio.Event,
    config: FetchConfig = FetchConfig(),
    *,
    owner: str,
    on_round: Callable[[list[RunResult | None]], Awaitable[None]] | None = None,
) -> None:
    """Fetch every provider every ``interval`` seconds until ``stop`` is set.

    Database and provider trouble is logged and retried next round; a round's failures are
    recorded on their runs.
    """
    async with httpx.AsyncClient(follow_redirects=True) as client:
        while not stop.is_set():
            started = time.monotonic()
            try:
                results = await fetch_all(pool, providers, config, owner=owner, client=client)
                if on_round:
                    await on_round(results)
            except (psycopg.OperationalError, DatabaseError, OSError) as exc:
                log.warning("fetch round failed (%s); next round in %.0fs", exc, interval)
            except psycopg.Error:
                # Not a lost connection: a bug or a schema problem. Log it whole, but keep
                # fetching: the next round may well succeed, and exiting stops every provider.
                log.exception("fetch round failed; next round in %.0fs", interval)
            delay = max(0.0, interval - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
