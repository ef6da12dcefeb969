"""mypy checks the calls that enqueue a task against the task's own signature."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.procs import ROOT

pytestmark = pytest.mark.slow

USER_CODE = textwrap.dedent(
    """
    from typing import Any

    import psycopg

    from pgenough.core import App, TaskContext, enqueue

    app = App()


    @app.task(queue="emails")
    async def send(order_id: int, to: str, *, urgent: bool = False) -> None: ...


    @app.task(pass_context=True)
    async def charge(ctx: TaskContext, order_id: int) -> None: ...


    async def producer(conn: psycopg.AsyncConnection[Any]) -> None:
        await send.enqueue(conn, 7, "ann@example.com", urgent=True)  # fine
        await send.using(delay=5).enqueue(conn, order_id=7, to="x")  # fine
        await charge.enqueue(conn, 7)  # fine: the context is the worker's to pass
        send.job(7, "x")  # fine
        await send.enqueue(conn, "seven", "x")  # error: wrong type
        await send.enqueue(conn, 7)  # error: missing 'to'
        await send.enqueue(conn, 7, "x", colour="red")  # error: unknown keyword
        await charge.enqueue(conn, order_id="7")  # error: wrong type


    def sync_producer(conn: psycopg.Connection[Any]) -> int | None:
        send.enqueue_many(conn, [{"order_id": 1, "to": "x"}]) + 1  # fine: an int, at once
        job_id: int | None = send.enqueue(conn, 7, "x")  # fine: no await on a sync connection
        enqueue(conn, "kind", {"a": 1}) + 1  # error: int | None
        send.enqueue(conn, "seven", "x")  # error: wrong type, sync too
        return job_id


    async def mixed(conn: psycopg.AsyncConnection[Any]) -> None:
        job_id: int | None = send.enqueue(conn, 7, "x")  # error: a coroutine, not awaited
        print(job_id)
    """
)


def test_mypy_checks_enqueue_calls_against_the_tasks_signature(tmp_path: Path) -> None:
    module = tmp_path / "user_tasks.py"
    module.write_text(USER_CODE)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(module)],
        cwd=ROOT,  # the project's mypy settings and cache
        capture_output=True,
        text=True,
        timeout=240,
    )
    errors = sorted({int(n) for n in re.findall(r"user_tasks\.py:(\d+): error", result.stdout)})
    expected = [n for n, line in enumerate(USER_CODE.splitlines(), 1) if "# error:" in line]
    assert len(expected) == 7
    assert errors == expected, result.stdout + result.stderr


BATCH_USER_CODE = textwrap.dedent(
    """
    from dataclasses import dataclass
    from typing import Any

    import psycopg

    from pgenough.core import App, BatchTask

    app = App()


    @dataclass
    class View:
        page_id: int
        user_id: int
        weight: int = 1


    @app.batch_task(View, queue="views")
    async def record_views(conn: psycopg.AsyncConnection[Any], views: list[View]) -> None: ...


    async def producer(conn: psycopg.AsyncConnection[Any]) -> None:
        task: BatchTask[[int, int, int], View] = record_views  # fine
        await record_views.enqueue(conn, page_id=1, user_id=2)  # fine
        await record_views.using(priority=5).enqueue(conn, 1, 2, weight=3)  # fine
        record_views.job(page_id=1, user_id=2)  # fine
        await record_views.enqueue_many(conn, [{"page_id": 1, "user_id": 2}])  # fine
        await record_views.enqueue(conn, page_id="1", user_id=2)  # error: wrong type
        await record_views.enqueue(conn, page_id=1)  # error: missing user_id
        record_views.job(page_id=1, user_id=2, colour="red")  # error: unknown keyword


    @app.batch_task(View)  # error: the function takes other items than View
    async def wrong_items(conn: psycopg.AsyncConnection[Any], views: list[int]) -> None: ...
    """
)


def test_mypy_checks_batch_task_calls_against_the_args_type(tmp_path: Path) -> None:
    module = tmp_path / "user_batch_tasks.py"
    module.write_text(BATCH_USER_CODE)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(module)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    found = re.findall(r"user_batch_tasks\.py:(\d+): error", result.stdout)
    errors = sorted({int(n) for n in found})
    expected = [n for n, line in enumerate(BATCH_USER_CODE.splitlines(), 1) if "# error:" in line]
    assert len(expected) == 4
    assert errors == expected, result.stdout + result.stderr
