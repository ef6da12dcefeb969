"""The live overview: ONE subscription per dashboard, fanned out to every open browser.

A listener task LISTENs on ``CHANNELS`` (the queue's: new runnable work) and the channels the
extensions name (the plan service's ``run_changed`` and ``plans_changed``) on a single
connection, however many tabs follow the overview; every message, and every gap in the
subscription (messages may have been missed), marks the overview stale. A publisher task
takes a fresh snapshot when it is stale, and every ``tick`` anyway so that what no message
announces (jobs done, failed, dead) shows, then hands it to every attached client. Bursts
coalesce: a snapshot covers every change committed before it, and snapshots are at least
``min_interval`` apart. With a reader that reads elsewhere than the primary (the plan
service's replicas), after each message (and gap) the feed reads the reader's ``fence`` (the
primary's WAL position) before it marks the overview stale, one read at a time however fast
messages come, and a snapshot reads a replica only once it has replayed that position. Each
client holds a queue of one, so a slow browser gets the newest snapshot, never a backlog of
old ones; ``None`` in it means the feed closed and the stream must end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

import psycopg
from psycopg_pool import PoolTimeout

from pgenough.core import Backoff, Gap, subscribe
from pgenough.core.queue import JOBS_CHANNEL

log = logging.getLogger(__name__)

CHANNELS: Final = (JOBS_CHANNEL,)
"""What the overview follows of the queue itself: a queue got runnable work."""
MIN_INTERVAL: Final = 0.25
LISTEN_RETRY: Final = 2.0
"""The listener's first retry of its connect, doubling from there up to ``LISTEN_MAX_DELAY``."""
LISTEN_MAX_DELAY: Final = 30.0


@dataclass(frozen=True)
class Event:
    """One server-sent event: ``overview`` (the snapshot's JSON) or ``problem`` (a message)."""

    name: str
    data: str

    def encode(self) -> str:
        # SSE frames end at a blank line; JSON from json.dumps never contains a newline.
        return f"event: {self.name}\ndata: {self.data}\n\n"


Snapshot = Callable[[], Awaitable[Event]]
ClientQueue = asyncio.Queue[Event | None]


class FeedFull(Exception):
    """Every client slot is taken."""


def _offer(queue: ClientQueue, item: Event | None) -> None:
    """Put ``item`` in a queue of one, replacing what the client has not read yet."""
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(item)


class LiveFeed:
    def __init__(
        self,
        snapshot: Snapshot,
        *,
        tick: float,
        max_clients: int,
        min_interval: float = MIN_INTERVAL,
        fence: Callable[[], Awaitable[int | None]] | None = None,
        channels: Sequence[str] = CHANNELS,
    ) -> None:
        self._snapshot = snapshot
        self._read_fence = fence
        self.channels = tuple(dict.fromkeys(channels))
        self.fence: int | None = None
        """The primary's position after the last change heard of (with replicas)."""
        self._changed = asyncio.Event()
        self.tick = tick
        self.max_clients = max_clients
        self.min_interval = min_interval
        self._clients: set[ClientQueue] = set()
        self._stale = asyncio.Event()
        self._closed = False
        self.snapshots = 0
        """Snapshots taken so far (for tests and operators)."""
        self.gaps = 0

    @property
    def clients(self) -> int:
        return len(self._clients)

    @property
    def full(self) -> bool:
        return len(self._clients) >= self.max_clients

    @property
    def closed(self) -> bool:
        return self._closed

    def attach(self) -> ClientQueue:
        """A queue for one browser; a fresh snapshot is on its way to it."""
        queue: ClientQueue = asyncio.Queue(maxsize=1)
        if self._closed:
            queue.put_nowait(None)
            return queue
        if self.full:
            raise FeedFull(f"{self.max_clients} browsers already follow the live overview")
        self._clients.add(queue)
        self._stale.set()
        return queue

    def detach(self, queue: ClientQueue) -> None:
        self._clients.discard(queue)

    def mark_stale(self) -> None:
        self._stale.set()

    def close(self) -> None:
        """End every stream now (the server is stopping) and refuse new ones."""
        self._closed = True
        for queue in self._clients:
            _offer(queue, None)
        self._clients.clear()
        self._stale.set()

    async def listen(self, url: str, listening: asyncio.Event) -> None:
        """Mark the overview stale on every message of ``channels`` and every gap, once the
        fence is read; the subscription retries its first connect and reconnects by itself."""

        def down(reason: str) -> None:
            listening.set()  # do not hold up start-up: the pages work without it

        async with asyncio.TaskGroup() as fencing:
            fencing.create_task(self._fence_changes())
            async with subscribe(
                url,
                *self.channels,
                on_lost=down,
                retry_connect=Backoff(LISTEN_RETRY, LISTEN_MAX_DELAY),
            ) as sub:
                listening.set()
                # Whatever changed while we were not listening: resynchronise.
                self._changed.set()
                async for item in sub:
                    if isinstance(item, Gap):
                        self.gaps += 1
                    self._changed.set()

    async def _fence_changes(self) -> None:
        """After each change heard of (those heard meanwhile coalesce): the fence, then stale."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            await self._fenced()
            self._stale.set()

    async def _fenced(self) -> None:
        if self._read_fence is None:
            return
        try:
            position = await self._read_fence()
        except (TimeoutError, PoolTimeout, psycopg.Error) as exc:
            # The snapshot reads within the lag bound: at most that stale, until the next.
            log.warning("live overview fence not read from the primary: %s", exc)
            return
        if position is not None:
            self.fence = position

    async def publish(self) -> None:
        """Snapshot and fan out, on every change (coalesced) and every tick, until closed."""
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick):
                    await self._stale.wait()
            self._stale.clear()
            if self._closed:
                return
            if not self._clients:
                continue  # nobody is watching: no query
            try:
                event = await self._snapshot()
            except Exception:  # the top of a service loop: log it, keep the feed alive
                log.exception("dashboard snapshot failed")
                event = Event("problem", '{"message": "internal error: see the server log"}')
            self.snapshots += 1
            for queue in list(self._clients):
                _offer(queue, event)
            # Changes arriving during this pause coalesce into the next snapshot.
            await asyncio.sleep(self.min_interval)
