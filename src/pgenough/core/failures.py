"""What a failed attempt leaves behind: its one-line error, its traceback, and what becomes of
its job (ready again after a delay, or dead). A worker and test mode record failures through
``failure_outcome``; ``queue.fail`` records one in the caller's transaction.

The bounds of what a job's row keeps, defined here once:

- ``ERROR_LIMIT`` characters of an attempt's one-line error (``jobs.last_error``, and the
  ``error`` of each entry of ``jobs.errors``).
- ``ERRORS_KEPT`` entries in ``jobs.errors``: the newest failed attempts.
- ``TRACEBACKS_KEPT`` of those keep their ``traceback``: the newest ones that have one;
  older entries keep their one-line error. So a job failing for ever (every attempt spent,
  or retried by an operator again and again) keeps at most that many tracebacks.
- ``TRACEBACK_LIMIT`` characters of one traceback (about 8 kB of ASCII). Past it, the
  traceback keeps its head (its first line, and the outermost frame when it fits in
  ``TRACEBACK_HEAD``: where the worker entered the handler) and, from its end, as many
  whole frames and lines as fit: the innermost frames and the exception raised, which are
  what says why, with a marker line where the middle was cut. Each piece of the
  traceback (a frame, an exception's message) is first cut to ``TRACEBACK_PART_LIMIT``, so
  that a huge message cannot push every frame out.

A dead job's row thus holds at most about ``ERRORS_KEPT * ERROR_LIMIT + TRACEBACKS_KEPT *
TRACEBACK_LIMIT`` characters of errors (80,000), however deep its tracebacks.
"""

from __future__ import annotations

import random
import sysconfig
import traceback as tb
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final

from pgenough.core.errors import GiveUp, RetryIn, TaskFailed

if TYPE_CHECKING:
    from pgenough.core.queue import Job
    from pgenough.core.retry import Backoff

ERROR_LIMIT = 2000
ERRORS_KEPT = 20
TRACEBACKS_KEPT = 5
TRACEBACK_LIMIT = 8000
TRACEBACK_HEAD = 1000
TRACEBACK_PART_LIMIT = 2000


def describe(exc: BaseException) -> str:
    """``Type: message`` (the type alone for an empty message), cut to ``ERROR_LIMIT``: the
    one-line error an attempt that raised ``exc`` records."""
    text = str(exc)
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:ERROR_LIMIT]


_CORE: Final = str(Path(__file__).resolve().parent) + "/"
_STDLIB: Final = str(Path(sysconfig.get_paths()["stdlib"]).resolve()) + "/"


def _runtime(filename: str) -> bool:
    """Whether a frame of ``filename`` is one that carries a job to its task's code:
    pgenough's core (the worker, the task's call) or the standard library (asyncio, the
    thread pool), not a package installed beside it (site-packages may lie inside it)."""
    if filename.startswith(_CORE):
        return True
    return filename.startswith(_STDLIB) and "-packages/" not in filename[len(_STDLIB) :]


def task_frames(exc: BaseException) -> TracebackType | None:
    """``exc``'s traceback from the first frame of the task's own code on: the worker's, the
    event loop's and the thread pool's frames that led there say nothing about the failure.
    The whole of it when every frame is pgenough's or Python's (a failure of pgenough itself,
    or of a task's arguments)."""
    first = exc.__traceback__
    frame = first
    while frame is not None and _runtime(frame.tb_frame.f_code.co_filename):
        frame = frame.tb_next
    return frame or first


def format_traceback(exc: BaseException, limit: int = TRACEBACK_LIMIT) -> str:
    """``exc``'s traceback as Python prints it, from the task's own code on
    (``task_frames``), its chain included (``raise ... from``, and an exception raised while
    handling another), bounded to ``limit`` characters as the module's docstring says."""
    trimmed = tb.TracebackException(type(exc), exc, task_frames(exc), compact=True)
    parts = [_cut(part, TRACEBACK_PART_LIMIT) for part in trimmed.format()]
    text = "".join(parts)
    if len(text) <= limit:
        return text
    if len(parts) == 1:  # a limit smaller than one part
        return text[:limit]
    head = parts[:1]
    if len(parts) > 2 and len(parts[0]) + len(parts[1]) <= TRACEBACK_HEAD:
        head.append(parts[1])
    budget = limit - sum(map(len, head)) - len(_marker(len(text), len(parts)))
    tail: list[str] = []
    for part in reversed(parts[len(head) :]):
        if len(part) > budget:
            break
        tail.append(part)
        budget -= len(part)
    tail.reverse()
    cut_parts = len(parts) - len(head) - len(tail)
    cut_chars = len(text) - sum(map(len, head)) - sum(map(len, tail))
    return "".join([*head, _marker(cut_chars, cut_parts), *tail])


def _marker(chars: int, parts: int) -> str:
    return f"  [... {chars} characters ({parts} frames or lines) cut here ...]\n"


def _cut(part: str, limit: int) -> str:
    if len(part) <= limit:
        return part
    note = f"... [{len(part) - limit} more characters cut]\n"
    return part[: max(0, limit - len(note))] + note


@dataclass(frozen=True)
class Outcome:
    """What a failed attempt does to its job: the error recorded (and its traceback, when
    it has one worth keeping), and ready again after ``delay`` seconds, or dead when
    ``give_up`` (or when its attempts are spent)."""

    error: str
    delay: float
    give_up: bool
    traceback: str | None = None


def failure_outcome(exc: Exception, job: Job, backoff: Backoff, rng: random.Random) -> Outcome:
    """The outcome of ``job``'s attempt that raised ``exc``, under the retry policy
    ``backoff``: what a worker records, and test mode with it.

    Which failures keep a traceback: every exception a task raises, ``TaskTimeout`` included
    (an async task's timeout is chained to the cancellation, whose frames end on the line
    the task was waiting on). ``GiveUp`` keeps one too: it is chosen on purpose, but it ends
    the job, and a dead letter is what an operator reads; where the task gave up, and on
    what (``raise GiveUp(...) from exc``), is what the traceback says. ``TaskFailed`` keeps
    its chain: the task's own exception and where it was raised. ``RetryIn`` keeps none:
    the job runs again as its task asked, its reason says why, and a task polling with it
    would fill the row with the same frames. Failures without a Python exception (a lease
    that expired, a job no task here handles, a shutdown's interruption) have no traceback;
    and a lost claim (``LeaseLost``) records nothing: the job is no longer this attempt's.
    """
    if isinstance(exc, RetryIn):
        return Outcome(str(exc)[:ERROR_LIMIT], exc.seconds, give_up=False)
    if isinstance(exc, TaskFailed):
        cause = exc.__cause__
        error = str(exc)[:ERROR_LIMIT] or (describe(cause) if cause else "TaskFailed")
        return Outcome(error, 0.0, give_up=True, traceback=format_traceback(exc))
    if isinstance(exc, GiveUp):
        return Outcome(
            f"gave up: {exc}"[:ERROR_LIMIT], 0.0, give_up=True, traceback=format_traceback(exc)
        )
    return Outcome(
        describe(exc),
        backoff.delay(job.attempts, rng),
        give_up=False,
        traceback=format_traceback(exc),
    )
