"""Retry delays: exponential backoff with jitter. Pure functions, no clock, no I/O."""

from __future__ import annotations

import random
from dataclasses import dataclass

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
