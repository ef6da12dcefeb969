"""Plain-function tasks, as a Django or Flask project writes them, for
``pgenough worker run tests.helpers.threadapp:app``: each blocks its thread and writes what it
did through a synchronous connection of its own, committed at once, so a test sees every run,
duplicates included (``thread_runs`` has no unique key)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import psycopg

from pgenough.core import App, TaskContext

log = logging.getLogger("threadapp")

QUEUE = "threads"
TABLES = (
    "DROP TABLE IF EXISTS thread_runs, thread_gauge",
    "CREATE TABLE thread_runs (job_id bigint, attempt int, event text, pid int,"
    " at timestamptz NOT NULL DEFAULT clock_timestamp())",
    "CREATE TABLE thread_gauge (running int NOT NULL, peak int NOT NULL)",
    "INSERT INTO thread_gauge VALUES (0, 0)",
)
GAUGE_WAIT = 20.0
"""How long a gauged job waits for the others to be running with it (a failing run only)."""

app = App()


def _record(ctx: TaskContext, event: str) -> None:
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO thread_runs (job_id, attempt, event, pid) VALUES (%s, %s, %s, %s)",
            (ctx.job.id, ctx.job.attempts, event, os.getpid()),
        )


@app.task(name="gauged", queue=QUEUE, pass_context=True)
def gauged(ctx: TaskContext, together: int) -> None:
    """Count itself running, then wait until ``together`` jobs run at once (or give up after
    GAUGE_WAIT): the peak counts how many threads really ran at the same time."""
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "UPDATE thread_gauge SET running = running + 1, peak = greatest(peak, running + 1)"
        )
        deadline = time.monotonic() + GAUGE_WAIT
        while time.monotonic() < deadline:
            row = conn.execute("SELECT peak FROM thread_gauge").fetchone()
            if row is not None and row[0] >= together:
                break
            time.sleep(0.02)
        conn.execute("UPDATE thread_gauge SET running = running - 1")
    _record(ctx, "done")


@app.task(name="one_second", queue=QUEUE, timeout=1.6, pass_context=True)
def one_second(ctx: TaskContext) -> None:
    """A second of blocking work, well within its timeout once it has started."""
    time.sleep(1.0)
    _record(ctx, "done")


def _sleep(ctx: TaskContext, seconds: float) -> None:
    _record(ctx, "start")
    log.info("%s started, %gs", ctx.job.kind, seconds)
    time.sleep(seconds)
    _record(ctx, "done")


@app.task(name="overrun", queue=QUEUE, timeout=0.5, max_attempts=3, pass_context=True)
def overrun(ctx: TaskContext, seconds: float) -> None:
    """Runs far past its timeout, which cannot stop it."""
    _sleep(ctx, seconds)


@app.task(name="long_sleep", queue=QUEUE, pass_context=True)
def long_sleep(ctx: TaskContext, seconds: float) -> None:
    _sleep(ctx, seconds)


@app.task(name="stubborn", queue=QUEUE, pass_context=True)
async def stubborn(ctx: TaskContext, cleanup: float) -> None:
    """An async task whose cancellation takes ``cleanup`` seconds to finish."""
    await asyncio.to_thread(_record, ctx, "start")
    log.info("stubborn started")
    try:
        await asyncio.sleep(600)
    finally:
        await asyncio.shield(asyncio.sleep(cleanup))  # e.g. an awaited rollback, a close
        await asyncio.to_thread(_record, ctx, "ended")


@app.task(name="until_cancelled", queue=QUEUE, pass_context=True)
def until_cancelled(ctx: TaskContext) -> None:
    """Blocking work in steps, looking for a cancel between them (as the docs advise)."""
    _record(ctx, "start")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if ctx.cancelled:
            _record(ctx, "cancelled")
            ctx.raise_if_cancelled()
        time.sleep(0.02)
    _record(ctx, "done")  # never cancelled


@app.task(name="async_until_cancelled", queue=QUEUE, pass_context=True)
async def async_until_cancelled(ctx: TaskContext) -> None:
    await asyncio.to_thread(_record, ctx, "start")
    try:
        await asyncio.sleep(120)
    except asyncio.CancelledError:
        _record(ctx, "cancelled")  # blocking, briefly: the coroutine is being cancelled
        raise
    await asyncio.to_thread(_record, ctx, "done")  # never cancelled


def run_events(conn: psycopg.Connection[Any]) -> list[tuple[int, int, str, int]]:
    return [
        (int(r[0]), int(r[1]), str(r[2]), int(r[3]))
        for r in conn.execute(
            "SELECT job_id, attempt, event, pid FROM thread_runs ORDER BY at"
        ).fetchall()
    ]
