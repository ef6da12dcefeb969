"""The task module of the failover runs (``pgenough worker run tests.helpers.failoverapp:app``):
one task whose effect is written in the transaction that completes its job (exactly once), and
which writes a line to ``$FAILOVER_ACK_FILE`` for every completion whose commit it saw
acknowledged, and for every one in doubt (the connection dropped during COMMIT: it may or may
not have committed).

``failover_effects`` has no unique constraint: an effect committed twice is two rows, counted
by the test, rather than a constraint error that would hide it. ``n`` is the producer's own
number (``tests.helpers.failover.Producer``); the job id is kept too, but after an
asynchronous failover the new primary's sequence may hand out again the ids of jobs whose
enqueue it never received.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from typing import Final

import psycopg

from pgenough.core import App, TaskContext, complete

log = logging.getLogger("failoverapp")

QUEUE: Final = "failover"
TASK: Final = "failover.effect"
ACK_FILE: Final = "FAILOVER_ACK_FILE"
EFFECTS_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS failover_effects (n bigint NOT NULL, job_id bigint NOT NULL,"
    " token text NOT NULL, attempts int NOT NULL,"
    " at timestamptz NOT NULL DEFAULT clock_timestamp());"
    " CREATE INDEX IF NOT EXISTS failover_effects_n ON failover_effects (n)"
)

app = App()
_acks = open(os.environ[ACK_FILE], "a", buffering=1) if os.environ.get(ACK_FILE) else None  # noqa: SIM115


def _note(outcome: str, n: int, token: str) -> None:
    if _acks is not None:
        _acks.write(f"{outcome} {n} {token} {time.time():.6f}\n")


@app.task(name=TASK, queue=QUEUE, pass_context=True)
async def effect(ctx: TaskContext, n: int, hold: float = 0.0, stall: float = 0.0) -> None:
    """Write the effect of ``n``, wait ``hold`` seconds (and ``stall`` more on the first
    attempt) with the transaction open, then complete the job in it and commit."""
    token = uuid.uuid4().hex
    committing = False
    try:
        async with ctx.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO failover_effects (n, job_id, token, attempts) VALUES (%s, %s, %s, %s)",
                (n, ctx.job.id, token, ctx.job.attempts),
            )
            await asyncio.sleep(hold + (stall if ctx.job.attempts == 1 else 0.0))
            await complete(conn, ctx.job)
            committing = True  # what fails from here on is the COMMIT
    except psycopg.OperationalError:
        if committing:
            _note("doubt", n, token)
        raise
    _note("done", n, token)
