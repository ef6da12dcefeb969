"""What a failed attempt leaves behind (``core/failures.py``): its traceback in ``jobs.errors``
for plain, async, batch and test-mode tasks, bounded in size and in number; ``fail`` and
``TaskFailed``; and the worker's line per finished job (``pgenough.jobs``)."""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import (
    App,
    Backoff,
    GiveUp,
    JobRecord,
    RetryIn,
    TaskContext,
    TaskFailed,
    WorkerConfig,
    WorkerStats,
    fail,
    get_job,
)
from pgenough.core.admin import AttemptError
from pgenough.core.failures import (
    ERRORS_KEPT,
    TRACEBACK_LIMIT,
    TRACEBACKS_KEPT,
    format_traceback,
)
from pgenough.core.maintenance import requeue_stuck
from pgenough.core.testing import run_jobs
from pgenough.core.worker import JOBS_LOGGER

CONFIG = WorkerConfig(maintenance=None, batch_size=20, concurrency=20, backoff=Backoff(1, 1))
HERE = Path(__file__).resolve()


def line_of(marker: str) -> int:
    """The line of this file that ends with ``# marker``."""
    lines = HERE.read_text("utf-8").splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.rstrip().endswith(f"# {marker}"))


def where(function: str, marker: str) -> str:
    """How a traceback names the line of ``function`` that ends with ``# marker``."""
    return f'File "{HERE}", line {line_of(marker)}, in {function}'


# -- the text: chained, bounded -----------------------------------------------------------------


def test_a_chained_exception_keeps_its_chain() -> None:
    prices: dict[str, int] = {}
    try:
        try:
            prices["sku"]  # THE_CAUSE
        except KeyError as exc:
            raise ValueError("no price for this order") from exc  # THE_EFFECT
    except ValueError as exc:
        text = format_traceback(exc)
    assert where("test_a_chained_exception_keeps_its_chain", "THE_CAUSE") in text
    assert "KeyError: 'sku'" in text
    assert "The above exception was the direct cause of the following exception:" in text
    assert where("test_a_chained_exception_keeps_its_chain", "THE_EFFECT") in text
    assert text.endswith("ValueError: no price for this order\n")


def ping(n: int) -> None:
    if n == 0:
        raise RecursionError("the bottom, 700 frames down")  # THE_BOTTOM
    pong(n - 1)


def pong(n: int) -> None:
    ping(n)  # alternating frames: Python's "[Previous line repeated]" cannot fold them


def test_a_deep_traceback_keeps_its_head_and_its_innermost_frames() -> None:
    try:
        ping(350)
    except RecursionError as exc:
        whole = "".join(traceback.format_exception(exc))
        text = format_traceback(exc)
    assert len(whole) > 5 * TRACEBACK_LIMIT
    assert len(text) <= TRACEBACK_LIMIT
    assert text.startswith("Traceback (most recent call last):\n")
    # The outermost frame (this test's call) stays in the head...
    assert "in test_a_deep_traceback_keeps_its_head_and_its_innermost_frames" in text
    # ...a marker says what was cut...
    assert "characters (" in text and "frames or lines) cut here ...]" in text
    # ...and the end, what matters, is whole: the innermost frame and the exception.
    innermost = text.rindex('  File "')
    assert text[innermost:].startswith(f"  {where('ping', 'THE_BOTTOM')}\n")
    assert text.endswith("RecursionError: the bottom, 700 frames down\n")


def test_a_huge_message_cannot_push_the_frames_out() -> None:
    try:
        raise ValueError("x" * 100_000)  # THE_HUGE_ONE
    except ValueError as exc:
        text = format_traceback(exc)
    assert len(text) <= TRACEBACK_LIMIT
    assert where("test_a_huge_message_cannot_push_the_frames_out", "THE_HUGE_ONE") in text
    assert "more characters cut]" in text


# -- in jobs.errors: plain, async, batch, test mode -----------------------------------------------


@dataclass
class Line:
    n: int


def failing_app() -> App:
    app = App()

    @app.task(name="sync", queue="q", max_attempts=1)
    def sync_task(n: int) -> None:
        raise ValueError(f"sync {n}")  # SYNC_RAISE

    @app.task(name="async", queue="q", max_attempts=1)
    async def async_task(n: int) -> None:
        raise ValueError(f"async {n}")  # ASYNC_RAISE

    @app.batch_task(Line, name="batch", queue="q", max_attempts=1)
    async def batch_task(conn: psycopg.AsyncConnection[Any], lines: list[Line]) -> None:
        if any(line.n == 2 for line in lines):
            raise ValueError("line 2 is bad")  # BATCH_RAISE

    @app.task(name="ok", queue="q")
    async def ok_task(n: int) -> None:
        pass

    return app


async def job(db: AsyncConnectionPool, job_id: int | None) -> JobRecord:
    assert job_id is not None
    async with db.connection() as conn:
        record = await get_job(conn, job_id)
    assert record is not None
    return record


async def test_each_kind_of_task_leaves_the_file_and_line_of_its_raise(
    db: AsyncConnectionPool,
) -> None:
    app = failing_app()
    async with db.connection() as conn:
        sync_id = await app.tasks["sync"].enqueue(conn, n=1)
        async_id = await app.tasks["async"].enqueue(conn, n=1)
        await app.tasks["batch"].enqueue_many(conn, [{"n": n} for n in (1, 2, 3)])
        cur = await conn.execute(
            "SELECT id FROM pgenough.jobs WHERE kind = 'batch' AND payload ->> 'n' = '2'"
        )
        [(batch_id,)] = await cur.fetchall()

    stats = await app.worker(db, config=CONFIG).run(until_idle=True)

    assert (stats.completed, stats.failed, stats.dead) == (2, 3, 3)  # the batch's 1 and 3
    for job_id, function, marker, error in (
        (sync_id, "sync_task", "SYNC_RAISE", "ValueError: sync 1"),
        (async_id, "async_task", "ASYNC_RAISE", "ValueError: async 1"),
        (batch_id, "batch_task", "BATCH_RAISE", "ValueError: line 2 is bad"),
    ):
        record = await job(db, job_id)
        assert record.state == "dead", function
        [attempt] = record.errors
        assert isinstance(attempt, AttemptError)
        assert (attempt.attempt, attempt.error) == (1, error)
        assert attempt.worker is not None and attempt.at is not None
        assert attempt.traceback is not None
        assert where(function, marker) in attempt.traceback, attempt.traceback
        assert attempt.traceback.endswith(f"{error}\n")
        # From the task's own code on: none of the worker's, the loop's or the thread
        # pool's frames that carried the job there.
        first_frame = attempt.traceback.splitlines()[1]
        assert first_frame.startswith(f'  File "{__file__}"'), attempt.traceback
        for runtime in ("pgenough/core/", "concurrent/futures", "asyncio/"):
            assert runtime not in attempt.traceback, (runtime, attempt.traceback)


async def test_test_mode_records_the_traceback_too(db: AsyncConnectionPool) -> None:
    app = failing_app()
    async with db.connection() as conn, conn.transaction():
        job_id = await app.tasks["async"].enqueue(conn, n=7)
        report = await run_jobs(conn, app, raise_on_failure=False)
        assert [r.state for r in report.runs] == ["dead"]
        record = await get_job(conn, job_id)  # type: ignore[arg-type]
        assert record is not None and record.errors[0].traceback is not None
        assert where("async_task", "ASYNC_RAISE") in record.errors[0].traceback
        raise psycopg.Rollback()


async def test_only_the_newest_tracebacks_are_kept(db: AsyncConnectionPool) -> None:
    """A job failing again and again keeps its last ``ERRORS_KEPT`` errors, of which the
    newest ``TRACEBACKS_KEPT`` with a traceback have it: a dead row stays small. A ``RetryIn``
    (none, on purpose) and a lease expiry (none: no exception) do not push one out."""
    app = App()
    runs = ERRORS_KEPT + 2
    outcomes: dict[int, Exception] = {runs - 1: RetryIn(60, "busy")}

    @app.task(name="again", max_attempts=ERRORS_KEPT + 10, pass_context=True)
    async def again(ctx: TaskContext) -> None:
        raise outcomes.get(ctx.job.attempts, ValueError(f"attempt {ctx.job.attempts}"))

    async with db.connection() as conn:
        job_id = await again.enqueue(conn)
    for _ in range(runs):  # an attempt each
        await app.worker(db, config=CONFIG).run(until_idle=True)
        async with db.connection() as conn:
            await conn.execute("UPDATE pgenough.jobs SET run_at = now() WHERE id = %s", [job_id])
    # The rescuer's entry, as for a worker that died on the next attempt.
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE pgenough.jobs SET state = 'running', attempts = attempts + 1,"
            " lease_until = now() - interval '1 second', worker = 'gone' WHERE id = %s",
            [job_id],
        )
        await requeue_stuck(conn)
    record = await job(db, job_id)
    assert [e.attempt for e in record.errors] == list(range(runs + 2 - ERRORS_KEPT, runs + 2))
    assert record.errors[-1].error.startswith("lease expired")
    assert record.errors[-3].error == "busy (retry in 60s)"
    traced = [e.attempt for e in record.errors if e.traceback is not None]
    raised = [n for n in range(1, runs + 1) if n not in outcomes]
    assert traced == raised[-TRACEBACKS_KEPT:]
    for e in record.errors:
        if e.traceback is not None:
            assert e.error == f"ValueError: attempt {e.attempt}"
            assert e.traceback.endswith(f"ValueError: attempt {e.attempt}\n")


async def test_retry_in_keeps_no_traceback_and_give_up_keeps_one(db: AsyncConnectionPool) -> None:
    app = App()

    @app.task(name="later")
    async def later() -> None:
        raise RetryIn(60, "partner busy")

    @app.task(name="hopeless")
    async def hopeless() -> None:
        raise GiveUp("malformed")  # GIVE_UP

    async with db.connection() as conn:
        later_id = await later.enqueue(conn)
        hopeless_id = await hopeless.enqueue(conn)
    await app.worker(db, config=CONFIG).run(until_idle=True)
    assert (await job(db, later_id)).errors[0].traceback is None
    kept = (await job(db, hopeless_id)).errors[0].traceback
    assert kept is not None and where("hopeless", "GIVE_UP") in kept


# -- fail() and TaskFailed: a handler that finishes its job as failed ------------------------------


async def test_a_handler_fails_its_job_with_its_own_writes(db: AsyncConnectionPool) -> None:
    app = App()

    @app.task(name="charge", pass_context=True)
    async def charge(ctx: TaskContext, order_id: int) -> None:
        try:
            raise LookupError(f"card of order {order_id} declined")  # DECLINED
        except LookupError as exc:
            async with ctx.pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO effects (job_id, attempts, worker) VALUES (%s, %s, 'declined')",
                    [ctx.job.id, ctx.job.attempts],
                )
                await fail(conn, ctx.job, exc)
            raise TaskFailed from exc

    @app.task(name="forgetful")
    async def forgetful() -> None:
        try:
            raise LookupError("no such card")
        except LookupError as exc:
            raise TaskFailed from exc  # without fail(): the worker records it

    async with db.connection() as conn:
        charged = await charge.enqueue(conn, order_id=5)
        forgot = await forgetful.enqueue(conn)
    stats = await app.worker(db, config=CONFIG).run(until_idle=True)

    assert (stats.completed, stats.failed, stats.dead, stats.lost) == (0, 2, 2, 0)
    record = await job(db, charged)
    assert (record.state, record.last_error) == ("dead", "LookupError: card of order 5 declined")
    [attempt] = record.errors  # recorded once, by the handler
    assert attempt.traceback is not None and where("charge", "DECLINED") in attempt.traceback
    async with db.connection() as conn:
        cur = await conn.execute("SELECT worker FROM effects WHERE job_id = %s", [charged])
        assert await cur.fetchall() == [("declined",)]
    other = await job(db, forgot)
    assert (other.state, other.last_error) == ("dead", "LookupError: no such card")


# -- the worker's line per finished job -----------------------------------------------------------


@pytest.fixture
def job_lines(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger=JOBS_LOGGER):
        yield caplog
    logging.getLogger(JOBS_LOGGER).setLevel(logging.NOTSET)


def lines_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == JOBS_LOGGER]


async def test_one_line_per_finished_job_with_its_outcome(
    db: AsyncConnectionPool, job_lines: pytest.LogCaptureFixture
) -> None:
    app = failing_app()
    async with db.connection() as conn:
        ok_ids = [await app.tasks["ok"].enqueue(conn, n=n) for n in range(3)]
        failed = await app.tasks["async"].enqueue(conn, n=9)
        await app.tasks["batch"].enqueue_many(conn, [{"n": n} for n in (5, 6)])
    stats = await app.worker(db, config=CONFIG, name="w").run(until_idle=True)
    assert (stats.completed, stats.failed) == (5, 1)

    records = lines_of(job_lines)
    for job_id in ok_ids:
        [done] = [r for r in records if r.getMessage().startswith(f"w: job {job_id} ")]
        assert done.levelno == logging.INFO
        assert done.getMessage().startswith(f"w: job {job_id} done (ok, 0.")
        assert done.exc_info is None
    [dead] = [r for r in records if f"job {failed} " in r.getMessage()]
    assert dead.levelno == logging.ERROR
    assert dead.getMessage().startswith(f"w: job {failed} failed, dead-lettered (async, ")
    assert dead.getMessage().endswith(", attempt 1 of 1): ValueError: async 9")
    assert dead.exc_info is not None and str(dead.exc_info[1]) == "async 9"
    # A batch: one line for the call, naming its jobs.
    [batch] = [r for r in records if "(batch, batch of 2, " in r.getMessage()]
    assert batch.levelno == logging.INFO
    assert len(records) == 3 + 1 + 1


async def test_a_retry_is_a_warning_with_its_traceback(
    db: AsyncConnectionPool, job_lines: pytest.LogCaptureFixture
) -> None:
    app = App()

    @app.task(name="flaky", max_attempts=3)
    async def flaky() -> None:
        raise ConnectionError("partner down")

    async with db.connection() as conn:
        job_id = await flaky.enqueue(conn)
    stats = await app.worker(db, config=CONFIG, name="w").run(until_idle=True)
    assert (stats.failed, stats.retried, stats.dead) == (1, 1, 0)
    [line] = lines_of(job_lines)
    assert line.levelno == logging.WARNING
    assert re.match(rf"w: job {job_id} failed, retry in [01]\.\ds \(flaky, ", line.getMessage())
    assert line.getMessage().endswith(", attempt 1 of 3): ConnectionError: partner down")
    assert line.exc_info is not None


async def test_the_done_lines_can_be_quieted(
    db: AsyncConnectionPool, job_lines: pytest.LogCaptureFixture
) -> None:
    logging.getLogger(JOBS_LOGGER).setLevel(logging.WARNING)  # what --quiet does
    app = failing_app()
    async with db.connection() as conn:
        await app.tasks["ok"].enqueue(conn, n=1)
        failed = await app.tasks["async"].enqueue(conn, n=2)
    await app.worker(db, config=CONFIG).run(until_idle=True)
    [line] = lines_of(job_lines)  # the failure's only
    assert f"job {failed} failed, dead-lettered" in line.getMessage()


def test_the_summary_counts_every_failure() -> None:
    stats = WorkerStats(claimed=9, completed=3, failed=4, lost=1, retried=2, dead=2, handed_back=1)
    assert stats.summary() == (
        "3 job(s) completed, 4 failed attempt(s) (2 to retry), 2 dead-lettered, 1 lost"
        " claim(s), 1 handed back (no task here for their kind)"
    )
