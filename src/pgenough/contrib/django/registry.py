"""The project's one pgenough ``App``: the tasks of every installed app's ``tasks.py`` are
registered on it (``@app.task``), as Celery's ``shared_task`` does, and ``manage.py pgenough
worker`` runs it."""

from __future__ import annotations

import asyncio
import functools
import inspect
from dataclasses import replace
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgenough.core import App, Job, Task, ThreadHandler
from pgenough.core.db import AnyConnection
from pgenough.core.worker import AnyHandler


class DjangoApp(App):
    """An ``App`` whose plain-function tasks leave no stale Django connection behind.

    A plain function runs in one of the worker's threads, and Django's connections are per
    thread: without a request around the job, nothing would close one that broke or outlived
    ``CONN_MAX_AGE``, and the next job on that thread would reuse it. So each such job is
    wrapped in ``close_old_connections()``, as Django does around a request and Celery around
    a task. Async tasks reach the ORM through ``sync_to_async``, whose threads Django's
    ``close_old_connections`` cannot reach from here; they are the caller's to manage.
    Test mode on Django's connection runs async tasks' ORM calls on the test's thread, and
    each job in a savepoint of Django's inside a ``TestCase`` (``run_in_process``)."""

    def handlers(self, pool: AsyncConnectionPool) -> dict[str, AnyHandler]:
        return {
            kind: replace(handler, fn=_closing_old_connections(handler.fn))
            if isinstance(handler, ThreadHandler)
            else handler
            for kind, handler in super().handlers(pool).items()
        }

    def run_in_process(self, task: Task[...], job: Job, conn: AnyConnection) -> Any:
        """Test mode (``run_jobs``, an eager enqueue) on Django's own connection.

        An ``async def`` task runs through ``async_to_sync``, as Django's ``Task.call`` and
        test client run coroutines: its ORM calls (``sync_to_async``) come back to this
        thread, so to the test's connection and transaction. Run on a loop of its own, they
        would go to a thread whose connection sees none of the test's rows, writes outside
        its transaction, and outlives it (``manage.py test`` then cannot drop its database).

        Inside ``atomic()`` (a ``TestCase``) the job runs in a savepoint Django knows of.
        Test mode rolls a failing task back on the connection itself, but Django, which saw
        the task's query fail inside its atomic block, would refuse every later query of the
        test ("An error occurred in the current transaction") until the block ends; its own
        savepoint rolls back and clears that. A ``TaskFailed`` is an outcome the task
        recorded in it: the savepoint is kept."""
        from django.db import connections, transaction

        from pgenough.core import TaskFailed

        django = next(
            (w for w in connections.all(initialized_only=True) if w.connection is conn), None
        )
        if django is None:
            return super().run_in_process(task, job, conn)
        if not django.in_atomic_block:
            return _on_this_thread(super().run_in_process(task, job, conn))
        with transaction.atomic(using=django.alias):
            try:
                return _on_this_thread(super().run_in_process(task, job, conn))
            except TaskFailed as exc:
                failed = exc
        raise failed


def _on_this_thread(outcome: Any) -> Any:
    """``outcome`` (a plain function's value, or an async task's coroutine) run to its end
    from this sync thread with ``async_to_sync``; a coroutine is handed back as it is where
    an event loop already runs here (test mode then runs it in a thread of its own)."""
    if not inspect.isawaitable(outcome):
        return outcome
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return outcome
    from asgiref.sync import async_to_sync

    async def wait() -> Any:
        return await outcome

    return async_to_sync(wait)()


def _closing_old_connections(fn: Any) -> Any:
    @functools.wraps(fn)
    def run(job: Job) -> object:
        from django.db import close_old_connections

        close_old_connections()
        try:
            return fn(job)
        finally:
            close_old_connections()

    return run


app = DjangoApp()
