"""The core's producer-side calls, written once, run on a sync or an async psycopg connection.

Most applications enqueue from synchronous code (Django, Flask, SQLAlchemy sessions), many
from async code; both should get the same behaviour, not two implementations that drift. So
each call is written as *steps*: a generator that yields the statements to run (``Query``,
``Copy``, ``Atomic``) and receives their results, with no I/O of its own, as psycopg's own
protocol code is written. ``dual`` turns such a generator into a function taking the
connection first::

    @dual
    def retry_job(job_id: int) -> Steps[None]: ...

    retry_job(sync_conn, 7)          # runs now
    await retry_job(async_conn, 7)   # a coroutine

The connection is the caller's, with its transaction: nothing here commits or rolls back a
transaction the caller opened (see ``_needs_begin``). Cursors are created here with the core's own
JSON loaders, because an ORM configures its connections for itself (Django loads jsonb as
text).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import sys
import threading
import warnings
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Generic, LiteralString, ParamSpec, TypeAlias, TypeVar, overload

import psycopg
from psycopg.pq import Format, TransactionStatus
from psycopg.rows import BaseRowFactory, RowMaker, tuple_row
from psycopg.types.json import JsonbLoader, JsonLoader

from pgenough.core._sql import load
from pgenough.core.errors import SchemaMissing

_BEGIN = load("statements")["begin"]

P = ParamSpec("P")
T = TypeVar("T")

AnyConnection: TypeAlias = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]
"""What every producer-side call accepts: the caller's connection, sync or async."""
AsyncConn: TypeAlias = psycopg.AsyncConnection[Any]
"""What async-only code takes (the worker's side, the plan service)."""


@dataclass(frozen=True)
class Result:
    rows: list[Any]
    """Tuples, or records for a ``Query(..., record=cls)``; empty for a statement without
    rows."""
    rowcount: int


@dataclass(frozen=True)
class Query:
    sql: LiteralString
    params: Mapping[str, Any] | None = None
    record: type[Any] | None = None
    """A dataclass to read each row into, by column name (``record_rows``); None: tuples."""
    prepare: bool | None = None
    """psycopg's ``prepare``: None lets it prepare a repeated statement; ``PLAN_EACH_TIME``
    (``_sql.py``) for a statement that must never run on a cached generic plan."""


@dataclass(frozen=True)
class Copy:
    sql: LiteralString
    rows: Iterable[Sequence[Any]]


@dataclass(frozen=True)
class Atomic:
    """Run nested steps all-or-nothing, without ending the caller's transaction."""

    steps: Steps[Any]


@dataclass(frozen=True)
class Call:
    """Run ``fn(conn)`` between two statements, in whatever transaction or savepoint is
    open: answered with its value. A coroutine it returns is awaited on an async connection, and
    run to its end on a private event loop on a sync one (test mode runs tasks so)."""

    fn: Callable[[Any], Any]
    """Given the connection the steps run on."""


Step: TypeAlias = Query | Copy | Atomic | Call
Steps: TypeAlias = Generator[Step, Any, T]
"""Yields steps; each ``Query`` is answered with a ``Result``, each ``Atomic`` with its
steps' value, each ``Copy`` with None. (Not "plan": that is the plan service's domain.)"""


def not_a_connection(conn: object) -> TypeError:
    return TypeError(
        f"pgenough needs a psycopg connection (psycopg.Connection or AsyncConnection), not"
        f" {type(conn).__name__}; from an ORM, see pgenough.core.orm"
    )


class Dual(Generic[P, T]):
    """Steps as a function of the connection: runs at once on a sync connection, returns a
    coroutine on an async one (see the module docstring)."""

    def __init__(self, steps: Callable[P, Steps[T]]) -> None:
        self.steps = steps
        """The generator function itself, to ``yield from`` inside other steps."""
        functools.update_wrapper(self, steps)
        self._what = f"{steps.__name__}(...)"
        params = list(inspect.signature(steps).parameters.values())
        conn = inspect.Parameter(
            "conn", inspect.Parameter.POSITIONAL_ONLY, annotation="AnyConnection"
        )
        self.__signature__ = inspect.signature(steps).replace(parameters=[conn, *params])

    @overload
    def __call__(
        self, conn: psycopg.AsyncConnection[Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def __call__(
        self, conn: psycopg.Connection[Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...

    def __call__(self, conn: AnyConnection, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        return run(conn, self.steps(*args, **kwargs), what=self._what)


def dual(steps: Callable[P, Steps[T]]) -> Dual[P, T]:
    return Dual(steps)


@overload
def run(
    conn: psycopg.AsyncConnection[Any],
    steps: Steps[T],
    *,
    what: str = ...,
    unless_awaited: str = ...,
) -> Coroutine[Any, Any, T]: ...


@overload
def run(
    conn: psycopg.Connection[Any], steps: Steps[T], *, what: str = ..., unless_awaited: str = ...
) -> T: ...


def run(
    conn: AnyConnection,
    steps: Steps[T],
    *,
    what: str = "",
    unless_awaited: str = "none of its statements ran",
) -> T | Coroutine[Any, Any, T]:
    """Run ``steps`` on ``conn``: now when it is sync, as a coroutine when it is async.

    The coroutine, dropped without being awaited, warns with ``what`` (the caller's call,
    e.g. ``send_receipt.enqueue(...)``) and ``unless_awaited`` (what did not happen), at the
    line that made it: Python's own warning would name ``run_async`` and nothing else."""
    if isinstance(conn, psycopg.AsyncConnection):
        # The caller's frame: two up, through Dual.__call__ or Task.enqueue.
        caller = sys._getframe(2)
        return _MustAwait(
            run_async(conn, steps),
            what or "a pgenough call",
            unless_awaited,
            caller.f_code.co_filename,
            caller.f_lineno,
        )
    if isinstance(conn, psycopg.Connection):
        return run_sync(conn, steps)
    steps.close()
    raise not_a_connection(conn)


class _MustAwait(Coroutine[Any, Any, T]):
    """A coroutine that says, when it is dropped unawaited, what was not done, and where."""

    __slots__ = ("_coro", "_file", "_line", "_started", "_unless", "_what")

    def __init__(
        self, coro: Coroutine[Any, Any, T], what: str, unless: str, file: str, line: int
    ) -> None:
        self._coro = coro
        self._started = False
        self._what = what
        self._unless = unless
        self._file = file
        self._line = line

    def __await__(self) -> Generator[Any, None, T]:
        self._started = True
        return self._coro.__await__()

    def send(self, value: Any) -> Any:
        self._started = True
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        self._started = True
        return self._coro.throw(*args)

    def close(self) -> None:
        self._started = True
        self._coro.close()

    def __del__(self) -> None:
        if self._started:
            return
        self._coro.close()  # not started: closing it silences Python's own warning
        warnings.warn_explicit(
            f"{self._what} was never awaited: {self._unless}",
            RuntimeWarning,
            self._file,
            self._line,
            source=self,
        )


def run_sync(conn: psycopg.Connection[Any], steps: Steps[T]) -> T:
    try:
        return _run_sync(conn, steps)
    except _MISSING_OBJECT as exc:
        raise schema_missing(conn, exc) from exc


async def run_async(conn: psycopg.AsyncConnection[Any], steps: Steps[T]) -> T:
    try:
        return await _run_async(conn, steps)
    except _MISSING_OBJECT as exc:
        raise schema_missing(conn, exc) from exc


_MISSING_OBJECT = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedObject,
    psycopg.errors.InvalidSchemaName,
    psycopg.errors.UndefinedFunction,
)


def schema_missing(conn: AnyConnection, exc: psycopg.Error) -> psycopg.Error | SchemaMissing:
    """``SchemaMissing`` when ``exc`` is about an object of pgenough's schema (a table, its
    type, the schema itself), else ``exc``; saying so when the caller's transaction is now
    aborted, which the failed statement does to it."""
    primary = exc.diag.message_primary or str(exc)
    if '"pgenough.' not in primary and 'schema "pgenough"' not in primary:
        return exc
    aborted = ""
    if conn.info.transaction_status == TransactionStatus.INERROR:
        aborted = (
            "; the failed statement aborted the transaction open on this connection: roll it back"
        )
    return SchemaMissing(
        f"pgenough's schema is missing from this database ({primary}): run `pgenough migrate`"
        f" (or `manage.py migrate` with pgenough.contrib.django installed){aborted}"
    )


def _run_sync(conn: psycopg.Connection[Any], steps: Steps[T]) -> T:
    try:
        step = next(steps)
        while True:
            try:
                answer = _step_sync(conn, step)
            except BaseException as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _run_async(conn: psycopg.AsyncConnection[Any], steps: Steps[T]) -> T:
    try:
        step = next(steps)
        while True:
            try:
                answer = await _step_async(conn, step)
            except BaseException as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _step_sync(conn: psycopg.Connection[Any], step: Step) -> Any:
    if isinstance(step, Call):
        result = step.fn(conn)
        return run_to_end(result) if inspect.isawaitable(result) else result
    if isinstance(step, Atomic):
        # In a transaction a savepoint, so a failure leaves the caller's transaction
        # usable; in autocommit mode a transaction of its own.
        if _needs_begin(conn):
            conn.execute(_BEGIN)
        with conn.transaction():
            return _run_sync(conn, step.steps)
    with _configure(psycopg.Cursor(conn, row_factory=_rows(step))) as cur:
        if isinstance(step, Copy):
            with cur.copy(step.sql) as copy:
                for row in step.rows:
                    copy.write_row(row)
            return None
        cur.execute(step.sql, step.params, prepare=step.prepare)
        return Result(cur.fetchall() if cur.description else [], cur.rowcount)


async def _step_async(conn: psycopg.AsyncConnection[Any], step: Step) -> Any:
    if isinstance(step, Call):
        result = step.fn(conn)
        return (await result) if inspect.isawaitable(result) else result
    if isinstance(step, Atomic):
        if _needs_begin(conn):  # see _step_sync
            await conn.execute(_BEGIN)
        async with conn.transaction():
            return await _run_async(conn, step.steps)
    async with _configure(psycopg.AsyncCursor(conn, row_factory=_rows(step))) as cur:
        if isinstance(step, Copy):
            async with cur.copy(step.sql) as copy:
                for row in step.rows:
                    await copy.write_row(row)
            return None
        await cur.execute(step.sql, step.params, prepare=step.prepare)
        return Result(await cur.fetchall() if cur.description else [], cur.rowcount)


def run_to_end(awaitable: Awaitable[T]) -> T:
    """``awaitable``'s value, from sync code: on a private event loop, in a thread of its
    own when this thread already runs one (asyncio refuses to nest loops)."""

    async def main() -> T:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    outcome: list[Any] = []

    def in_thread() -> None:
        try:
            outcome.append((True, asyncio.run(main())))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=in_thread, name="pgenough-run-to-end")
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _rows(step: Query | Copy) -> Any:
    if isinstance(step, Query) and step.record is not None:
        return record_rows(step.record)
    return tuple_row


R = TypeVar("R")


def record_rows(cls: type[R]) -> BaseRowFactory[R]:
    """A psycopg row factory reading each row into the dataclass ``cls`` by column name.

    The columns are matched to the fields once per result, not once per row: when they are
    the fields in their order (as every statement of the core selects them, which
    tests/core/test_records.py pins) a row is passed positionally, the cost of a tuple;
    in another order by keyword. A column that is no field, or a field without a default
    that no column fills, is a ``TypeError`` at the first row, never a shifted value."""

    def factory(cursor: Any) -> RowMaker[R]:  # a sync or an async cursor
        names = tuple(c.name for c in cursor.description or ())
        return record_maker(cls, names)

    return factory


def record_maker(cls: type[R], names: Sequence[str]) -> RowMaker[R]:
    """What ``record_rows`` builds each row with, for the columns ``names``."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if tuple(names) == tuple(f.name for f in fields):
        return lambda values: cls(*values)
    known = {f.name for f in fields}
    required = {
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    if len(set(names)) != len(names) or not known >= set(names) >= required:
        raise TypeError(
            f"columns ({', '.join(names)}) are not the fields of {cls.__name__}"
            f" ({', '.join(f.name for f in fields)})"
        )
    return lambda values: cls(**dict(zip(names, values, strict=True)))


_C = TypeVar("_C", psycopg.Cursor[Any], psycopg.AsyncCursor[Any])


_JSON_LOADERS = (
    (psycopg.adapters.types["jsonb"].oid, JsonbLoader),
    (psycopg.adapters.types["json"].oid, JsonLoader),
)


def _configure(cur: _C) -> _C:
    for oid, loader in _JSON_LOADERS:
        if cur.adapters.get_loader(oid, Format.TEXT) is not loader:
            # The cursor's adapters are its own copy: the connection is left as it was.
            cur.adapters.register_loader(oid, loader)
    return cur


def _needs_begin(conn: AnyConnection) -> bool:
    """Idle in non-autocommit mode (Django inside ``atomic()`` before its first query, a
    SQLAlchemy session that has run nothing yet): psycopg's ``transaction()`` would COMMIT
    on exit there, ending the caller's transaction early. So a statement first opens the
    caller's transaction, as any of its own would, and the scope is then a savepoint in it."""
    return conn.info.transaction_status == TransactionStatus.IDLE and not conn.autocommit
