"""A bulkhead: at most ``limit`` searches at once; a short, bounded line for the next few.

An unbounded queue would only turn overload into latency for everyone and, once the pool runs
dry, into timeouts. Refusing the instant every slot is taken is the other extreme: under a
high search rate, bursts of a few milliseconds fill every slot while the mean load is half of
them, and those requests got 503 although a slot freed a moment later
(docs/plan-service/benchmarks-history.md, "Issue 13 §4: the read path while ingesting"). So
at most ``limit`` searches may wait, each at most ``max_wait`` seconds, in arrival order;
beyond that, or after it, 503 TOO_BUSY with Retry-After. Nothing to recover: a slot frees when
its search ends.

An answer streamed past its first page holds its slot (and its connection and snapshot) for as
long as the client takes to read it, so at most ``max_streams`` of the slots may be streams: a
client that opens many full-range searches and reads them slowly (or not at all) leaves the
other slots to first pages. A search that would stream past that share is refused at once,
before anything is sent. ``full_for`` is how long every slot has been taken, for readiness.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from pgenough_plans.api import metrics
from pgenough_plans.api.errors import TooBusy


class Bulkhead:
    """Slots for one event loop (the API's single worker process); no lock is needed."""

    def __init__(self, limit: int, max_wait: float = 0.0, max_streams: int | None = None) -> None:
        if limit < 1:
            raise ValueError("a bulkhead needs at least one slot")
        if max_wait < 0:
            raise ValueError("a bulkhead's max_wait must be >= 0")
        max_streams = default_max_streams(limit) if max_streams is None else max_streams
        if not 1 <= max_streams <= limit:
            raise ValueError("a bulkhead's max_streams must be between 1 and its limit")
        self.limit = limit
        self.max_wait = max_wait
        self.max_streams = max_streams
        self.in_use = 0
        self.streams = 0
        self._full_since: float | None = None
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.rejected = 0
        self._peak = 0
        self._rejected_seen = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the block, waiting up to ``max_wait`` in line for one, or raise
        ``TooBusy`` when the line is full or the wait runs out."""
        if self.in_use >= self.limit or self._waiters:
            await self._wait_in_line()
        else:
            self.in_use += 1
            if self.in_use == self.limit:
                self._full_since = time.monotonic()
        self._peak = max(self._peak, self.in_use)
        metrics.SEARCHES_IN_FLIGHT.inc()
        try:
            yield
        finally:
            metrics.SEARCHES_IN_FLIGHT.dec()
            self._release()

    async def _wait_in_line(self) -> None:
        """Return holding a slot handed over by ``_release``, or raise ``TooBusy``."""
        if self.max_wait <= 0 or len(self._waiters) >= self.limit:
            self._refuse()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._peak = self.limit  # every slot taken and a line: full pressure (take_pressure)
        try:
            # shield: the timeout must not cancel the waiter itself, so that a slot handed
            # over at the very moment the wait ends is seen (and taken) below. asyncio.timeout,
            # not wait_for: on 3.11 wait_for returns the result and drops a cancel that comes
            # as the waiter completes, and a client gone at the hand-over would be served.
            async with asyncio.timeout(self.max_wait):
                await asyncio.shield(waiter)
        except TimeoutError:
            if waiter.done():
                return
            waiter.cancel()
            self._waiters.remove(waiter)
            self._refuse()
        except asyncio.CancelledError:  # the client went away while in line
            if waiter.done():
                self._release()
            else:
                waiter.cancel()
                self._waiters.remove(waiter)
            raise

    def _release(self) -> None:
        # Hand the slot straight to the first live waiter, so no newcomer overtakes the line.
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.in_use -= 1
        self._full_since = None

    @contextmanager
    def stream(self) -> Iterator[None]:
        """Mark a search that holds a slot as a stream for the block, or raise ``TooBusy``
        when ``max_streams`` already stream."""
        if self.streams >= self.max_streams:
            metrics.STREAMS_REFUSED.inc()
            raise TooBusy(
                f"too many answers streaming at once (limit {self.max_streams}); retry in a"
                " moment, or ask for pages with limit and follow the Link header"
            )
        self.streams += 1
        metrics.STREAMS_IN_FLIGHT.inc()
        try:
            yield
        finally:
            metrics.STREAMS_IN_FLIGHT.dec()
            self.streams -= 1

    def full_for(self) -> float:
        """Seconds every slot has been taken without a break; 0 when one is free."""
        since = self._full_since
        return 0.0 if since is None else time.monotonic() - since

    def _refuse(self) -> None:
        self.rejected += 1
        metrics.BULKHEAD_REJECTIONS.inc()
        raise TooBusy(f"too many searches at once (limit {self.limit}); retry in a moment")

    def take_pressure(self, threshold: float) -> float:
        """The pressure since the last call, 0..1: 1 when a search was refused, else how far
        the busiest moment went past ``threshold`` of the slots toward all of them. The peak,
        not the mean: under a high search rate a burst fills the slots within milliseconds."""
        peak, refused = self._peak, self.rejected > self._rejected_seen
        self._peak, self._rejected_seen = self.in_use, self.rejected
        if refused:
            return 1.0
        floor = threshold * self.limit
        if peak <= floor:
            return 0.0
        return min(1.0, (peak - floor) / (self.limit - floor))


def default_max_streams(limit: int) -> int:
    """Half the slots (at least one): the other half stays for first pages."""
    return max(1, limit // 2)
