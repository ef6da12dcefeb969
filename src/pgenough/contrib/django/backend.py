"""A ``django.tasks`` backend that enqueues Django tasks as pgenough jobs::

    TASKS = {
        "default": {
            "BACKEND": "pgenough.contrib.django.backend.PgenoughBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"DATABASE": "default"},
        }
    }

``task.enqueue(...)`` inserts ONE job, of the one pgenough task ``KIND`` registered here on
the project's shared app, in the caller's transaction on Django's connection for
``OPTIONS["DATABASE"]`` (inside ``transaction.atomic()`` the job exists iff the block
commits), plus its result row (``results``), which outlives the job. ``manage.py pgenough
worker`` serves it: it imports this module, which registers ``KIND``, and by default serves
``configured_queues()``. docs/guides/django-tasks.md is the manual.

With the shared app eager (``PGENOUGH_EAGER=1``, tests) ``enqueue`` runs the task at once,
as ``pgenough.core.testing.run_jobs`` would, once its result row is written: it returns the
finished result, or raises the task's own error (its result FAILED), as an eager app's
``enqueue`` raises a failing task's.

This module imports without Django's Tasks framework (``django.tasks`` or the backport):
``PgenoughBackend`` then raises ``ImproperlyConfigured`` when Django builds it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import traceback
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pgenough.contrib.django import results
from pgenough.contrib.django import tasks_framework as fw
from pgenough.contrib.django.registry import app
from pgenough.core import GiveUp, Job, RetryIn, TaskFailed, complete, fail
from pgenough.core import TaskContext as JobContext
from pgenough.core.orm import django_connection
from pgenough.core.queue import enqueue_job
from pgenough.core.statements import run
from pgenough.core.tasks import TaskArgumentsError

log = logging.getLogger(__name__)

KIND = "django.tasks"
"""The pgenough task (the jobs' ``kind``) every Django task is enqueued as."""
PRUNE_KIND = "django.tasks.prune_results"
"""The periodic pgenough task that deletes finished results past their retention."""
BACKEND_PATH = "pgenough.contrib.django.backend.PgenoughBackend"
DEFAULT_QUEUE_NAME = "default"
"""Django's ``DEFAULT_TASK_QUEUE_NAME``: the queues of a backend without ``QUEUES``."""
DEFAULT_RESULT_RETENTION = timedelta(days=7)
"""How long a finished result is kept unless ``OPTIONS["RESULT_RETENTION"]`` says."""
PRUNE_INTERVAL = 3600.0
"""Seconds between two runs of ``PRUNE_KIND`` (one across every worker process)."""
OPTIONS = ("DATABASE", "RESULT_RETENTION")
"""The keys the backend's ``OPTIONS`` may have."""
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
"""An attempt's worker id when its job row does not name its claimant."""


class _Missing:
    """The backend's base when neither ``django.tasks`` nor ``django_tasks`` imports."""

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"TASKS[{alias!r}]: {fw.INSTALL_HINT}")


_Base: Any = fw.BaseTaskBackend if fw.PACKAGE is not None else _Missing


class PgenoughBackend(_Base):  # Django's class, untyped here
    """Django tasks as pgenough jobs, their results in ``pgenough.django_task_results``.

    ``OPTIONS``: ``DATABASE``, the ``DATABASES`` alias the jobs and results live in (a
    PostgreSQL one, the worker's; default ``"default"``), and ``RESULT_RETENTION``, how long
    a finished result is kept (a ``timedelta`` or seconds; None keeps them; default 7 days).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        options: Mapping[str, Any] = self.options
        self.database: str = options.get("DATABASE", "default")
        self.result_retention = _seconds(
            options.get("RESULT_RETENTION", DEFAULT_RESULT_RETENTION), alias
        )
        """Seconds a finished result is kept; None: for ever."""

    # -- producing ---------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        from django.db import transaction

        self.validate_task(task)
        json_args, json_kwargs = _json_arguments(task, args, kwargs, self.alias)
        run_after = _aware(task.run_after)
        runner = run_django_task.using(
            queue=task.queue_name, priority=task.priority, run_at=run_after
        )
        job = runner.job(
            task=task.module_path, args=json_args, kwargs=json_kwargs, backend=self.alias
        )
        # One transaction for the job and its result: a savepoint in the caller's atomic
        # block (both commit or roll back with it), a transaction of its own in autocommit.
        with transaction.atomic(using=self.database):
            conn = self._connection()
            # Inserted, never run here even by an eager app: its run needs the result row.
            job_id = run(conn, enqueue_job(job), what=f"{task.module_path}.enqueue(...)")
            assert job_id is not None  # no dedupe key: always inserted
            row = results.insert(
                conn,
                job_id=job_id,
                backend=self.alias,
                task_path=task.module_path,
                queue=task.queue_name,
                priority=task.priority,
                run_after=run_after,
                args=json_args,
                kwargs=json_kwargs,
            )
        result = self._result(row, task)
        fw.task_enqueued.send(type(self), task_result=result)
        if app.eager:
            return self._run_eagerly(result)
        return result

    def _run_eagerly(self, enqueued: Any) -> Any:
        """An eager app's enqueue (tests): the job runs now, on this connection, as
        ``run_jobs`` runs it; then its finished result, or the task's own error raised
        once its FAILED result is recorded (in the caller's transaction, if any)."""
        from django.db import transaction

        from pgenough.core.testing import run_jobs

        # Django's atomic, not only run_jobs' savepoint: in autocommit Django must know a
        # transaction is open, or the task's own atomic blocks would end it.
        with transaction.atomic(using=self.database):
            conn = self._connection()
            report = run_jobs(
                conn,
                app,
                ids=[int(enqueued.id)],
                include_scheduled=True,
                raise_on_failure=False,
            )
        for ran in report.failed:
            if ran.exception is not None:
                raise ran.exception
        row = results.get(self._connection(), int(enqueued.id))
        assert row is not None  # just written, in this transaction
        return self._result(row, enqueued.task)

    def get_result(self, result_id: str) -> Any:
        """The result of ``result_id`` as stored now; ``TaskResultDoesNotExist`` when there
        is none (never enqueued here, or pruned)."""
        job_id = _job_id(result_id)
        row = results.get(self._connection(), job_id) if job_id is not None else None
        if row is None or row.backend != self.alias:
            raise fw.TaskResultDoesNotExist(result_id)
        return self._result(row)

    # -- checks ------------------------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """Django's checks (``InvalidTask``: a queue not in ``QUEUES``, a priority out of
        range, a naive ``run_after``...), and one of pgenough's: a worker must be able to
        import the task, which it cannot from a script's ``__main__``."""
        super().validate_task(task)
        if task.func.__module__ == "__main__":
            raise fw.InvalidTask(
                f"Task {task.func.__qualname__!r} is defined in __main__, which a worker"
                " cannot import: define it in a module (e.g. your app's tasks.py)."
            )

    def check(self, **kwargs: Any) -> Iterable[Any]:
        """Django's system checks (``manage.py check``) of this backend's configuration."""
        from django.apps import apps
        from django.conf import settings
        from django.core import checks
        from django.db import connections

        yield from super().check(**kwargs)
        where = f"TASKS[{self.alias!r}]"
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            yield checks.Error(
                f"{where}: unknown OPTIONS {', '.join(map(repr, unknown))}",
                hint=f"pgenough's backend takes {', '.join(OPTIONS)}",
                id="pgenough.tasks.E001",
            )
        if self.database not in settings.DATABASES:
            yield checks.Error(
                f"{where}: OPTIONS['DATABASE'] is {self.database!r}, not a DATABASES alias",
                id="pgenough.tasks.E002",
            )
        elif connections[self.database].vendor != "postgresql":
            yield checks.Error(
                f"{where}: DATABASES[{self.database!r}] is"
                f" {connections[self.database].vendor}; pgenough needs PostgreSQL",
                hint="name a PostgreSQL alias in OPTIONS['DATABASE']",
                id="pgenough.tasks.E003",
            )
        if not apps.is_installed("pgenough.contrib.django"):
            yield checks.Error(
                f"{where}: 'pgenough.contrib.django' is not in INSTALLED_APPS",
                hint="add it: manage.py migrate then creates the queue's and the results' tables",
                id="pgenough.tasks.E004",
            )

    # -- running (in a worker's thread) ------------------------------------------------------

    def run_attempt(
        self, job: Job, task_path: str, args: list[Any], kwargs: dict[str, Any]
    ) -> None:
        """Run one attempt of the Django task of ``job`` and record its outcome, with the
        job's, in one transaction.

        Django's semantics: an exception fails the result at once (FAILED, with its class
        and traceback), as Django's own backends do, and is not retried. The job then ends
        as any pgenough job whose task failed for good: dead, with the same error and
        traceback in ``jobs.errors`` (``fail``), and ``TaskFailed`` raised from the task's
        exception tells the worker, which counts and logs it. A task that returns completes
        its job with its SUCCESSFUL result. Only ``RetryIn`` (pgenough's) asks for another
        attempt."""
        conn = self._connection()
        row = results.start_attempt(conn, job.id, WORKER_ID)  # autocommit: seen at once
        if row is None:
            raise GiveUp(f"job {job.id}: its result is gone or finished; nothing to run")
        started = self._result(row, _NO_TASK)
        try:
            task = _load_task(task_path)
            started = self._result(row, task)
            fw.task_started.send(type(self), task_result=started)
            with self._savepoint_in_atomic():
                if task.takes_context:
                    value = task.call(fw.TaskContext(task_result=started), *args, **kwargs)
                else:
                    value = task.call(*args, **kwargs)
                value = _json_return(value)
        except KeyboardInterrupt:
            raise
        except RetryIn as exc:
            if job.attempts >= job.max_attempts:
                self._finish(job, started, "FAILED", error=_task_error(exc), failure=exc)
                raise TaskFailed from exc
            self._retry(job, _task_error(exc))
            raise
        # Django's backends record any exception, SystemExit included, as the task's failure.
        except BaseException as exc:
            self._finish(job, started, "FAILED", error=_task_error(exc), failure=exc)
            raise TaskFailed from exc
        else:
            self._finish(job, started, "SUCCESSFUL", return_value=value)

    def _savepoint_in_atomic(self) -> AbstractContextManager[Any]:
        """Where the task runs inside ``atomic()`` (test mode: ``run_jobs`` in a
        ``TestCase``, an eager enqueue), a savepoint: a database error of the task rolls
        back its own writes, as test mode rolls back a failing pgenough task's, and leaves
        the transaction usable to record its FAILED outcome. On a worker (autocommit), none."""
        from django.db import connections, transaction

        if connections[self.database].in_atomic_block:
            savepoint: AbstractContextManager[Any] = transaction.atomic(using=self.database)
            return savepoint
        return nullcontext()

    def _finish(
        self,
        job: Job,
        started: Any,
        status: results.Outcome,
        *,
        return_value: Any = None,
        error: dict[str, str] | None = None,
        failure: BaseException | None = None,
    ) -> None:
        """Write the result's outcome and finish the job with it, in one transaction: the
        job completed, or with ``failure`` dead with its error and traceback (``LeaseLost``
        when the claim is gone: both rolled back)."""
        from django.db import connections, transaction

        wrapper = connections[self.database]
        if wrapper.connection is not None and wrapper.errors_occurred and not wrapper.is_usable():
            # The task broke this thread's connection (the server restarted under it, say):
            # its failure is still recorded, on a new one, rather than retried.
            wrapper.close()
        conn = self._connection()
        with transaction.atomic(using=self.database):
            results.finish(conn, job.id, status, return_value=return_value, error=error)
            # With the outcome, exactly once (LeaseLost: rolled back).
            if failure is None:
                complete(conn, job)
            else:
                fail(conn, job, failure)
        if started.task is not _NO_TASK:
            finished = self.get_result(started.id)
            fw.task_finished.send(type(self), task_result=finished)

    def _retry(self, job: Job, error: dict[str, str]) -> None:
        results.requeue(self._connection(), job.id, error)

    def prune(self) -> int:
        """Delete this backend's results finished longer than ``result_retention`` ago."""
        if self.result_retention is None:
            return 0
        return results.prune(self._connection(), self.alias, self.result_retention)

    # -- helpers -----------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        from django.core.exceptions import ImproperlyConfigured

        try:
            return django_connection(self.database)
        except TypeError as exc:  # not PostgreSQL, or not on psycopg 3
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: {exc}") from exc

    def _result(self, row: results.ResultRow, task: Any = None) -> Any:
        if task is None:
            task = _load_task(row.task_path).using(
                priority=row.priority,
                queue_name=row.queue,
                run_after=row.run_after,
                backend=row.backend,
            )
        result = fw.TaskResult(
            task=task,
            id=str(row.id),
            status=fw.TaskResultStatus(row.status),
            enqueued_at=row.enqueued_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            last_attempted_at=row.last_attempted_at,
            args=row.args,
            kwargs=row.kwargs,
            backend=row.backend,
            errors=[
                fw.TaskError(
                    exception_class_path=e["exception_class_path"], traceback=e["traceback"]
                )
                for e in row.errors
            ],
            worker_ids=list(row.worker_ids),
        )
        if row.status == "SUCCESSFUL":
            object.__setattr__(result, "_return_value", row.return_value)  # Django's way
        return result


_NO_TASK: Any = object()
"""The task of a result whose task could not be loaded (its failure says why)."""


@app.task(name=KIND, pass_context=True)
def run_django_task(
    ctx: JobContext, task: str, args: list[Any], kwargs: dict[str, Any], backend: str
) -> None:
    """The pgenough task of every Django task: runs ``task`` (its module path) with
    ``args`` and ``kwargs`` through the ``TASKS`` alias ``backend``, in a worker thread."""
    from django.core.exceptions import ImproperlyConfigured

    if fw.PACKAGE is None:
        raise GiveUp(fw.INSTALL_HINT)
    try:
        owner = fw.task_backends[backend]
    except ImproperlyConfigured as exc:  # Django's InvalidTaskBackend: no such alias now
        raise GiveUp(f"TASKS[{backend!r}]: {exc}") from exc
    if not isinstance(owner, PgenoughBackend):
        raise GiveUp(f"TASKS[{backend!r}] is {type(owner).__name__}, not {BACKEND_PATH}")
    _close_old_connections()
    try:
        owner.run_attempt(ctx.job, task, args, kwargs)
    finally:
        _close_old_connections()


@app.periodic(every=PRUNE_INTERVAL)
@app.task(name=PRUNE_KIND)
def prune_results() -> int:
    """Delete every pgenough backend's finished results past its ``RESULT_RETENTION``."""
    if fw.PACKAGE is None:
        return 0
    _close_old_connections()
    try:
        return sum(backend.prune() for backend in _our_backends())
    finally:
        _close_old_connections()


def _close_old_connections() -> None:
    """As Django does around each request, in this (worker) thread: its connections past
    ``CONN_MAX_AGE``, or broken, are closed. Except one inside ``atomic()`` (a task run in
    a test's transaction), which Django's own ``close_old_connections`` would close too."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def configured_queues() -> list[str]:
    """The queues of every ``TASKS`` alias whose backend is ``PgenoughBackend`` (a
    backend without ``QUEUES``, or with an empty list, serves ``["default"]``, Django's
    default): what ``manage.py pgenough worker`` serves unless told otherwise."""
    from django.conf import settings

    queues: set[str] = set()
    for params in (getattr(settings, "TASKS", None) or {}).values():
        if _is_ours(params.get("BACKEND")):
            queues.update(params.get("QUEUES") or [DEFAULT_QUEUE_NAME])
    return sorted(queues)


def _our_backends() -> list[PgenoughBackend]:
    from django.conf import settings

    tasks: Mapping[str, Mapping[str, Any]] = getattr(settings, "TASKS", None) or {}
    return [
        fw.task_backends[alias]
        for alias, params in tasks.items()
        if _is_ours(params.get("BACKEND"))
    ]


def _is_ours(path: object) -> bool:
    from django.utils.module_loading import import_string

    if path == BACKEND_PATH:
        return True
    if not isinstance(path, str):
        return False
    try:
        cls = import_string(path)
    except ImportError:
        return False
    return isinstance(cls, type) and issubclass(cls, PgenoughBackend)


def _load_task(path: str) -> Any:
    """The Django ``Task`` at ``path`` (its ``module_path``)."""
    from django.utils.module_loading import import_string

    found = import_string(path)
    if not isinstance(found, fw.Task):
        raise fw.InvalidTask(f"{path!r} is a {type(found).__name__}, not a Django task")
    return found


def _json_arguments(
    task: Any, args: Sequence[Any], kwargs: Mapping[str, Any], alias: str
) -> tuple[list[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` as Django's ``TaskResult`` keeps them (its JSON rule) and as
    the job's payload can carry them exactly (pgenough's); ``TaskArgumentsError``, a
    ``TypeError`` as Django's own refusal is, when either refuses them."""
    try:
        json_args: list[Any] = fw.normalize_json(list(args))
        json_kwargs: dict[str, Any] = fw.normalize_json(dict(kwargs))
        run_django_task.payload(
            task=task.module_path, args=json_args, kwargs=json_kwargs, backend=alias
        )
    except (TypeError, ValueError) as exc:
        raise TaskArgumentsError(
            f"Django task {task.module_path!r}: its arguments must be JSON: {exc}"
        ) from None
    return json_args, json_kwargs


def _json_return(value: Any) -> Any:
    """``value`` as the result can store it: Django's JSON rule, then jsonb's (no NaN or
    infinities, no NUL character); ``TypeError``/``ValueError`` otherwise (the result then
    fails with it, as on Django's own backends)."""
    normalized = fw.normalize_json(value)
    text = json.dumps(normalized, allow_nan=False)  # ValueError on NaN and infinities
    if "\\u0000" in text:
        raise ValueError("the return value contains a NUL character, which jsonb refuses")
    return normalized


def _task_error(exc: BaseException) -> dict[str, str]:
    kind = type(exc)
    return {
        "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
        "traceback": "".join(traceback.format_exception(exc)),
    }


def _job_id(result_id: object) -> int | None:
    try:
        job_id = int(str(result_id))
    except ValueError:
        return None
    return job_id if 0 < job_id < 2**63 else None


def _aware(when: datetime | None) -> datetime | None:
    """``run_after`` as pgenough's ``run_at`` (aware): a naive one, which Django allows
    with ``USE_TZ = False``, is read in Django's current time zone."""
    if when is None or when.utcoffset() is not None:
        return when
    from django.utils import timezone

    aware: datetime = timezone.make_aware(when)
    return aware


def _seconds(value: object, alias: str) -> float | None:
    from django.core.exceptions import ImproperlyConfigured

    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}]['OPTIONS']['RESULT_RETENTION'] must be a timedelta, a number"
            f" of seconds >= 0, or None (keep them), not {value!r}"
        )
    return float(seconds)
