"""A user's task module, as ``pgenough worker run tests.helpers.taskapp:app`` loads it: one
task on each of five queues, one that takes its time (for shutdown tests), and a batch task
on its own queue."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import psycopg

from pgenough.core import App, TaskContext, complete

log = logging.getLogger("taskapp")

QUEUES = ("emails", "reports", "billing", "search", "webhooks")
TALLY_QUEUE = "tallies"
TALLIES_TABLE = "CREATE TABLE IF NOT EXISTS tallies (n int NOT NULL)"
"""Where ``tally`` writes: no unique constraint, so an effect committed twice is two rows."""

app = App(queues={"billing": 2})


async def _record(ctx: TaskContext, note: str) -> None:
    """One row per completed job, written with the job's completion: exactly once."""
    async with ctx.pool.connection() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, %s, %s)",
            (ctx.job.id, ctx.job.attempts, note),
        )
        await complete(conn, ctx.job)


def _queue_task(queue: str) -> None:
    @app.task(name=f"work.{queue}", queue=queue, pass_context=True)
    async def work(ctx: TaskContext, n: int) -> None:
        log.info("working on %s %d", queue, n)
        await _record(ctx, queue)


for _queue in QUEUES:
    _queue_task(_queue)


@app.task(name="sleepy", queue="emails", pass_context=True)
async def sleepy(ctx: TaskContext, seconds: float) -> None:
    log.info("sleeping %gs", seconds)
    await asyncio.sleep(seconds)
    await _record(ctx, "slept")


not_an_app = object()


@app.task(name="paced", queue="reports", pass_context=True)
async def paced(ctx: TaskContext, n: int, seconds: float) -> None:
    """Takes ``seconds``, then records itself: a process killed meanwhile holds claims."""
    await asyncio.sleep(seconds)
    await _record(ctx, f"paced {n}")


@dataclass
class Tally:
    n: int
    seconds: float = 0.0


@app.batch_task(Tally, name="tally", queue=TALLY_QUEUE)
async def tally(conn: psycopg.AsyncConnection[Any], items: list[Tally]) -> None:
    """One row per item, then a pause with the transaction open: a process killed meanwhile
    dies holding a batch whose effects are written but not committed."""
    await conn.execute("INSERT INTO tallies (n) SELECT unnest(%s::int[])", ([t.n for t in items],))
    log.info("tallied %d item(s); committing in %gs", len(items), max(t.seconds for t in items))
    await asyncio.sleep(max(t.seconds for t in items))
