"""One LISTEN connection per worker process, shared by the executors of all its queues.

Enqueueing a runnable job notifies channel ``pgenough_jobs`` with the queue's name on commit;
the notifier wakes the executors of that queue. A connection per queue would cost one
PostgreSQL backend per queue per process for nothing: a notification names its queue. While
the connection is down every executor polls; on each (re)connect all are woken once, for
whatever was enqueued while nobody listened.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

import psycopg

from pgenough.core._sql import load

log = logging.getLogger(__name__)
_Q = load("queue")

LISTENER_APPLICATION_PREFIX = "pgenough-listener:"
"""``application_name`` of listener sessions (``pg_stat_activity`` tells them apart)."""


class Notifier:
    """Wakes the executors registered for a queue when a notification names it."""

    def __init__(self, conninfo: str, *, name: str, check_interval: float) -> None:
        self._conninfo = conninfo
        self.name = name
        self._check_interval = check_interval
        self._wakes: dict[str, list[asyncio.Event]] = defaultdict(list)
        self.listening = asyncio.Event()
        """Set while LISTEN is active."""

    def register(self, queue: str, wake: asyncio.Event) -> None:
        """Set ``wake`` on every notification for ``queue`` (and on each reconnect)."""
        self._wakes[queue].append(wake)

    def _wake_all(self) -> None:
        for events in self._wakes.values():
            for event in events:
                event.set()

    async def run(self) -> None:
        """Listen until cancelled; reconnect forever (the executors poll meanwhile)."""
        delay = 0.1
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo,
                    autocommit=True,
                    application_name=f"{LISTENER_APPLICATION_PREFIX}{self.name}",
                )
                async with conn:
                    await conn.execute(_Q["listen"])
                    self.listening.set()
                    self._wake_all()
                    delay = 0.1
                    while True:
                        async for note in conn.notifies(timeout=self._check_interval):
                            for event in self._wakes.get(note.payload, ()):
                                event.set()
                        await conn.execute("SELECT 1")  # a dead session must not go unnoticed
            except psycopg.OperationalError as exc:
                self.listening.clear()
                log.warning("%s: listener lost (%s); reconnecting in %.1fs", self.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(5.0, delay * 2)
