"""Log context: fields (``run_id``, ``job_id``, ``request_id``...) that every log line emitted
inside a scope carries, without passing them to each ``log.info``.

The fields live in a ``contextvars`` variable, so each asyncio task sees its own: a worker runs
each job in a task started with :func:`context_with`, a fetch opens :func:`log_context` per
provider. Formatting them is the application's business (``pgenough.logs`` for the CLI); the
core only keeps them.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping

# A scope is a dict of its own (copied from its parent when it opens), so ``bind_log_context``
# may add to the innermost scope without touching an enclosing one or another task's.
_FIELDS: contextvars.ContextVar[dict[str, object] | None] = contextvars.ContextVar(
    "pgenough_log_context", default=None
)


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Within the block, log lines of this task (and of tasks it starts) carry ``fields``."""
    token = _FIELDS.set({**(_FIELDS.get() or {}), **fields})
    try:
        yield
    finally:
        _FIELDS.reset(token)


def bind_log_context(**fields: object) -> None:
    """Add ``fields`` to the innermost open scope, until it closes (a run's id becomes known
    half-way through its fetch). Outside any scope it does nothing: a field with no scope
    would outlive what it describes."""
    current = _FIELDS.get()
    if current is not None:
        current.update(fields)


def context_with(**fields: object) -> contextvars.Context:
    """A copy of the current context with a new scope holding ``fields``: pass it to
    ``asyncio.create_task(..., context=...)`` so everything the task logs carries them."""
    ctx = contextvars.copy_context()
    ctx.run(_FIELDS.set, {**(_FIELDS.get() or {}), **fields})
    return ctx


def current_log_context() -> Mapping[str, object]:
    """The fields in effect here (empty outside any scope)."""
    return dict(_FIELDS.get() or {})


__all__ = [
    "bind_log_context",
    "current_log_context",
    "log_context",
]
