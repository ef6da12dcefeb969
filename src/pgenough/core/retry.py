"""Retry delays: exponential backoff with jitter, and the one reconnect policy built on it.

``Backoff`` is pure (no clock, no I/O): a job's retry delay and a loop's reconnect delay.
``Reconnect`` drives it for every long-lived loop that must get its connection back (the
claim loop, the periodic scheduler, pub/sub subscribers and the listeners built on them, the
API's pressure publisher): one warning line per failure, a sleep that grows, a reset on
success, and nothing to wait for on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from pgenough.core.errors import first_line

T = TypeVar("T")

DEFAULT_BASE_SECONDS = 1.0
DEFAULT_CAP_SECONDS = 3600.0


@dataclass(frozen=True)
class Backoff:
    """Delay before attempt ``n + 1`` after ``n`` failed attempts.

    The ceiling doubles per attempt, ``base * 2 ** (attempts - 1)``, capped at ``cap``; the
    delay is drawn uniformly from the upper half of it ("equal jitter"), so retries of jobs
    that failed together spread out but never come back sooner than half the ceiling.
    """

    base: float = DEFAULT_BASE_SECONDS
    cap: float = DEFAULT_CAP_SECONDS

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError("backoff needs 0 < base <= cap")

    def ceiling(self, attempts: int) -> float:
        """The largest delay after ``attempts`` failed attempts (``attempts >= 1``)."""
        exponent = max(0, attempts - 1)
        if exponent >= 64:  # 2**64 * base is past any sane cap; avoid float overflow
            return self.cap
        return min(self.cap, self.base * 2.0**exponent)

    def delay(self, attempts: int, rng: random.Random) -> float:
        """A jittered delay in ``[ceiling / 2, ceiling]``."""
        top = self.ceiling(attempts)
        return top / 2 + rng.random() * (top / 2)


class Reconnect:
    """The one reconnect policy of a long-lived loop (a claim loop, a listener, a scheduler).

    The loop tries; after each failure ``failed(exc)`` counts it, logs ONE warning line
    (``<what> failed (<error>); attempt <n>, retry in <delay>s``) and returns the next
    ``backoff`` delay, and ``wait(delay)`` sleeps it, or less when ``stop`` is set; after a
    success ``succeeded()`` starts the delays over. ``attempt(fn)`` is the whole round for a
    connect: call ``fn`` until it returns, with no sleep before the first call. Every sleep is
    an ``asyncio`` wait, so cancelling the loop (shutdown) ends it at once.
    *From:* psycopg_pool's ``AttemptWithBackoff`` and River's one backoff helper.
    """

    def __init__(
        self,
        what: str,
        backoff: Backoff,
        *,
        logger: logging.Logger,
        rng: random.Random | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.what = what
        self.backoff = backoff
        self.failures = 0
        """Failures since the last success."""
        self._log = logger
        self._rng = rng or random.Random()
        self._stop = stop

    def succeeded(self) -> None:
        self.failures = 0

    def failed(self, error: BaseException | str) -> float:
        """Count a failure, log it, and return how long to wait before the next attempt."""
        self.failures += 1
        delay = self.backoff.delay(self.failures, self._rng)
        reason = error if isinstance(error, str) else first_line(error)
        self._log.warning(
            "%s failed (%s); attempt %d, retry in %.2fs", self.what, reason, self.failures, delay
        )
        return delay

    async def wait(self, delay: float) -> None:
        """Sleep ``delay`` seconds, or until ``stop`` is set."""
        if self._stop is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stop.wait()

    async def attempt(
        self,
        fn: Callable[[], Awaitable[T]],
        errors: type[BaseException] | tuple[type[BaseException], ...],
        *,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> T:
        """``await fn()`` until it returns rather than raise one of ``errors``; no sleep before
        the first call. ``on_failure(exc)`` runs after each failure, before the wait."""
        while True:
            try:
                result = await fn()
            except errors as exc:
                delay = self.failed(exc)
                if on_failure is not None:
                    on_failure(exc)
                await self.wait(delay)
                continue
            self.succeeded()
            return result


__all__ = [
    "Backoff",
    "Reconnect",
]
