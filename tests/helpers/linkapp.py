"""The tasks of tests/core/test_impaired_link.py, as ``pgenough worker run
tests.helpers.linkapp:app`` loads them on each "host" (``LINK_HOST`` names it).

``effect`` writes its job's effect and completes the job in one transaction (exactly once:
``effects`` has the job id as its primary key); ``tally`` is a batch task whose items are
written, without any unique constraint, in the transaction that completes their jobs. Each
process counts its handler invocations per job id (and its batch calls per item) and writes
them, as JSON, to ``LINK_REPORT`` when it exits.
"""

from __future__ import annotations

import atexit
import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg

from pgenough.core import App, Backoff, TaskContext, complete

HOST = os.environ.get("LINK_HOST", "?")
EFFECT_QUEUE = "link"
TALLY_QUEUE = "link-batch"
TALLIES_TABLE = "CREATE TABLE link_tallies (n int NOT NULL, host text NOT NULL)"
"""No unique constraint: an item committed twice is two rows."""
RETRY = Backoff(base=0.2, cap=2.0)
"""A failed attempt (its connection reset or timed out) is tried again soon: the run is short."""

app = App()
invocations: Counter[int] = Counter()
"""Job id -> calls of ``effect`` in this process."""
batch_items: Counter[int] = Counter()
"""Item n -> calls of ``tally`` that held it in this process."""


@app.task(name="link.effect", queue=EFFECT_QUEUE, pass_context=True, retry=RETRY)
async def effect(ctx: TaskContext, n: int) -> None:
    invocations[ctx.job.id] += 1
    async with ctx.pool.connection() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, %s, %s)",
            (ctx.job.id, ctx.job.attempts, HOST),
        )
        await complete(conn, ctx.job)


@dataclass
class Item:
    n: int


@app.batch_task(Item, name="link.tally", queue=TALLY_QUEUE, retry=RETRY)
async def tally(conn: psycopg.AsyncConnection[Any], items: list[Item]) -> None:
    batch_items.update(item.n for item in items)
    await conn.execute(
        "INSERT INTO link_tallies (n, host) SELECT unnest(%s::int[]), %s",
        ([item.n for item in items], HOST),
    )


@atexit.register
def _report() -> None:
    path = os.environ.get("LINK_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(
                {
                    "host": HOST,
                    "invocations": {str(k): v for k, v in invocations.items()},
                    "batch_items": {str(k): v for k, v in batch_items.items()},
                },
                f,
            )
