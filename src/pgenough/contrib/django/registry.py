"""The project's one pgenough ``App``: the tasks of every installed app's ``tasks.py`` are
registered on it (``@app.task``), as Celery's ``shared_task`` does, and ``manage.py pgenough
worker`` runs it."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

from psycopg_pool import AsyncConnectionPool

from pgenough.core import App, Job, ThreadHandler
from pgenough.core.executor import AnyHandler


class DjangoApp(App):
    """An ``App`` whose plain-function tasks leave no stale Django connection behind.

    A plain function runs in one of the worker's threads, and Django's connections are per
    thread: without a request around the job, nothing would close one that broke or outlived
    ``CONN_MAX_AGE``, and the next job on that thread would reuse it. So each such job is
    wrapped in ``close_old_connections()``, as Django does around a request and Celery around
    a task. Async tasks reach the ORM through ``sync_to_async``, whose threads Django's
    ``close_old_connections`` cannot reach from here; they are the caller's to manage."""

    def handlers(self, pool: AsyncConnectionPool) -> dict[str, AnyHandler]:
        return {
            kind: replace(handler, fn=_closing_old_connections(handler.fn))
            if isinstance(handler, ThreadHandler)
            else handler
            for kind, handler in super().handlers(pool).items()
        }


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
