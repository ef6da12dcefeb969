"""One LISTEN connection per worker process, shared by the executors of all its queues.

Enqueueing a runnable job notifies ``JOBS_CHANNEL`` with the queue's name on commit; the
notifier wakes the executors of that queue. Cancelling a running job notifies
``CANCEL_CHANNEL`` with its id; the notifier tells every executor, and the one holding it
stops its handler. A connection per queue would cost one PostgreSQL
backend per queue per process for nothing: a notification names its queue. The connection is
a pub/sub ``Subscription``, which pings it and reconnects; while it is down every executor
polls, and on each (re)connect all are woken once, for whatever was enqueued while nobody
listened.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable

from pgenough.core.cancellation import CANCEL_CHANNEL
from pgenough.core.pubsub import Gap, Subscription
from pgenough.core.queue import JOBS_CHANNEL
from pgenough.core.retry import Backoff
from pgenough.core.service import Service

log = logging.getLogger(__name__)

LISTENER_APPLICATION_PREFIX = "pgenough-listener:"
"""``application_name`` of listener sessions (``pg_stat_activity`` tells them apart)."""
CONNECT_BACKOFF = Backoff(base=0.1, cap=5.0)
"""Retries of the first connect (the subscription's own policy takes over once connected)."""


class Notifier(Service):
    """Wakes the executors registered for a queue when a notification names it (a
    ``Service``: ready once it listens)."""

    def __init__(self, conninfo: str, *, name: str, check_interval: float) -> None:
        self._conninfo = conninfo
        self.name = name
        self.service_name = f"{name}:listen"
        self._check_interval = check_interval
        self._wakes: dict[str, list[Callable[[], None]]] = defaultdict(list)
        self._cancels: list[Callable[[int], None]] = []
        self.listening = asyncio.Event()
        """Set while LISTEN is active."""

    def register(self, queue: str, wake: Callable[[], None]) -> None:
        """Call ``wake`` on every notification for ``queue`` (and on each reconnect, for
        what may have come meanwhile)."""
        self._wakes[queue].append(wake)

    def register_cancel(self, cancel: Callable[[int], None]) -> None:
        """Call ``cancel(job_id)`` on every cancel of a running job (``cancellation.py``)."""
        self._cancels.append(cancel)

    def _cancelled(self, payload: str) -> None:
        try:
            job_id = int(payload)
        except ValueError:
            log.warning("%s: a cancel names no job id: %r", self.name, payload[:100])
            return
        for cancel in self._cancels:
            cancel(job_id)

    def _up(self) -> None:
        self.listening.set()
        for wakes in self._wakes.values():
            for wake in wakes:
                wake()

    def _lost(self, reason: str) -> None:
        self.listening.clear()
        log.warning("%s: listener lost (%s); reconnecting", self.name, reason)

    async def serve(self) -> None:
        await self.run()

    async def ready(self) -> None:
        await self.listening.wait()

    async def run(self) -> None:
        """Listen until cancelled; the subscription retries its first connect and reconnects
        by itself."""
        subscription = Subscription(
            self._conninfo,
            (JOBS_CHANNEL, CANCEL_CHANNEL),
            ping_interval=self._check_interval,
            application_name=f"{LISTENER_APPLICATION_PREFIX}{self.name}",
            on_lost=self._lost,
            retry_connect=CONNECT_BACKOFF,
        )
        async with subscription:
            self._up()
            async for item in subscription:
                if isinstance(item, Gap):
                    self._up()
                    continue
                if item.channel == CANCEL_CHANNEL:
                    self._cancelled(item.payload)
                    continue
                for wake in self._wakes.get(item.payload, ()):
                    wake()
