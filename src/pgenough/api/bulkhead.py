"""A bulkhead: at most ``limit`` searches at once; one more is refused at once, not queued.

Queueing would only turn overload into latency for everyone and, once the pool runs dry,
into timeouts; refusing keeps the searches that run fast and tells the rest to come back
(503 TOO_BUSY with Retry-After). Nothing to recover: a slot frees when its search ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pgenough.api import metrics
from pgenough.api.errors import TooBusy


class Bulkhead:
    """Slots for one event loop (the API's single worker process); no lock is needed."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a bulkhead needs at least one slot")
        self.limit = limit
        self.in_use = 0
        self.rejected = 0
        self._peak = 0
        self._rejected_seen = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the block, or raise ``TooBusy`` when none is free."""
        if self.in_use >= self.limit:
            self.rejected += 1
            metrics.BULKHEAD_REJECTIONS.inc()
            raise TooBusy(f"too many searches at once (limit {self.limit}); retry in a moment")
        self.in_use += 1
        self._peak = max(self._peak, self.in_use)
        metrics.SEARCHES_IN_FLIGHT.inc()
        try:
            yield
        finally:
            self.in_use -= 1
            metrics.SEARCHES_IN_FLIGHT.dec()

    def take_pressure(self, threshold: float) -> float:
        """The pressure since the last call, 0..1: 1 when a search was refused, else how far
        the busiest moment went past ``threshold`` of the slots toward all of them. The peak,
        not the mean: at 1,000 searches/s a burst fills the slots within milliseconds."""
        peak, refused = self._peak, self.rejected > self._rejected_seen
        self._peak, self._rejected_seen = self.in_use, self.rejected
        if refused:
            return 1.0
        floor = threshold * self.limit
        if peak <= floor:
            return 0.0
        return min(1.0, (peak - floor) / (self.limit - floor))
