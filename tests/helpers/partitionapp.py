"""A user's task module for the partition tests (tests/core/test_partition.py), as
``pgenough worker run tests.helpers.partitionapp:app`` loads it on a worker host.

Both tasks write one row per job into ``partition_effects``, which has no unique constraint:
an effect committed twice is two rows. ``batch`` is a batch task (its effects and the
completion of its jobs in one transaction); ``each`` a ``pass_context`` task that writes its
effect and calls ``complete(conn, ctx.job)`` in one transaction.

On a worker whose ``PARTITION_HOLD`` names a directory, each call, once its effect is written
and before its jobs are completed, logs ``holding ...`` and waits (at most ``HOLD_LIMIT``
seconds) inside its open transaction for the file ``release`` in that directory: the test
cuts the worker's link meanwhile, and lets it go on once the partition has healed.
``PARTITION_HOST`` names the host in each row.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg

from pgenough.core import App, TaskContext, complete
from tests.helpers.procs import wait_for_file

log = logging.getLogger("partitionapp")

EFFECTS: Final = (
    "CREATE TABLE IF NOT EXISTS partition_effects (task text NOT NULL, n int NOT NULL,"
    " host text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
)
BATCH_QUEUE: Final = "batches"
EACH_QUEUE: Final = "each"
HOLD_LIMIT: Final = 90.0

app = App()


def _host() -> str:
    return os.environ.get("PARTITION_HOST", "?")


async def _hold(what: str) -> None:
    """Wait for the test's release file, when this worker is the one to be cut off."""
    directory = os.environ.get("PARTITION_HOLD")
    if not directory:
        return
    release = Path(directory) / "release"
    if await asyncio.to_thread(release.exists):
        return
    log.info("holding %s inside its transaction", what)
    await asyncio.to_thread(wait_for_file, release, HOLD_LIMIT)
    log.info("released %s", what)


@dataclass
class Item:
    n: int


@app.batch_task(Item, name="partition.batch", queue=BATCH_QUEUE)
async def batch(conn: psycopg.AsyncConnection[Any], items: list[Item]) -> None:
    await conn.execute(
        "INSERT INTO partition_effects (task, n, host) SELECT 'batch', unnest(%s::int[]), %s",
        ([i.n for i in items], _host()),
    )
    await _hold(f"a batch of {len(items)}")


@app.task(name="partition.each", queue=EACH_QUEUE, pass_context=True)
async def each(ctx: TaskContext, n: int) -> None:
    async with ctx.pool.connection() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO partition_effects (task, n, host) VALUES ('each', %s, %s)", (n, _host())
        )
        await _hold(f"job {ctx.job.id}")
        await complete(conn, ctx.job)
