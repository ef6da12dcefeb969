"""The project's one pgenough ``App``: the tasks of every installed app's ``tasks.py`` are
registered on it (``@app.task``), as Celery's ``shared_task`` does, and ``manage.py pgenough
worker`` runs it."""

from __future__ import annotations

import functools
import inspect
from dataclasses import replace
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgenough.core import AnyConnection, App, Job, Task, ThreadHandler
from pgenough.core.executor import AnyHandler


class DjangoApp(App):
    """An ``App`` whose plain-function tasks leave no stale Django connection behind.

    A plain function runs in one of the worker's threads, and Django's connections are per
    thread: without a request around the job, nothing would close one that broke or outlived
    ``CONN_MAX_AGE``, and the next job on that thread would reuse it. So each such job is
    wrapped in ``close_old_connections()``, as Django does around a request and Celery around
    a task. Async tasks reach the ORM through ``sync_to_async``, whose threads Django's
    ``close_old_connections`` cannot reach from here; they are the caller's to manage.
    In test mode, inside a ``TestCase``, each plain-function job runs in a savepoint of
    Django's (``run_in_process``)."""

    def handlers(self, pool: AsyncConnectionPool) -> dict[str, AnyHandler]:
        return {
            kind: replace(handler, fn=_closing_old_connections(handler.fn))
            if isinstance(handler, ThreadHandler)
            else handler
            for kind, handler in super().handlers(pool).items()
        }

    def run_in_process(self, task: Task[...], job: Job, conn: AnyConnection) -> Any:
        """Test mode (``run_jobs``, an eager enqueue) on Django's connection inside
        ``atomic()`` (a ``TestCase``): a plain function runs in a savepoint Django knows of.
        Test mode rolls a failing task back on the connection itself, but Django, which saw
        the task's query fail inside its atomic block, would refuse every later query of
        the test ("An error occurred in the current transaction") until the block ends; its
        own savepoint rolls back and clears that. A ``TaskFailed`` is an outcome the task
        recorded in it: the savepoint is kept."""
        from django.db import connections, transaction

        from pgenough.core.testing import TaskFailed

        django = next(
            (w for w in connections.all(initialized_only=True) if w.connection is conn), None
        )
        if django is None or not django.in_atomic_block or inspect.iscoroutinefunction(task.fn):
            return super().run_in_process(task, job, conn)
        with transaction.atomic(using=django.alias):
            try:
                return super().run_in_process(task, job, conn)
            except TaskFailed as exc:
                failed = exc
        raise failed


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
