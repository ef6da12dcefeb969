"""Process workers: apply the chunks of sealed runs to the canonical ``plans``.

A chunk is a core-queue job (queue ``plans``), enqueued when its run was sealed, so only
STAGED runs have claimable work and any number of workers share it with SKIP LOCKED. Each
chunk is applied, counted on its run and completed in one transaction: exactly once. The
transaction that completes a run's last chunk also marks the run PROCESSED, drops its
staging table and publishes ``plans_changed``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    Handler,
    Job,
    Worker,
    WorkerConfig,
    bind_log_context,
    complete,
    named_queries,
)
from pgenough.core import publish as publish_message
from pgenough.plans import metrics, store
from pgenough.plans.events import run_changed
from pgenough.plans.fetch import CHUNK_KIND, PLANS_QUEUE, fail_stale_runs

log = logging.getLogger(__name__)
_Q = named_queries("pgenough.plans", "runs")

PLANS_CHANGED = "plans_changed"
REAPER_INTERVAL = 15.0


def chunk_handler(pool: AsyncConnectionPool) -> Handler:
    async def apply(job: Job) -> None:
        payload: dict[str, Any] = job.payload
        run_id = int(payload["run_id"])
        bind_log_context(run_id=run_id)
        async with pool.connection() as conn, conn.transaction():
            cur = await conn.execute(_Q["get_run"], {"id": run_id})
            run = await cur.fetchone()
            if run is None or run[3] != "STAGED":
                # The run was failed or finished by someone else: nothing to apply.
                log.warning("chunk of run %d skipped: run is %s", run_id, run[3] if run else "gone")
                await complete(conn, job)
                return
            provider, started_at = run[1], run[5]
            bind_log_context(provider=provider)
            result = await store.apply_chunk(
                conn,
                run_id=run_id,
                provider=provider,
                snapshot_at=started_at,
                lo=payload["lo"],
                hi=payload["hi"],
            )
            cur = await conn.execute(
                _Q["chunk_done"],
                {"id": run_id, "written": result.written, "failed": result.failed},
            )
            done = await cur.fetchone()
            if done is not None and done[0]:
                await _finish_run(conn, run_id, provider)
            await complete(conn, job)
        # Counted once committed: a chunk whose transaction rolled back will be applied again.
        metrics.record_chunk(provider, result.written, result.failed)

    return apply


async def _finish_run(conn: store.AnyConn, run_id: int, provider: str) -> None:
    cur = await conn.execute(_Q["mark_processed"], {"id": run_id})
    row = await cur.fetchone()
    await store.drop_staging(conn, run_id)
    await run_changed(conn, run_id, provider, "PROCESSED")
    written, failed = row or (0, 0)
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


def process_worker(pool: AsyncConnectionPool, config: WorkerConfig) -> Worker:
    """A core worker on the ``plans`` queue that applies chunks. The stale-run reaper runs
    as one of its periodic duties (once per interval across all workers)."""
    worker = Worker(pool, {CHUNK_KIND: chunk_handler(pool)}, replace(config, queue=PLANS_QUEUE))

    async def reap() -> None:
        async with pool.connection() as conn:
            await fail_stale_runs(conn)

    worker.periodic.every(REAPER_INTERVAL, "pgenough.plans.reap", reap)
    return worker
