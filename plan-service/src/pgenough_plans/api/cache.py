"""A small cache of first-page search responses, emptied whenever new plans land.

Only first pages (no offset, no cursor) are cached, keyed by the normalised bounds and the
limit, as the exact answer (``pgenough_plans.api.answer.Answer``: bytes and Link header), and only
answers complete in one piece (a streamed search is not kept); at most ``size`` entries,
each for ``ttl`` seconds. ``invalidate_on``
listens to ``plans_changed`` (published by the process worker in the transaction that
finishes a run) and empties the cache on every message and on every ``Gap``.

Losing the cache changes speed, never answers:

* a search records the cache's *generation* before it asks PostgreSQL and stores its answer
  only if no invalidation happened meanwhile, so an answer read before new plans committed
  is never stored after the message that announced them;
* the cache is used only while its listener is connected (``listening``): the moment the
  subscription finds its connection lost it is emptied and bypassed, all the while the
  reconnects fail, until the ``Gap`` of the reconnect says it listens again;
* with a read replica (``pgenough_plans.api.replica``) the messages still come from the primary,
  and the replica may not have replayed the change yet: after each invalidation the
  listener reads the primary's WAL position, the cache's *fence*, and an answer read on the
  replica is stored only when the replica had replayed the fence before its query began
  (``put``'s ``replayed``). Until the fence is known nothing read on the replica is stored;
* while a dropped connection goes unnoticed (a silent network: at most twice the
  subscription's ping interval, its wait and its ping) an entry can outlive a change, never
  beyond its TTL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Final, Generic, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from pgenough.core import Backoff, Gap, subscribe
from pgenough.core.retry import Reconnect
from pgenough_plans.api import metrics

log = logging.getLogger(__name__)

PLANS_CHANGED: Final = "plans_changed"  # the channel pgenough_plans.ingest.process publishes on
RELISTEN_DELAY: Final = 0.5
RELISTEN_MAX_DELAY: Final = 30.0
RELISTEN: Final = Backoff(RELISTEN_DELAY, RELISTEN_MAX_DELAY)
"""Retries of the listener's first connect, and of the listener after a failure of its own."""


V = TypeVar("V")


class ResponseCache(Generic[V]):
    def __init__(self, size: int, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self.generation = 0
        """Bumped by every invalidation; see ``put``."""
        self.listening = False
        """True while the invalidation listener is connected; the cache is bypassed otherwise."""
        self.listener_pid: int | None = None
        """The server process of the listening session, while there is one."""
        self.invalidations = 0
        self.fence: int | None = 0
        """The primary's WAL position (``pgenough_plans.api.replica.lsn``) a replica must have
        replayed for its answers to be stored; None: not known yet since the last
        invalidation. Only answers read on a replica are held to it."""
        self._changed = asyncio.Event()

    @property
    def enabled(self) -> bool:
        return self.listening and self.size > 0 and self.ttl > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        if not self.enabled:
            return None
        entry = self._entries.get(key)
        if entry is not None:
            expires, body = entry
            if expires > self._clock():
                self._entries.move_to_end(key)
                metrics.CACHE_HITS.inc()
                return body
            del self._entries[key]
        metrics.CACHE_MISSES.inc()
        return None

    def put(self, key: Hashable, value: V, generation: int, replayed: int | None = None) -> bool:
        """Store ``value`` unless the cache was invalidated since ``generation`` was read
        (before the search asked PostgreSQL): then the answer may predate new plans. An
        answer read on a replica that had replayed up to ``replayed`` (read before its query)
        is stored only if that is at or past the ``fence``: else it may predate the change
        the last invalidation announced."""
        if not self.enabled or generation != self.generation:
            return False
        if replayed is not None and (self.fence is None or replayed < self.fence):
            return False
        self._entries[key] = (self._clock() + self.ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return True

    def invalidate(self, reason: str) -> None:
        self._entries.clear()
        self.generation += 1
        self.fence = None
        self.invalidations += 1
        metrics.CACHE_INVALIDATIONS.labels(reason).inc()
        self._changed.set()
        self._changed = asyncio.Event()

    def set_fence(self, generation: int, position: int) -> None:
        """The primary's position read after the invalidation that made ``generation``;
        ignored when a later invalidation came meanwhile (it reads its own)."""
        if generation == self.generation:
            self.fence = position

    async def wait_invalidations(self, count: int) -> None:
        """Return once ``invalidations`` reaches ``count`` (a hook for tests: no sleeps)."""
        while self.invalidations < count:
            await self._changed.wait()

    def set_listening(self, listening: bool, reason: str, pid: int | None = None) -> None:
        """The listener connected (the cache starts empty) or failed (it is bypassed)."""
        self.invalidate(reason)
        self.listening = listening
        self.listener_pid = pid if listening else None


async def invalidate_on(
    cache: ResponseCache[Any],
    url: str,
    started: asyncio.Event,
    *,
    ping_interval: float = 5.0,
    fence: Callable[[], Awaitable[int]] | None = None,
) -> None:
    """Empty ``cache`` on every ``plans_changed`` message and every gap, until cancelled.
    ``started`` is set once the first LISTEN succeeded or failed. ``fence`` (with a read
    replica): the primary's WAL position, read after each invalidation for ``set_fence``."""

    async def fenced() -> None:
        if fence is None:
            return
        generation = cache.generation
        try:
            cache.set_fence(generation, await fence())
        except (TimeoutError, PoolTimeout, psycopg.Error) as exc:
            # Answers read on the replica stay unstored until the next invalidation's fence.
            log.warning("cache fence not read from the primary: %s", exc)

    def lost(reason: str) -> None:
        log.warning("cache listener lost its connection (%s); cache bypassed", reason)
        cache.set_listening(False, "listener")
        started.set()  # do not hold up start-up: searches work without the cache

    restarts = Reconnect("cache invalidation listener", RELISTEN, logger=log)
    while True:
        try:
            async with subscribe(
                url,
                PLANS_CHANGED,
                ping_interval=ping_interval,
                on_lost=lost,
                retry_connect=RELISTEN,
            ) as sub:
                cache.set_listening(True, "listener", sub.backend_pid)
                await fenced()
                started.set()
                restarts.succeeded()
                async for item in sub:
                    if isinstance(item, Gap):  # listening again, on a new session
                        cache.set_listening(True, "gap", sub.backend_pid)
                    else:
                        cache.invalidate(PLANS_CHANGED)
                    await fenced()
        except Exception as exc:  # the top of a service loop: log, bypass the cache, listen again
            log.exception("cache invalidation listener failed; cache bypassed until it is back")
            cache.set_listening(False, "listener")
            started.set()
            await restarts.wait(restarts.failed(exc))
