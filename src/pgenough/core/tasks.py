"""Tasks: named, typed units of work, enqueued in the caller's transaction and run by workers.

::

    app = App()

    @app.task(queue="emails", max_attempts=5, timeout=30)
    async def send_confirmation(order_id: int, to: str) -> None: ...

    async with conn.transaction():                        # the caller's transaction
        await insert_order(conn, order)
        await send_confirmation.enqueue(conn, order.id, to=order.email)

    # elsewhere: pgenough worker run myapp.tasks:app

A batch task runs many jobs in one transaction, completing them in it (exactly once, one commit
per batch)::

    @dataclass
    class View:
        page_id: int
        user_id: int

    @app.batch_task(View, queue="views")
    async def record_views(conn: psycopg.AsyncConnection[Any], views: list[View]) -> None:
        await conn.execute(...)                           # one statement for the batch

    await record_views.enqueue(conn, page_id=1, user_id=2)  # checked against View's fields

A job's payload is the task's arguments *by name*, a JSON object (``{"order_id": 7, "to":
"..."}``): readable in ``pgenough job ID``, and still valid when a deploy adds a parameter with
a default. So a task may not take positional-only parameters or ``*args``. Arguments are
checked when enqueued: ones the signature does not accept, or values JSON cannot carry
exactly, raise ``TaskArgumentsError`` at the call, so no job is ever stored that can only
fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import difflib
import functools
import importlib
import inspect
import logging
import math
import os
import sys
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import (
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    TypeAlias,
    TypeVar,
    cast,
    overload,
)

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core.cancellation import is_cancelled, raise_if_cancelled
from pgenough.core.errors import GiveUp, PgenoughError, TaskTimeout
from pgenough.core.migrations import MigrationSet
from pgenough.core.periodic import Periodic, PeriodicTask
from pgenough.core.queue import (
    DEFAULT_JOB_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    EnqueueOptions,
    Job,
    NewJob,
    complete,
    enqueue_job,
    enqueue_many,
)
from pgenough.core.retry import Backoff
from pgenough.core.schedule import DEFAULT_GRACE, Cron, Interval, Missed, Schedule
from pgenough.core.statements import AnyConnection, run
from pgenough.core.worker import AnyHandler, BatchHandler, ThreadHandler, Worker, WorkerConfig

log = logging.getLogger(__name__)

TaskFn: TypeAlias = Callable[..., Any]
"""An ``async def`` (run on the worker's event loop) or a plain ``def`` (run in one of the
worker's threads, ``concurrency`` of them per queue)."""

P = ParamSpec("P")
"""A task's parameters: ``enqueue`` and ``job`` take the same, so mypy checks the calls."""
T = TypeVar("T")
"""What a batch task's function gets per job: its ``args_type`` built from the payload."""

BatchTaskFn: TypeAlias = Callable[[psycopg.AsyncConnection[Any], list[T]], Awaitable[None]]
"""A batch task's ``async def fn(conn, items)``, run in the transaction completing its jobs."""


class TaskArgumentsError(PgenoughError, TypeError):
    """A task was enqueued with arguments its signature does not accept, or that JSON
    cannot carry exactly."""


class AppNotFound(PgenoughError):
    """``module:attribute`` does not name an importable ``App``."""


@dataclass(frozen=True)
class TaskContext:
    """What a task declared with ``pass_context=True`` receives first: its job (id,
    attempts...) and the worker's pool, e.g. to complete the job in the transaction holding
    the task's own writes (``complete(conn, ctx.job)``: exactly-once effects).

    In test mode (``pgenough.core.testing``) ``pool`` is a stand-in whose ``connection()``
    lends the caller's own async connection, in a savepoint of the caller's transaction: the
    rows a test has not committed are visible to the task, and its writes stay in that
    transaction. It has no other method of a pool."""

    job: Job
    """The job being run (``Job``'s fields: docs/reference.md)."""
    pool: AsyncConnectionPool
    """Where the task gets a connection: the worker's pool (test mode: see above)."""
    test_mode: bool = False
    """True when test mode runs the job (``run_jobs``, an eager enqueue), on the caller's
    connection; False on a worker. (As Celery's ``task.request.is_eager``.)"""

    @property
    def cancelled(self) -> bool:
        """An operator cancelled the job while it runs (``cancellation.py``): stop, the job is
        already ``cancelled`` and nothing of it will commit. An async task is cancelled at
        its next await anyway; a plain function should look now and then."""
        return is_cancelled(self.job.id)

    def raise_if_cancelled(self) -> None:
        """Raise ``JobCancelled`` if ``cancelled``: the worker records nothing more of the
        job (it is never retried)."""
        raise_if_cancelled(self.job.id)


class _CallerPool:
    """Test mode's ``TaskContext.pool``: ``connection()`` as a pool's (a commit of what ran
    in it when the block ends, a rollback when it raises), on the caller's connection, so
    in a savepoint of the caller's transaction."""

    def __init__(self, conn: AnyConnection) -> None:
        self._conn = conn

    @contextlib.asynccontextmanager
    async def connection(
        self, timeout: float | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = self._conn
        if not isinstance(conn, psycopg.AsyncConnection):
            raise TypeError(
                "test mode on a sync connection: a pass_context task's ctx.pool.connection()"
                " has no async connection to lend (run_jobs or enqueue on a"
                " psycopg.AsyncConnection instead)"
            )
        async with conn.transaction():
            yield conn


def _context_for(job: Job, conn: AnyConnection) -> TaskContext:
    return TaskContext(job, cast("AsyncConnectionPool", _CallerPool(conn)), test_mode=True)


class Task(Generic[P]):
    """A registered task. Enqueue with ``enqueue``/``enqueue_many`` (or build ``NewJob`` rows
    with ``job``); call it directly to run it in-process, as a plain function."""

    def __init__(
        self,
        fn: TaskFn,
        *,
        name: str,
        options: EnqueueOptions,
        backoff: Backoff | None,
        timeout: float | None,
        pass_context: bool,
    ) -> None:
        if not name:
            raise ValueError("a task needs a name")
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"task {name!r}: timeout must be a positive number of seconds")
        if options.max_attempts < 1:
            raise ValueError(f"task {name!r}: max_attempts must be >= 1")
        self.fn = fn
        self.name = name
        self.options = options
        self.backoff = backoff
        """Its retry policy (None: the worker's ``WorkerConfig.backoff``)."""
        self.timeout = timeout
        self.pass_context = pass_context
        self._signature = _arguments_signature(fn, name, pass_context)
        self._is_async = inspect.iscoroutinefunction(fn)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self.app: App | None = None
        """The ``App`` it is registered on (its ``eager`` setting applies)."""

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.options.queue}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def queue(self) -> str:
        return self.options.queue

    # -- enqueueing --------------------------------------------------------------------------

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        delay: timedelta | float | None = None,
        run_at: datetime | None = None,
        dedupe_key: str | None = None,
    ) -> Task[P]:
        """This task with other enqueue options for the next calls: ``delay`` (seconds or a
        timedelta from the database's now) or ``run_at`` (an aware datetime), a
        ``dedupe_key`` (no second job while one with this key is ready or running)..."""
        if delay is not None and run_at is not None:
            raise ValueError("give a delay or a run_at time, not both")
        when: datetime | timedelta | None = self.options.run_at
        if delay is not None:
            when = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)
            if not math.isfinite(when.total_seconds()) or when < timedelta(0):
                raise ValueError("delay must be a finite, non-negative duration")
        if run_at is not None:
            if run_at.tzinfo is None or run_at.utcoffset() is None:
                # A naive time would be read in the database session's TimeZone: a guess.
                raise ValueError("run_at must be an aware datetime (with a tzinfo)")
            when = run_at
        changes: dict[str, Any] = {"run_at": when}
        for key, value in (
            ("queue", queue),
            ("priority", priority),
            ("max_attempts", max_attempts),
            ("dedupe_key", dedupe_key),
        ):
            if value is not None:
                changes[key] = value
        # A copy sharing the checked signature: using() sits on enqueue paths.
        clone = copy.copy(self)
        clone.options = replace(self.options, **changes)
        return clone

    def job(self, *args: P.args, **kwargs: P.kwargs) -> NewJob:
        """The job that ``enqueue`` would insert for these arguments (checked now)."""
        return self._job(args, kwargs)

    def _job(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> NewJob:
        return NewJob.with_options(self.name, self.payload(*args, **kwargs), self.options)

    def payload(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The arguments by name, as the job will carry them; ``TaskArgumentsError`` when
        the signature refuses them or JSON cannot carry them exactly."""
        unexpected = self._unexpected(kwargs)
        if unexpected:
            raise TaskArgumentsError(f"task {self.name!r}: {unexpected}")
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TaskArgumentsError(f"task {self.name!r}: {exc}") from None
        payload: dict[str, Any] = {}
        for param_name, value in bound.arguments.items():
            if self._signature.parameters[param_name].kind is inspect.Parameter.VAR_KEYWORD:
                payload.update(value)
            else:
                payload[param_name] = value
        for key, value in payload.items():
            problem = _json_problem(value)
            if problem is not None:
                raise TaskArgumentsError(
                    f"task {self.name!r}: argument {key!r} cannot be stored as JSON: {problem}"
                )
        return payload

    def _unexpected(self, kwargs: Mapping[str, Any]) -> str | None:
        """What is wrong with a keyword the signature has no parameter for, with the close
        match it was probably meant to be: named first, because ``bind`` would report the
        missing required parameter instead and never the misspelled one."""
        params = self._signature.parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return None
        for key in kwargs:
            if key not in params:
                left = [name for name in params if name not in kwargs]
                close = difflib.get_close_matches(key, left, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                known = ", ".join(params) or "none"
                return f"unexpected keyword argument {key!r}{hint}; its parameters: {known}"
        return None

    @overload
    def enqueue(
        self, conn: psycopg.AsyncConnection[Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, int | None]: ...

    @overload
    def enqueue(
        self, conn: psycopg.Connection[Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> int | None: ...

    def enqueue(self, conn: AnyConnection, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Enqueue one job in the transaction open on ``conn`` (sync: runs now; async:
        await it): its id, or None when its ``dedupe_key`` is taken by a job still ready or
        running. The arguments are checked at the call, before any statement."""
        job = self.job(*args, **kwargs)
        if self.app is not None and self.app.eager:
            from pgenough.core.testing import enqueue_eagerly  # it imports this module

            return run(
                conn,
                enqueue_eagerly(self.app, [job]),
                what=f"{self._call_name}.enqueue(...)",
                unless_awaited="no job was enqueued nor run (eager mode)",
            )
        return run(
            conn,
            enqueue_job(job),
            what=f"{self._call_name}.enqueue(...)",
            unless_awaited="no job was enqueued",
        )

    @overload
    def enqueue_many(
        self, conn: psycopg.AsyncConnection[Any], calls: Iterable[Mapping[str, Any] | NewJob]
    ) -> Coroutine[Any, Any, int]: ...

    @overload
    def enqueue_many(
        self, conn: psycopg.Connection[Any], calls: Iterable[Mapping[str, Any] | NewJob]
    ) -> int: ...

    def enqueue_many(self, conn: AnyConnection, calls: Iterable[Mapping[str, Any] | NewJob]) -> Any:
        """Enqueue one job per call, with COPY, in the transaction open on ``conn``; return
        how many were inserted. A call is a mapping of keyword arguments, or a ``NewJob``
        from ``task.using(...).job(...)`` for per-job options. Every call is checked before
        anything is inserted."""
        jobs: list[NewJob] = []
        for call in calls:
            if isinstance(call, NewJob):
                if call.kind != self.name:
                    raise TaskArgumentsError(
                        f"task {self.name!r}: enqueue_many was given a job of {call.kind!r}"
                    )
                jobs.append(call)
            elif isinstance(call, Mapping):
                jobs.append(self._job((), call))
            else:
                raise TaskArgumentsError(
                    f"task {self.name!r}: enqueue_many takes mappings of keyword arguments"
                    f" or NewJob rows, not {type(call).__name__}"
                )
        if self.app is not None and self.app.eager:
            from pgenough.core.testing import enqueue_eagerly  # it imports this module

            return run(
                conn,
                enqueue_eagerly(self.app, jobs, count=True),
                what=f"{self._call_name}.enqueue_many(...)",
                unless_awaited="no job was enqueued nor run (eager mode)",
            )
        return run(
            conn,
            enqueue_many.steps(jobs),
            what=f"{self._call_name}.enqueue_many(...)",
            unless_awaited="no job was enqueued",
        )

    @property
    def _call_name(self) -> str:
        """How the caller's code names this task: its function's name."""
        return getattr(self.fn, "__name__", None) or self.name

    # -- running -----------------------------------------------------------------------------

    def handler(self, pool: AsyncConnectionPool) -> AnyHandler:
        """The worker's handler for this task's jobs. A plain function's is a
        ``ThreadHandler``: the worker runs it in its queue's threads and times it."""
        if self._is_async:
            return _TaskHandler(self, pool)
        return ThreadHandler(
            functools.partial(self._call_blocking, pool=pool),
            timeout=self.timeout,
            backoff=self.backoff,
        )

    def _call_blocking(self, job: Job, *, pool: AsyncConnectionPool) -> None:
        """A plain function's job, in the worker's thread."""
        payload = self._stored_arguments(job)
        args: tuple[Any, ...] = (TaskContext(job, pool),) if self.pass_context else ()
        self.fn(*args, **payload)

    async def run_job(self, job: Job, pool: AsyncConnectionPool) -> None:
        payload = self._stored_arguments(job)
        args: tuple[Any, ...] = (TaskContext(job, pool),) if self.pass_context else ()
        if self._is_async:
            call: Awaitable[Any] = self.fn(*args, **payload)
        else:
            # Outside a worker (which runs it as a ThreadHandler): a thread, so a blocking
            # function does not stall the event loop; the timeout cannot interrupt it.
            call = asyncio.to_thread(self.fn, *args, **payload)
        await self._bounded(call)

    def run_in_process(self, job: Job, conn: AnyConnection) -> Any:
        """Test mode: run the claimed ``job`` now, inside the savepoint open on the caller's
        ``conn``: a plain function's value, or an async one's coroutine (within the task's
        timeout). Its arguments are checked as a worker's are (``GiveUp`` if they do not
        fit)."""
        payload = self._stored_arguments(job)
        args: tuple[Any, ...] = (_context_for(job, conn),) if self.pass_context else ()
        if self._is_async:
            return self._bounded(self.fn(*args, **payload))
        return self.fn(*args, **payload)

    def _stored_arguments(self, job: Job) -> dict[str, Any]:
        """The job's payload, once it is known to fit the signature; ``GiveUp`` if not."""
        payload = job.payload
        if not isinstance(payload, dict):
            raise GiveUp(f"task {self.name!r}: payload is {type(payload).__name__}, not an object")
        try:
            self._signature.bind(**payload)
        except TypeError as exc:
            # The signature changed under queued jobs (or the job was written by hand):
            # retrying cannot help.
            raise GiveUp(f"task {self.name!r}: stored arguments do not fit: {exc}") from None
        return payload

    async def _bounded(self, call: Awaitable[Any]) -> None:
        """Await ``call`` within the task's ``timeout`` (``TaskTimeout`` past it)."""
        if self.timeout is None:
            await call
            return
        try:
            async with asyncio.timeout(self.timeout):
                await call
        except TimeoutError as exc:
            # Chained: the cancellation's frames end on the line the task was waiting on,
            # which is what its recorded traceback should show.
            raise TaskTimeout(
                f"task {self.name!r} ran past its timeout of {self.timeout:g}s"
            ) from exc


class BatchTask(Task[P], Generic[P, T]):
    """A task whose jobs run many at a time: ``fn(conn, items)`` in one transaction, which
    the worker also completes the jobs in (batch-transactional, see ``BatchHandler``).

    It is enqueued like any task, with the arguments of ``args_type``'s constructor (by
    name, checked at the call); each job's item is ``args_type(**payload)``. A job whose
    stored arguments no longer fit is dead-lettered alone. ``timeout`` bounds each call of
    ``fn``; a batch that raises (or times out) is bisected until the job at fault fails
    alone, so keep ``fn``'s effects to writes on ``conn``, which roll back.
    """

    def __init__(
        self,
        fn: BatchTaskFn[T],
        args_type: Callable[P, T],
        *,
        name: str,
        options: EnqueueOptions,
        backoff: Backoff | None,
        timeout: float | None,
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"batch task {name!r}: {fn!r} must be an async def: it runs on the"
                " worker's event loop, inside the transaction that completes its jobs"
            )
        super().__init__(
            fn, name=name, options=options, backoff=backoff, timeout=timeout, pass_context=False
        )
        self.args_type: Callable[..., T] = args_type
        """What each job's payload is built into (its constructor's parameters are P)."""
        # Jobs carry args_type's arguments, not fn's (conn, items): check against those.
        self._signature = _arguments_signature(args_type, name, False)

    def __repr__(self) -> str:
        return f"<BatchTask {self.name} queue={self.options.queue}>"

    def handler(self, pool: AsyncConnectionPool) -> BatchHandler:
        return BatchHandler(self._run_batch, backoff=self.backoff, check=self.item)

    def item(self, job: Job) -> T:
        """The job's arguments as ``args_type``; ``GiveUp`` when they do not fit."""
        payload = self._stored_arguments(job)
        try:
            return self.args_type(**payload)
        except (TypeError, ValueError) as exc:  # its own validation refused them
            raise GiveUp(
                f"task {self.name!r}: stored arguments do not fit {_type_name(self.args_type)}:"
                f" {exc}"
            ) from None

    async def run_job(self, job: Job, pool: AsyncConnectionPool) -> None:
        """One job as a batch of one, completed in its transaction (a worker batches them)."""
        async with pool.connection() as conn, conn.transaction():
            await self._run_batch(conn, [job])
            await complete(conn, job)

    def run_in_process(self, job: Job, conn: AnyConnection) -> Any:
        """Test mode: ``fn(conn, [item])`` on the caller's connection, which must be async."""
        item = self.item(job)
        if not isinstance(conn, psycopg.AsyncConnection):
            raise TypeError(
                f"batch task {self.name!r} runs on an async connection: run its jobs with"
                " run_jobs (or enqueue them eagerly) on a psycopg.AsyncConnection"
            )
        return self._bounded(self.fn(conn, [item]))

    async def _run_batch(self, conn: psycopg.AsyncConnection[Any], jobs: Sequence[Job]) -> None:
        await self._bounded(self.fn(conn, [self.item(job) for job in jobs]))


def _type_name(args_type: Callable[..., Any]) -> str:
    return getattr(args_type, "__qualname__", None) or repr(args_type)


class _TaskHandler:
    """A task bound to a pool: the callable the worker runs, carrying the task's policy."""

    def __init__(self, task: Task[...], pool: AsyncConnectionPool) -> None:
        self.task = task
        self.pool = pool
        self.backoff = task.backoff

    async def __call__(self, job: Job) -> None:
        await self.task.run_job(job, self.pool)


@dataclass(frozen=True)
class TaskSchedule:
    """A task enqueued on a schedule. ``periodic`` is checked when declared; its function
    is a placeholder until a worker binds it to its pool."""

    task: Task[...]
    periodic: PeriodicTask


class App:
    """A registry of tasks: what ``pgenough worker run module:app`` loads and runs.

    ``queues`` sets the concurrency of named queues (others get the worker's default);
    ``migrations`` are applied, after the core's, when a worker starts. ``eager`` (None:
    ``PGENOUGH_EAGER`` read now, ``1``/``true``/``yes``/``on``) makes every enqueue of its
    tasks also run the job at once, in the caller's thread and transaction, as
    ``pgenough.core.testing.run_jobs`` would (docs/guides/testing.md).
    """

    def __init__(
        self,
        *,
        queues: Mapping[str, int] | None = None,
        migrations: Sequence[MigrationSet] = (),
        eager: bool | None = None,
    ) -> None:
        self.tasks: dict[str, Task[...]] = {}
        self.schedules: list[TaskSchedule] = []
        self.concurrency: dict[str, int] = dict(queues or {})
        self.migrations = list(migrations)
        self.eager = eager_from_environment() if eager is None else eager
        """Run each job as it is enqueued (tests); may be set at any time."""

    @overload
    def task(self, fn: Callable[P, Any], /) -> Task[P]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_JOB_MAX_ATTEMPTS,
        retry: Backoff | None = None,
        priority: int = 0,
        timeout: float | None = None,
        pass_context: Literal[False] = False,
    ) -> Callable[[Callable[P, Any]], Task[P]]: ...

    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_JOB_MAX_ATTEMPTS,
        retry: Backoff | None = None,
        priority: int = 0,
        timeout: float | None = None,
        pass_context: Literal[True],
    ) -> Callable[[Callable[Concatenate[TaskContext, P], Any]], Task[P]]: ...

    def task(
        self,
        fn: TaskFn | None = None,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_JOB_MAX_ATTEMPTS,
        retry: Backoff | None = None,
        priority: int = 0,
        timeout: float | None = None,
        pass_context: bool = False,
    ) -> Any:
        """Register a task (``@app.task`` or ``@app.task(queue=..., ...)``). Its name, by
        default ``module.function``, is the jobs' ``kind``: renaming it strands queued jobs."""

        def register(f: TaskFn) -> Task[...]:
            task: Task[...] = Task(
                f,
                name=name or f"{_module_name(f)}.{f.__qualname__}",
                options=EnqueueOptions(queue=queue, priority=priority, max_attempts=max_attempts),
                backoff=retry,
                timeout=timeout,
                pass_context=pass_context,
            )
            return self._add(task)

        return register(fn) if fn is not None else register

    def batch_task(
        self,
        args_type: Callable[P, T],
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_JOB_MAX_ATTEMPTS,
        retry: Backoff | None = None,
        priority: int = 0,
        timeout: float | None = None,
    ) -> Callable[[BatchTaskFn[T]], BatchTask[P, T]]:
        """Register a batch task: ``@app.batch_task(Args, ...)`` above ``async def fn(conn,
        items: list[Args])``. Its jobs are enqueued with ``Args``'s constructor arguments;
        a worker hands ``fn`` up to ``batch_size`` of them at once, as ``Args`` objects, in
        one transaction that completes them too. Options as for ``task``; ``timeout``
        bounds each call of ``fn``."""

        def register(f: BatchTaskFn[T]) -> BatchTask[P, T]:
            task = BatchTask(
                f,
                args_type,
                name=name or f"{_module_name(f)}.{f.__qualname__}",
                options=EnqueueOptions(queue=queue, priority=priority, max_attempts=max_attempts),
                backoff=retry,
                timeout=timeout,
            )
            self._add(task)
            return task

        return register

    def _add(self, task: Task[P]) -> Task[P]:
        if task.name in self.tasks:
            raise ValueError(f"task {task.name!r} is already registered")
        self.tasks[task.name] = task
        task.app = self
        return task

    def periodic(
        self,
        *,
        every: float | None = None,
        cron: str | None = None,
        timezone: str = "UTC",
        missed: Missed = "once",
        grace: float = DEFAULT_GRACE,
    ) -> Callable[[Task[P]], Task[P]]:
        """Enqueue a task (one taking no required arguments) on a schedule: ``every``
        seconds, or at each tick of a ``cron`` expression in ``timezone`` (``missed`` and
        ``grace`` as for ``Periodic.cron``). Each period or tick is claimed by one worker
        process across all replicas (database clock), which enqueues one job; while that job
        is still ready or running, the next tick adds none."""
        if (every is None) == (cron is None):
            raise ValueError("give a schedule: every=SECONDS or cron=EXPRESSION (one of them)")

        def register(task: Task[P]) -> Task[P]:
            if not isinstance(task, Task):
                raise TypeError("@app.periodic goes above @app.task")
            task.payload()  # its required arguments would have no value: refuse now
            when: Schedule = Interval(every) if every is not None else Cron(cron or "", timezone)
            # Built now, so a bad period, expression, zone or policy fails at import.
            schedule = TaskSchedule(
                task,
                PeriodicTask(f"schedule:{task.name}", when, _unbound, missed, grace),
            )
            self.schedules.append(schedule)
            return task

        return register

    @property
    def queues(self) -> list[str]:
        """Every queue a task of this app is enqueued to by default."""
        return sorted({t.queue for t in self.tasks.values()})

    def handlers(self, pool: AsyncConnectionPool) -> dict[str, AnyHandler]:
        return {name: task.handler(pool) for name, task in self.tasks.items()}

    def run_in_process(self, task: Task[...], job: Job, conn: AnyConnection) -> Any:
        """Test mode's run of one of its jobs (``run_jobs``, an eager enqueue), in the
        savepoint open on the caller's ``conn``: ``task.run_in_process``. What ``handlers``
        is to a worker: a framework's app may wrap it."""
        return task.run_in_process(job, conn)

    def worker(
        self,
        pool: AsyncConnectionPool,
        *,
        queues: Sequence[str] | Mapping[str, int | None] | None = None,
        concurrency: int | None = None,
        name: str | None = None,
        config: WorkerConfig | None = None,
        listen_url: str | None = None,
    ) -> Worker:
        """A worker for this app's tasks in this process: one executor per queue (all the
        app's queues by default), one listener and one set of duties, the schedules
        included. Concurrency per queue: ``queues`` as a mapping, else ``App(queues=...)``,
        else ``concurrency``, else ``config``'s. ``listen_url``: the listener's direct
        connection when ``pool`` goes through a transaction pooler (``Worker``)."""
        base = config or WorkerConfig()
        chosen: Mapping[str, int | None]
        if queues is None:
            chosen = dict.fromkeys(self.queues or [base.queue])
        elif isinstance(queues, Mapping):
            chosen = dict(queues)
        else:
            chosen = dict.fromkeys(queues)
        configs = []
        for queue, explicit in chosen.items():
            n = explicit or self.concurrency.get(queue) or concurrency or base.concurrency
            configs.append(replace(base, queue=queue, concurrency=n))
        worker = Worker(pool, self.handlers(pool), *configs, name=name, listen_url=listen_url)
        for schedule in self.schedules:
            _register_schedule(worker.periodic, schedule, pool)
        return worker


EAGER_VARIABLE = "PGENOUGH_EAGER"


def eager_from_environment() -> bool:
    """``PGENOUGH_EAGER``, the one place it is read (an ``App`` created without ``eager``)."""
    value = os.environ.get(EAGER_VARIABLE, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{EAGER_VARIABLE}={value!r}: give 1 or 0 (true/false, yes/no, on/off)")


def _register_schedule(
    periodic: Periodic, schedule: TaskSchedule, pool: AsyncConnectionPool
) -> None:
    task = schedule.task.using(dedupe_key=f"schedule:{schedule.task.name}")

    async def tick() -> None:
        async with pool.connection() as conn, conn.transaction():
            job_id = await task.enqueue(conn)
        if job_id is None:
            log.info("schedule %s: the previous job is still queued; none added", task.name)

    periodic.add(replace(schedule.periodic, fn=tick))


async def _unbound() -> None:
    raise AssertionError("a schedule runs only once a worker has bound it")


def _module_name(fn: TaskFn) -> str:
    """The module a task's default name starts with: in a script run as ``python shop.py``
    (or ``-m shop``) that is ``shop``, as ``pgenough worker run shop:app`` imports it, not
    ``__main__``, or the jobs it enqueued would find no handler there."""
    module = getattr(fn, "__module__", None) or "__main__"
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return str(spec.name)
    path = getattr(main, "__file__", None)
    return Path(path).stem if path else module


def load_app(spec: str) -> App:
    """The ``App`` that ``module:attribute`` names (``module`` alone: its ``app``), imported
    as ``python -m`` would, from the current directory first."""
    module_name, _, attribute = spec.partition(":")
    attribute = attribute or "app"
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        raise AppNotFound(f"{spec!r} is not MODULE:ATTRIBUTE (e.g. myapp.tasks:app)")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise AppNotFound(
                f"cannot import {module_name!r}: no module named {exc.name!r}"
            ) from exc
        raise AppNotFound(f"importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:  # the user's module raised while importing
        raise AppNotFound(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
    try:
        app = getattr(module, attribute)
    except AttributeError:
        raise AppNotFound(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(app, App):
        raise AppNotFound(
            f"{module_name}:{attribute} is a {type(app).__name__}, not a pgenough App"
        )
    return app


def _arguments_signature(fn: TaskFn, name: str, pass_context: bool) -> inspect.Signature:
    """The signature a job's arguments are checked against (the context parameter left out)."""
    if not callable(fn):
        raise TypeError(f"task {name!r}: {fn!r} is not callable")
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    if pass_context:
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise TypeError(f"task {name!r}: pass_context needs a first parameter for it")
        params = params[1:]
    for p in params:
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"task {name!r}: parameter {p.name!r} is positional-only;"
                " jobs carry arguments by name"
            )
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(
                f"task {name!r}: *{p.name} is not allowed; jobs carry arguments by name"
            )
    return signature.replace(parameters=params)


def _json_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` would not come back from a jsonb column as it went in (None: it would).

    Tuples are allowed and arrive as lists. PostgreSQL's jsonb refuses NaN, infinities and
    the NUL character, and JSON object keys are strings only (``json`` would silently turn
    1 into "1").
    """
    if depth > 100:
        return "nested too deeply"
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a JSON number"
    if isinstance(value, str):
        return "it contains a NUL character" if "\x00" in value else None
    if isinstance(value, list | tuple):
        for item in value:
            problem = _json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r} is a {type(key).__name__}, and JSON keys are strings"
            if "\x00" in key:
                return "a key contains a NUL character"
            problem = _json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    return f"a {type(value).__name__} is not JSON (pass its id, or an ISO string, instead)"


__all__ = [
    "App",
    "AppNotFound",
    "BatchTask",
    "Task",
    "TaskArgumentsError",
    "TaskContext",
    "load_app",
]
