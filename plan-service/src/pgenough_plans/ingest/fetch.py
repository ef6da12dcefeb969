"""The fetch worker: one run per provider fetch, streamed into staging, sealed when whole.

Per provider, under that provider's advisory lock (a concurrent fetcher skips it):

1. any run of the provider still ``RUNNING`` lost its worker (the lock was free): ``FAILED``,
   with what that run was doing when it was lost (its ``phase``);
2. open a run (``RUNNING``) and its staging table;
3. stream the body through the incremental parser into COPY batches, heartbeating progress
   and recording the phase (connecting, streaming, waiting to retry);
4. seal: ``STAGED`` and its chunk jobs enqueued, in one transaction (the enqueue's NOTIFY
   wakes idle process workers on commit); a snapshot without plans is ``PROCESSED`` at once;
5. or, on any failure, ``FAILED`` with the reason and the staging table dropped in the same
   transaction: nothing of it can reach ``plans``.

One provider never harms another: whatever a fetch raises (provider, transport, decoding,
XML, a lost database connection, a bug) fails *its* run with a reason and ends there. A run
has an overall deadline, and a stop request (SIGTERM) ends it within moments as ``FAILED``
("worker stopped"), releasing the lock.

``fetch_loop`` fetches each provider at most once per interval across every replica: the
interval is a periodic task of the core (``pgenough.fetch:<provider>``) whose period only one
replica can claim; whoever is alive at a period's start fetches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core import NewJob, Periodic, advisory_lock
from pgenough.core.errors import DatabaseError, LockNotAcquired, first_line
from pgenough.core.logcontext import bind_log_context, log_context
from pgenough_plans.ingest import metrics, runs, store
from pgenough_plans.ingest.defaults import DEFAULT_DEADLINE
from pgenough_plans.ingest.errors import FeedError, ProviderError, RunLost
from pgenough_plans.ingest.events import run_changed
from pgenough_plans.ingest.feed import FeedParser
from pgenough_plans.ingest.pacing import DEFAULT_PACING, Pacer, PacingConfig
from pgenough_plans.ingest.process import DEFAULT_STALE_AFTER, apply_chunk
from pgenough_plans.ingest.provider import Attempt, ProviderConfig
from pgenough_plans.ingest.provider import fetch as provider_fetch
from pgenough_plans.ingest.runs import RunStatus

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_COPY_BATCH = 5000
DEFAULT_HEARTBEAT = 5.0
STOP_GRACE: Final = 10.0
"""Seconds ``fetch_loop`` waits, once stopped, for its fetches to record their end."""
FAIL_TIMEOUT: Final = 5.0
"""Seconds to get a fresh connection for failing a run whose own connection was lost."""


@dataclass(frozen=True)
class FetchConfig:
    copy_batch: int = DEFAULT_COPY_BATCH
    """Parsed plans per COPY statement."""
    chunk_pages: int = store.DEFAULT_CHUNK_PAGES
    """Staging pages per unit of process work."""
    heartbeat: float = DEFAULT_HEARTBEAT
    stale_after: float = DEFAULT_STALE_AFTER
    """A RUNNING run not heartbeating for this long is declared dead by the reaper."""
    deadline: float = DEFAULT_DEADLINE
    """A run still streaming after this many seconds fails (whatever the provider does)."""
    pacing: PacingConfig = DEFAULT_PACING
    """How the stream yields to /search between COPY batches (plans/pacing.py)."""

    def __post_init__(self) -> None:
        if self.copy_batch < 1 or self.chunk_pages < 1:
            raise ValueError("copy_batch and chunk_pages must be >= 1")
        if self.stale_after <= self.heartbeat:
            raise ValueError("stale_after must be longer than the heartbeat interval")
        if self.deadline <= 0:
            raise ValueError("deadline must be positive")


@dataclass(frozen=True)
class RunResult:
    run_id: int
    provider: str
    status: RunStatus
    """STAGED, PROCESSED (an empty snapshot) or FAILED."""
    reason: str | None
    plans_staged: int
    plans_skipped: int
    bytes: int
    paused_seconds: float = 0.0
    """Seconds the stream paused between COPY batches for the read path (pacing)."""


@dataclass
class Progress:
    """What a streaming run has done so far (also handed to progress callbacks)."""

    bytes: int = 0
    staged: int = 0
    skipped: int = 0


def lock_name(provider: str) -> str:
    return f"pgenough.fetch:{provider}"


def schedule_name(provider: str) -> str:
    """The periodic task that fetches ``provider`` once per interval across replicas."""
    return f"pgenough.fetch:{provider}"


class _Stopped(Exception):
    """The fetch was asked to stop (the worker is shutting down)."""


async def _unless_stopped(stop: asyncio.Event | None, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; if ``stop`` is set first, cancel it, let it unwind, raise ``_Stopped``.

    The work runs in a task of its own so that stopping interrupts whatever it awaits (a
    read, a backoff sleep, a COPY) without cancelling the caller, which then records the
    stop on the run."""
    if stop is None:
        return await work
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise _Stopped


async def fetch_provider(
    pool: AsyncConnectionPool,
    client: httpx.AsyncClient,
    provider: ProviderConfig,
    config: FetchConfig = FetchConfig(),
    *,
    owner: str,
    on_progress: Callable[[Progress], None] | None = None,
    rng: random.Random | None = None,
    stop: asyncio.Event | None = None,
    lock_pool: AsyncConnectionPool | None = None,
) -> RunResult | None:
    """Fetch one snapshot of ``provider``; None when another fetcher holds its lock.

    The provider's lock is a session-level advisory lock held on a connection of
    ``lock_pool`` (default ``pool``) for the whole fetch: behind a transaction pooler,
    ``pool`` goes through the pooler and ``lock_pool`` must be direct, as a session lock
    through the pooler would be held by a server session other clients share.

    Whatever goes wrong once the run is open ends as a FAILED run in the result (never an
    exception); ``DatabaseError`` only when the database cannot be used to open a run at all.
    A set ``stop`` ends the fetch at once as FAILED ("worker stopped").
    """
    with log_context(provider=provider.name):
        try:
            lock_on = lock_pool or pool
            async with advisory_lock(lock_on, lock_name(provider.name), wait=False) as lock:
                await _fail_orphans(lock.conn, provider.name)
                started = time.monotonic()
                fetch = _Fetch(pool, lock.conn, client, provider, config, owner, on_progress, rng)
                result = await fetch.run(stop)
                metrics.FETCH_DURATION.labels(provider.name).observe(time.monotonic() - started)
                return result
        except LockNotAcquired:
            metrics.FETCHES.labels(provider.name, "skipped_locked").inc()
            log.info("provider %s is being fetched by another worker; skipped", provider.name)
            return None
        except psycopg.Error as exc:
            raise DatabaseError(
                f"provider {provider.name}: the database cannot be used: {first_line(exc)}"
            ) from exc


async def _fail_orphans(conn: psycopg.AsyncConnection[Any], provider: str) -> None:
    async with conn.transaction():
        orphans = await runs.fail_orphaned_runs(conn, provider)
        for orphan in orphans:
            await store.drop_staging(conn, orphan.id)
            await run_changed(conn, orphan.id, provider, RunStatus.FAILED)
    for orphan in orphans:
        metrics.record_failed(provider, "orphaned")
        log.warning("run %d of %s FAILED: %s", orphan.id, provider, orphan.reason)


class _Fetch:
    """One run of one provider: its state, and how it ends whatever happens."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        conn: psycopg.AsyncConnection[Any],
        client: httpx.AsyncClient,
        provider: ProviderConfig,
        config: FetchConfig,
        owner: str,
        on_progress: Callable[[Progress], None] | None,
        rng: random.Random | None,
    ) -> None:
        self.pool = pool
        self.conn = conn
        self.client = client
        self.provider = provider
        self.config = config
        self.owner = owner
        self.on_progress = on_progress
        self.rng = rng
        self.run_id: int | None = None
        self.phase = "opening the run"
        self.progress = Progress()
        self.parser = FeedParser(copy_text=True)
        self.writer: store.StagingWriter | None = None
        self.last_beat = time.monotonic()
        self.pacer = Pacer(config.pacing)

    async def run(self, stop: asyncio.Event | None) -> RunResult:
        name = self.provider.name
        try:
            await self._open()
            await _unless_stopped(stop, self._download())
            self.phase = "sealing"
            return await self._seal()
        except _Stopped:
            return await self._fail(f"worker stopped while {self.phase}", "stopped")
        except asyncio.CancelledError:
            # Cancelled from outside (not a stop request): still leave no RUNNING run.
            if self.run_id is not None:
                await self._fail(f"fetch cancelled while {self.phase}", "stopped")
            raise
        except (ProviderError, FeedError) as exc:
            return await self._fail(str(exc), metrics.failure_reason(exc))
        except RunLost as exc:
            return self._lost(exc)
        except psycopg.Error as exc:
            lost = isinstance(exc, psycopg.OperationalError)
            if isinstance(exc, psycopg.errors.UndefinedTable) and not await self._still_running():
                # The reaper failed the run and dropped its staging table under us (a COPY
                # into the dropped table is how that shows when it beats the heartbeat).
                assert self.run_id is not None
                return self._lost(RunLost(self.run_id))
            what = "database connection lost" if lost else "database error"
            return await self._fail(f"{what} while {self.phase}: {first_line(exc)}", "database")
        except Exception as exc:
            # A bug: it fails this run, never the worker or another provider's run.
            log.debug("run %s of %s: unexpected error", self.run_id, name, exc_info=True)
            return await self._fail(
                f"internal error while {self.phase}: {type(exc).__name__}: {first_line(exc)}",
                "internal",
            )

    # -- the run's steps --------------------------------------------------------------------

    async def _open(self) -> None:
        name = self.provider.name
        async with self.conn.transaction():
            run_id = await runs.open_run(
                self.conn, provider=name, url=self.provider.url, owner=self.owner
            )
            await store.create_staging(self.conn, run_id, name)
            await run_changed(self.conn, run_id, name, RunStatus.RUNNING)
        self.run_id = run_id
        self.writer = store.StagingWriter(run_id)
        bind_log_context(run_id=run_id)
        log.info("run %d: fetching %s from %s", run_id, name, self.provider.url)

    async def _download(self) -> None:
        try:
            async with asyncio.timeout(self.config.deadline) as deadline:
                await provider_fetch(
                    self.client,
                    self.provider,
                    self._consume,
                    on_attempt=self._record,
                    restart=self._restart,
                    on_phase=self._set_phase,
                    rng=self.rng,
                    sleep=self._sleep,
                )
        except TimeoutError:
            if not deadline.expired():
                raise
            raise ProviderError(
                f"provider {self.provider.name}: deadline: the fetch did not finish within"
                f" {self.config.deadline:g} s (it was {self.phase})",
                kind="deadline",
            ) from None

    async def _consume(self, body: AsyncIterator[bytes]) -> None:
        progress, writer = self.progress, self.writer
        assert writer is not None
        batch: list[str] = []
        try:
            async for chunk in body:
                progress.bytes += len(chunk)
                batch += self.parser.feed_copy(chunk)
                if len(batch) >= self.config.copy_batch:
                    # The previous batch's COPY ran while this one was parsed; this one's
                    # runs while the next is (StagingWriter.start_copy).
                    progress.staged += await writer.flush()
                    progress.skipped = self.parser.skipped
                    if self.on_progress:
                        self.on_progress(progress)
                    # Between chunks: the provider waits on TCP while the read path is
                    # pressed (no COPY in flight: a pause holds nothing the API could want).
                    await self.pacer.between_chunks(self.conn)
                    writer.start_copy(self.conn, batch)
                    batch = []
                # Beat per network chunk, not per COPY batch: a slow but live stream can take
                # longer than stale_after to fill a batch, and must not look dead to the
                # reaper. (It waits for the COPY in flight, if any: the connection is its.)
                await self._beat()
            batch += self.parser.close_copy()
            if batch:
                progress.staged += await writer.flush()
                writer.start_copy(self.conn, batch)
            progress.staged += await writer.flush()
        except BaseException as exc:
            # A failed or cancelled download leaves no COPY running under the retry's
            # truncate or the run's failure.
            await writer.abandon(cancel=isinstance(exc, asyncio.CancelledError))
            raise
        progress.skipped = self.parser.skipped
        if self.on_progress:
            self.on_progress(progress)

    async def _beat(self, force: bool = False) -> None:
        if not force and time.monotonic() - self.last_beat < self.config.heartbeat:
            return
        self.last_beat = time.monotonic()
        assert self.run_id is not None
        if not await runs.heartbeat(
            self.conn,
            self.run_id,
            bytes=self.progress.bytes,
            staged=self.progress.staged,
            skipped=self.parser.skipped,
            phase=self.phase,
        ):
            raise RunLost(self.run_id)

    async def _set_phase(self, phase: str) -> None:
        """Record what the run is doing, so whoever ends it can say (an orphaned run's
        reason is "... died while waiting 30 s to retry after HTTP 503 (attempt 1 of 4)")."""
        self.phase = phase
        await self._beat(force=True)

    async def _sleep(self, seconds: float) -> None:
        """Wait before a retry, heartbeating: a Retry-After may be longer than stale_after."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, self.config.heartbeat))
            await self._beat()

    async def _restart(self) -> None:
        assert self.run_id is not None
        assert self.writer is not None
        await store.truncate_staging(self.conn, self.run_id)
        self.writer.reset()
        self.parser = FeedParser(copy_text=True)
        self.progress.bytes = self.progress.staged = self.progress.skipped = 0

    async def _record(self, attempt: Attempt) -> None:
        assert self.run_id is not None
        await runs.record_attempt(self.conn, self.run_id, attempt.as_json())

    async def _still_running(self) -> bool:
        if self.run_id is None:
            return False
        run = await runs.get_run(self.conn, self.run_id)
        return run is not None and run.status == RunStatus.RUNNING

    # -- how it ends ------------------------------------------------------------------------

    def _result(self, status: RunStatus, reason: str | None) -> RunResult:
        assert self.run_id is not None
        return RunResult(
            self.run_id,
            self.provider.name,
            status,
            reason,
            self.progress.staged,
            self.parser.skipped,
            self.progress.bytes,
            self.pacer.paused_seconds,
        )

    def _lost(self, exc: RunLost) -> RunResult:
        # The reaper counted the failure; this fetch only stops.
        log.error("run %d (%s): %s", exc.run_id, self.provider.name, exc)
        return self._result(RunStatus.FAILED, str(exc))

    async def _fail(self, reason: str, kind: metrics.FailureReason) -> RunResult:
        """Mark the run FAILED with ``reason`` and drop its staging, on the run's own
        connection or, if that one is broken, on a fresh one."""
        if self.run_id is None:
            raise DatabaseError(f"provider {self.provider.name}: {reason}")
        try:
            await self._record_failure(self.conn, reason)
        except psycopg.Error:
            # The run's connection is gone (and the lock with it): use a fresh one (the pool
            # checks a connection before handing it out).
            try:
                async with self.pool.connection(timeout=FAIL_TIMEOUT) as conn:
                    await self._record_failure(conn, reason)
            except psycopg.Error as exc:
                log.error(
                    "run %d (%s) could not be marked FAILED (%s); the next fetch of the"
                    " provider, or the stale-run reaper, will",
                    self.run_id,
                    self.provider.name,
                    first_line(exc),
                )
        metrics.record_failed(self.provider.name, kind)
        # A stop was asked for: worth a line, not an alarm.
        level = logging.WARNING if kind == "stopped" else logging.ERROR
        log.log(level, "run %d (%s) FAILED: %s", self.run_id, self.provider.name, reason)
        return self._result(RunStatus.FAILED, reason)

    async def _record_failure(self, conn: psycopg.AsyncConnection[Any], reason: str) -> None:
        assert self.run_id is not None
        async with conn.transaction():
            if not await runs.fail_run(
                conn,
                self.run_id,
                provider=self.provider.name,
                owner=self.owner,
                reason=reason,
                bytes=self.progress.bytes,
                staged=self.progress.staged,
                skipped=self.parser.skipped,
                samples=_samples(self.parser),
            ):
                # Already failed by the reaper or the next fetch (they dropped its staging),
                # or, after a failover, the id of another fetch's run: not ours to touch.
                return
            await store.drop_staging(conn, self.run_id)
            await run_changed(conn, self.run_id, self.provider.name, RunStatus.FAILED)

    async def _seal(self) -> RunResult:
        conn, run_id, provider = self.conn, self.run_id, self.provider.name
        assert run_id is not None
        progress, parser = self.progress, self.parser
        duplicates = await store.merge_duplicates(conn, run_id)
        await store.analyze_staging(conn, run_id)
        chunks = await store.chunk_ranges(conn, run_id, self.config.chunk_pages)
        async with conn.transaction():
            await runs.seal_run(
                conn,
                run_id,
                bytes=progress.bytes,
                variant=parser.variant,
                staged=progress.staged,
                skipped=parser.skipped,
                duplicates=duplicates,
                samples=_samples(parser),
                chunks=len(chunks),
            )
            if chunks:
                await apply_chunk.enqueue_many(conn, chunk_jobs(run_id, chunks))
                status = RunStatus.STAGED
            else:
                await runs.mark_processed(conn, run_id)
                await store.drop_staging(conn, run_id)
                status = RunStatus.PROCESSED
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
        if self.pacer.pauses:
            log.info(
                "run %d: paused %d time(s), %.1f s in all, for the read path",
                run_id,
                self.pacer.pauses,
                self.pacer.paused_seconds,
            )
        return self._result(status, None)


def _samples(parser: FeedParser) -> str:
    return json.dumps(
        [
            {"reason": s.reason, "base_plan_id": s.base_plan_id, "plan_id": s.plan_id}
            for s in parser.skip_samples
        ]
    )


def chunk_jobs(run_id: int, chunks: Sequence[tuple[str, str]]) -> list[NewJob]:
    return [
        apply_chunk.using(dedupe_key=f"run:{run_id}:{lo}").job(run_id=run_id, lo=lo, hi=hi)
        for lo, hi in chunks
    ]


def provider_client() -> httpx.AsyncClient:
    """The HTTP client fetches share: redirects are followed by ``provider.fetch``'s rules,
    never by httpx."""
    return httpx.AsyncClient(follow_redirects=False)


async def fetch_all(
    pool: AsyncConnectionPool,
    providers: Sequence[ProviderConfig],
    config: FetchConfig = FetchConfig(),
    *,
    owner: str,
    client: httpx.AsyncClient | None = None,
    on_progress: Callable[[str, Progress], None] | None = None,
    stop: asyncio.Event | None = None,
    lock_pool: AsyncConnectionPool | None = None,
) -> list[RunResult | None]:
    """Fetch every provider once, concurrently and independently (None: locked elsewhere).

    Raises ``DatabaseError`` (once every fetch has ended) when the database could not be used
    to open some provider's run; every other failure is a FAILED run in the list.
    """
    own = client is None
    client = client or provider_client()
    try:

        async def one(p: ProviderConfig) -> RunResult | None:
            cb = (lambda prog: on_progress(p.name, prog)) if on_progress else None
            return await fetch_provider(
                pool, client, p, config, owner=owner, on_progress=cb, stop=stop,
                lock_pool=lock_pool,
            )  # fmt: skip

        outcomes = await asyncio.gather(*(one(p) for p in providers), return_exceptions=True)
    finally:
        if own:
            await client.aclose()
    results: list[RunResult | None] = []
    problem: DatabaseError | None = None
    for outcome in outcomes:
        if isinstance(outcome, DatabaseError):
            problem = problem or outcome
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            results.append(outcome)
    if problem is not None:
        raise problem
    return results


async def fetch_loop(
    pool: AsyncConnectionPool,
    providers: Sequence[ProviderConfig],
    interval: float,
    stop: asyncio.Event,
    config: FetchConfig = FetchConfig(),
    *,
    owner: str,
    on_result: Callable[[RunResult | None], Awaitable[None]] | None = None,
    lock_pool: AsyncConnectionPool | None = None,
) -> None:
    """Fetch each provider once per ``interval`` across every replica, until ``stop``.

    Each provider is a periodic task of the core (``schedule_name``): at each period's start
    every replica tries to claim it and only one fetches. Database and provider trouble is
    logged and retried next period; a fetch's failure is recorded on its run. Once ``stop`` is
    set, fetches in flight end as FAILED ("worker stopped") and this returns.
    """
    periodic = Periodic(pool, replica=owner)
    async with provider_client() as client:

        def task(p: ProviderConfig) -> Callable[[], Awaitable[None]]:
            async def fetch_now() -> None:
                if stop.is_set():
                    return
                try:
                    result = await fetch_provider(
                        pool, client, p, config, owner=owner, stop=stop, lock_pool=lock_pool
                    )
                except DatabaseError as exc:
                    log.warning("%s; next try in %.0fs", exc, interval)
                    return
                if on_result is not None:
                    await on_result(result)

            return fetch_now

        for p in providers:
            periodic.every(interval, schedule_name(p.name), task(p))
        runner = asyncio.create_task(periodic.run(), name="fetch-schedule")
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({runner, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            periodic.stop()
        _, pending = await asyncio.wait({runner}, timeout=STOP_GRACE)
        if pending:
            log.warning("fetches did not end within %.0fs of the stop; cancelling", STOP_GRACE)
            runner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await runner
