"""The event loop the ``pgenough`` commands run on.

uvloop when it is installed (the plan service and the dashboard extra install it, as
``uvicorn[standard]`` would), else asyncio's own: it costs less CPU per search and per job
(docs/plan-service/benchmarks-history.md, "API: the cost of one search"); psycopg,
psycopg_pool and uvicorn run on either. ``PGENOUGH_EVENT_LOOP=asyncio`` keeps asyncio's loop
(for a platform uvloop does not support, or to rule it out); ``uvloop`` insists on it. Library
users of ``pgenough.core`` run whatever loop their application runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal, TypeVar

from pgenough.core import PgenoughError

EventLoopChoice = Literal["auto", "asyncio", "uvloop"]
DEFAULT_EVENT_LOOP: Final[EventLoopChoice] = "auto"
T = TypeVar("T")


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for ``asyncio.Runner``; None for asyncio's default loop."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise PgenoughError(
                "PGENOUGH_EVENT_LOOP=uvloop, but uvloop is not installed:"
                " pip install uvloop, or set PGENOUGH_EVENT_LOOP=auto"
            ) from None
        return None
    return uvloop.new_event_loop


def run(
    main: Callable[[], Coroutine[Any, Any, T]], choice: EventLoopChoice = DEFAULT_EVENT_LOOP
) -> T:
    """``asyncio.run(main())`` on the loop ``choice`` names. ``main`` is called only once the
    loop exists, so a missing uvloop leaves no coroutine that was never awaited."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main())
