"""Process workers: apply the chunks of sealed runs to the canonical ``plans``.

A chunk is a job of the ``apply_chunk`` task (queue ``plans``), enqueued when its run was
sealed, so only STAGED runs have claimable work and any number of workers share it with
SKIP LOCKED. Each chunk is applied, counted on its run and completed in one transaction:
exactly once. The transaction that completes a run's last chunk also marks the run
PROCESSED, drops its staging table and publishes ``plans_changed``.
"""

from __future__ import annotations

import json
import logging

from psycopg_pool import AsyncConnectionPool

from pgenough.core import App, TaskContext, Worker, WorkerConfig, complete
from pgenough.core import publish as publish_message
from pgenough.core.db import AsyncConn
from pgenough.core.logcontext import bind_log_context
from pgenough_plans.ingest import metrics, runs, store
from pgenough_plans.ingest.defaults import VACUUM_INTERVAL
from pgenough_plans.ingest.events import run_changed
from pgenough_plans.ingest.pacing import DEFAULT_PACING, Pacer, PacingConfig
from pgenough_plans.ingest.runs import RunStatus

log = logging.getLogger(__name__)

PLANS_QUEUE = "plans"
CHUNK_KIND = "apply_chunk"
PLANS_CHANGED = "plans_changed"
REAPER_INTERVAL = 15.0
DEFAULT_STALE_AFTER = 60.0
"""Seconds without a heartbeat after which a RUNNING run's fetch is taken for dead."""

# Module-level as the task is: one process worker per process (``process_worker`` sets it).
_pacer = Pacer(DEFAULT_PACING)

app = App(migrations=[store.MIGRATIONS])
"""The plan service's tasks: ``pgenough-plans worker process`` runs it (as would ``pgenough worker
run pgenough_plans.ingest.process:app``)."""


@app.task(name=CHUNK_KIND, queue=PLANS_QUEUE, pass_context=True)
async def apply_chunk(ctx: TaskContext, run_id: int, lo: str, hi: str) -> None:
    """Apply the staged plans of one key range of a sealed run, exactly once."""
    bind_log_context(run_id=run_id)
    async with ctx.pool.connection() as conn:
        # Between chunks, before the transaction: a pause holds no snapshot and no lock.
        await _pacer.between_chunks(conn)
        await _apply(ctx, conn, run_id, lo, hi)


async def _apply(ctx: TaskContext, conn: AsyncConn, run_id: int, lo: str, hi: str) -> None:
    async with conn.transaction():
        run = await runs.get_run(conn, run_id)
        if run is None or run.status != RunStatus.STAGED:
            # The run was failed or finished by someone else: nothing to apply.
            log.warning("chunk of run %d skipped: run is %s", run_id, run.status if run else "gone")
            await complete(conn, ctx.job)
            return
        provider = run.provider
        bind_log_context(provider=provider)
        failed = False
        if run.plans_staged > 0 and await store.staging_lost(conn, run_id):
            failed = await _fail_lost_staging(conn, run_id, provider)
            await complete(conn, ctx.job)
            result = None
        else:
            result = await store.apply_chunk(
                conn, run_id=run_id, provider=provider, snapshot_at=run.started_at, lo=lo, hi=hi
            )
            if await runs.chunk_done(conn, run_id, written=result.written, failed=result.failed):
                await _finish_run(conn, run_id, provider)
            await complete(conn, ctx.job)
    # Counted once committed: a chunk whose transaction rolled back will be applied again.
    if result is not None:
        metrics.record_chunk(provider, result.written, result.failed)
    elif failed:
        metrics.record_failed(provider, "staging_lost")
        log.error("run %d (%s) FAILED: %s", run_id, provider, STAGING_LOST)


# Ahead of chunks: a dead fetch's run must not wait behind a backlog to be failed.
@app.periodic(every=REAPER_INTERVAL)
@app.task(
    name="pgenough.plans.reap", queue=PLANS_QUEUE, priority=10, max_attempts=1, pass_context=True
)
async def reap_stale_runs(ctx: TaskContext, stale_after: float = DEFAULT_STALE_AFTER) -> None:
    """Fail the runs whose fetch worker stopped heartbeating."""
    async with ctx.pool.connection() as conn:
        await fail_stale_runs(conn, stale_after)


# Ahead of chunks too: it is while chunks are applied that the plans lose their all-visible
# pages, and a backlog of chunks must not hold off the vacuum that restores them.
@app.periodic(every=VACUUM_INTERVAL)
@app.task(
    name="pgenough.plans.vacuum", queue=PLANS_QUEUE, priority=10, max_attempts=1,
    pass_context=True,
)  # fmt: skip
async def vacuum_plans(ctx: TaskContext) -> None:
    """The plans vacuum duty (``store.vacuum_plans``), once per interval across workers."""
    async with ctx.pool.connection() as conn:
        if (await store.vacuum_plans(conn)).vacuumed:
            metrics.PLANS_VACUUMS.inc()


async def fail_stale_runs(conn: AsyncConn, stale_after: float = DEFAULT_STALE_AFTER) -> list[int]:
    """The reaper: fail RUNNING runs whose worker stopped heartbeating; drop their staging."""
    async with conn.transaction():
        stale = await runs.fail_stale_runs(conn, stale_after)
        failed = [run.id for run in stale]
        for run in stale:
            await store.drop_staging(conn, run.id)
            await run_changed(conn, run.id, run.provider, RunStatus.FAILED)
    for run in stale:
        metrics.record_failed(run.provider, "stale")
    if failed:
        log.warning(
            "failed %d run(s) whose fetch worker stopped heartbeating: %s", len(failed), failed
        )
    return failed


STAGING_LOST = (
    "its staging was emptied before it was applied: the database server crashed or a standby"
    " was promoted (staging tables are unlogged); the provider's next fetch starts over"
)


async def _fail_lost_staging(conn: AsyncConn, run_id: int, provider: str) -> bool:
    """Fail a sealed run whose staging a crash or a failover emptied: applying its chunks
    would write nothing and call the snapshot processed. The chunks applied before are kept
    (each plan's newest snapshot still wins); the rest of the run's chunks skip it. False
    if another chunk failed it first."""
    if not await runs.fail_staged_run(conn, run_id, reason=STAGING_LOST):
        return False
    await store.drop_staging(conn, run_id)
    await run_changed(conn, run_id, provider, RunStatus.FAILED)
    return True


async def _finish_run(conn: AsyncConn, run_id: int, provider: str) -> None:
    processed = await runs.mark_processed(conn, run_id)
    await store.drop_staging(conn, run_id)
    await run_changed(conn, run_id, provider, RunStatus.PROCESSED)
    written, failed = (processed.plans_written, processed.rows_failed) if processed else (0, 0)
    await publish_message(
        conn,
        PLANS_CHANGED,
        json.dumps(
            {
                "run_id": run_id,
                "provider": provider,
                "plans_written": written,
                "rows_failed": failed,
            }
        ),
    )
    log.info(
        "run %d (%s) PROCESSED: %d plan(s) written, %d row(s) failed",
        run_id,
        provider,
        written,
        failed,
    )


def process_worker(
    pool: AsyncConnectionPool,
    config: WorkerConfig,
    pacing: PacingConfig | None = None,
    *,
    listen_url: str | None = None,
) -> Worker:
    """The plan service's worker: ``app`` on the ``plans`` queue. The stale-run reaper is one
    of its scheduled tasks (once per interval across all workers). ``pacing``: how chunks
    yield to /search (default: ``DEFAULT_PACING``). ``listen_url``: the listener's direct
    connection behind a transaction pooler."""
    global _pacer
    _pacer = Pacer(pacing or DEFAULT_PACING)
    return app.worker(pool, queues=[PLANS_QUEUE], config=config, listen_url=listen_url)


def pacer() -> Pacer:
    """This process's pacer (its counters: chunks, pauses, seconds paused)."""
    return _pacer
