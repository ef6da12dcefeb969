"""A job whose kind no task of the worker's app handles: during a rolling deploy an older worker
meets a job of a newer task. It hands it back without spending an attempt, warning once per
kind with the tasks it does know; a worker that has the task runs it; one still unhandled past
``unhandled_grace`` after its enqueue (a typo, a removed task) is dead-lettered, saying why."""

from __future__ import annotations

import logging

import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import App, WorkerConfig, get_job

pytestmark = pytest.mark.db

QUEUE = "deploy"
CONFIG = WorkerConfig(queue=QUEUE, poll_interval=0.05, maintenance=None)


def old_app() -> App:
    app = App()

    @app.task(name="shop.send_receipt", queue=QUEUE)
    async def send_receipt(order_id: int) -> None: ...

    return app


def new_app(ran: list[int]) -> App:
    app = old_app()

    @app.task(name="shop.send_invoice", queue=QUEUE)
    async def send_invoice(order_id: int) -> None:
        ran.append(order_id)

    return app


async def test_an_old_worker_hands_a_new_tasks_job_back_for_a_new_worker(
    db: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[int] = []
    newer = new_app(ran)
    async with db.connection() as conn:
        first = await newer.tasks["shop.send_invoice"].enqueue(conn, order_id=1)
        second = await newer.tasks["shop.send_invoice"].enqueue(conn, order_id=2)
    assert first is not None and second is not None

    with caplog.at_level(logging.WARNING, logger="pgenough.core.worker"):
        old = old_app().worker(db, config=CONFIG, name="old")
        stats = await old.run(until_idle=True)
    assert stats.claimed == 2 and stats.failed == 0
    warned = [r.getMessage() for r in caplog.records if "no task of this worker" in r.message]
    assert len(warned) == 1, "one warning per kind, not one per job"
    assert "kind 'shop.send_invoice'" in warned[0]
    assert "(its tasks: shop.send_receipt)" in warned[0]
    assert "its attempt not counted" in warned[0]
    async with db.connection() as conn:
        for job_id in (first, second):
            record = await get_job(conn, job_id)
            assert record is not None
            assert (record.state, record.attempts, record.worker) == ("ready", 0, None)
            assert record.last_error is not None
            assert record.last_error.startswith("no task named 'shop.send_invoice' on worker old")
            assert "dead-lettered 3600s after its enqueue" in record.last_error
        # Offered again later, not at once: the old worker does not spin on it.
        cur = await conn.execute(
            "SELECT bool_and(run_at > now()) FROM pgenough.jobs WHERE id = ANY(%s)",
            [[first, second]],
        )
        assert (await cur.fetchone()) == (True,)
        await conn.execute("UPDATE pgenough.jobs SET run_at = now() WHERE queue = %s", [QUEUE])

    await newer.worker(db, config=CONFIG, name="new").run(until_idle=True)
    assert sorted(ran) == [1, 2]
    async with db.connection() as conn:
        assert await get_job(conn, first) is None  # completed


async def test_a_job_still_unhandled_past_the_grace_is_dead_with_the_reason(
    db: AsyncConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    async with db.connection() as conn:
        typo = await old_app().tasks["shop.send_receipt"].using().enqueue(conn, order_id=1)
        await conn.execute(
            "UPDATE pgenough.jobs SET kind = 'shop.send_reciept',"
            " created_at = now() - interval '2 hours' WHERE id = %s",
            [typo],
        )
    assert typo is not None
    with caplog.at_level(logging.ERROR, logger="pgenough.core.worker"):
        await old_app().worker(db, config=CONFIG, name="old").run(until_idle=True)
    async with db.connection() as conn:
        record = await get_job(conn, typo)
    assert record is not None and record.state == "dead" and record.finished_at is not None
    assert record.last_error is not None and "'shop.send_reciept'" in record.last_error
    [line] = [r.getMessage() for r in caplog.records if f"job {typo} is dead" in r.message]
    assert "no task named 'shop.send_reciept'" in line
    assert f"deploy the task, then `pgenough retry {typo}`" in line
