"""Pub/sub over LISTEN/NOTIFY that survives reconnects and large payloads.

``publish`` runs in the caller's transaction, so subscribers see a message only if that
transaction commits. NOTIFY payloads must be under 8000 bytes; larger ones are stored in
``pgenough.messages`` and the notification carries a reference that subscribers resolve, so
they arrive intact. A subscriber whose connection drops reconnects, LISTENs again and yields a
``Gap``: messages published while it was away are lost to it, and it should resynchronise
from the tables that hold the truth.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import psycopg
from psycopg import sql

from pgenough.core import metrics
from pgenough.core._sql import load
from pgenough.core.db import with_network_timeout
from pgenough.core.errors import first_line
from pgenough.core.retry import Backoff, Reconnect
from pgenough.core.statements import Query, Steps, dual

log = logging.getLogger(__name__)
_Q = load("pubsub")

# NOTIFY rejects payloads of 8000 bytes or more; keep a margin below that.
MAX_INLINE_BYTES = 7999
# Marks a notification that carries a reference to a stored payload. Payloads that happen to
# start with it are stored too, so a subscriber never mistakes one for the other.
REF_PREFIX = "\x1epgenough-ref:"

DEFAULT_PING_INTERVAL = 5.0
DEFAULT_RECONNECT_MAX_DELAY = 5.0
RECONNECT_DELAY = 0.05
"""The first reconnect's delay (the ceiling of its jitter); it doubles up to the maximum."""


@dataclass(frozen=True)
class Message:
    channel: str
    payload: str


@dataclass(frozen=True)
class Gap:
    """The subscription was down from ``since`` to ``until``; messages may have been missed."""

    channels: tuple[str, ...]
    since: datetime
    until: datetime
    reason: str


@dual
def publish(channel: str, payload: str) -> Steps[None]:
    """Publish ``payload`` on ``channel`` in the transaction open on ``conn``."""
    if not channel:
        raise ValueError("channel must not be empty")
    if len(payload.encode("utf-8")) < MAX_INLINE_BYTES and not payload.startswith(REF_PREFIX):
        yield Query(_Q["notify"], {"channel": channel, "payload": payload})
    else:
        yield Query(
            _Q["publish_stored"], {"channel": channel, "payload": payload, "prefix": REF_PREFIX}
        )
    metrics.PUBSUB_PUBLISHED.labels(channel).inc()


class Subscription:
    """Messages of some channels, as an async iterator of ``Message`` and ``Gap``.

    Use ``subscribe(url, *channels)``; entering the ``async with`` returns once LISTEN is
    active, so anything committed after that is delivered. It fails when the first connect
    does, unless ``retry_connect`` is given: then it retries on that backoff until it connects
    (a service that must wait for its database, as a listener started before the server is).
    """

    def __init__(
        self,
        url: str,
        channels: tuple[str, ...],
        *,
        ping_interval: float = DEFAULT_PING_INTERVAL,
        reconnect_max_delay: float = DEFAULT_RECONNECT_MAX_DELAY,
        application_name: str = "pgenough-subscriber",
        on_lost: Callable[[str], None] | None = None,
        retry_connect: Backoff | None = None,
    ) -> None:
        if not channels:
            raise ValueError("subscribe to at least one channel")
        self.url = url
        self.channels = channels
        self.ping_interval = ping_interval
        self.reconnect_max_delay = reconnect_max_delay
        self.application_name = application_name
        self.on_lost = on_lost
        """Called with the reason as soon as the connection is found lost, before the
        reconnect attempts (which may take long): for a subscriber that must stop trusting
        what it holds at once, not only at the ``Gap`` that follows the reconnect. With
        ``retry_connect``, also once when the first connect fails, before its retries."""
        self.retry_connect = retry_connect
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.reconnects = 0
        names = ", ".join(channels)
        self._reconnect_policy = Reconnect(
            f"subscriber to {names}: reconnect",
            Backoff(min(RECONNECT_DELAY, reconnect_max_delay), reconnect_max_delay),
            logger=log,
        )

    async def __aenter__(self) -> Self:
        if self.retry_connect is None:
            self._conn = await self._connect()
            return self
        first = Reconnect(
            f"subscriber to {', '.join(self.channels)}: connect", self.retry_connect, logger=log
        )

        def down(exc: BaseException) -> None:
            if first.failures == 1 and self.on_lost is not None:
                self.on_lost(first_line(exc))

        self._conn = await first.attempt(self._connect, psycopg.OperationalError, on_failure=down)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    @property
    def backend_pid(self) -> int | None:
        """The server process of the listening session (for operators and tests)."""
        return self._conn.info.backend_pid if self._conn is not None else None

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(
            with_network_timeout(self.url), autocommit=True, application_name=self.application_name
        )
        try:
            for channel in self.channels:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _reconnect(self, reason: str) -> Gap:
        since = datetime.now(UTC)
        metrics.PUBSUB_GAPS.inc()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        self._conn = await self._reconnect_policy.attempt(self._connect, psycopg.OperationalError)
        self.reconnects += 1
        log.warning("subscriber reconnected to %s after: %s", ", ".join(self.channels), reason)
        return Gap(self.channels, since, datetime.now(UTC), reason)

    async def _receive(self) -> list[Message]:
        """Wait up to ``ping_interval`` for notifications; ping when none came."""
        assert self._conn is not None
        received = [n async for n in self._conn.notifies(timeout=self.ping_interval, stop_after=1)]
        if not received:
            await self._ping()
            return []
        messages = []
        for n in received:
            payload: str | None = n.payload
            if n.payload.startswith(REF_PREFIX):
                payload = await self._fetch_stored(int(n.payload[len(REF_PREFIX) :]))
            if payload is not None:
                messages.append(Message(n.channel, payload))
                metrics.PUBSUB_RECEIVED.labels(n.channel).inc()
        return messages

    async def _ping(self) -> None:
        """Prove the session alive within ``ping_interval``, or raise ``TimeoutError``
        saying so (and close the connection).

        Unanswered (a cut network, noticed before the connection's network timeout), the
        connection is closed before the ping is cancelled: cancelled first, psycopg would try
        to cancel the query on the server over the same dead network, some 10 s more before
        the listener is found lost and its reconnects begin."""
        assert self._conn is not None
        ping = asyncio.ensure_future(self._conn.execute(_Q["ping"]))
        try:
            done, _ = await asyncio.wait({ping}, timeout=self.ping_interval)
        finally:
            if not ping.done():
                await self._conn.close()
                ping.cancel()
                await asyncio.gather(ping, return_exceptions=True)
        if not done:
            raise TimeoutError(f"no answer to a ping within {self.ping_interval:g} s")
        ping.result()

    async def _fetch_stored(self, message_id: int) -> str | None:
        assert self._conn is not None
        cur = await self._conn.execute(_Q["fetch_stored"], {"id": message_id})
        row = await cur.fetchone()
        if row is None:
            log.error("stored message %d is gone (past its retention); dropped", message_id)
            return None
        return str(row[0])

    async def __aiter__(self) -> AsyncIterator[Message | Gap]:
        if self._conn is None:
            raise RuntimeError("use 'async with subscribe(...)' before iterating")
        while True:
            try:
                messages = await self._receive()
            except (psycopg.OperationalError, TimeoutError) as exc:
                reason = f"{type(exc).__name__}: {exc}".strip()
                if self.on_lost is not None:
                    self.on_lost(reason)
                yield await self._reconnect(reason)
                continue
            for message in messages:
                yield message


def subscribe(
    url: str,
    *channels: str,
    ping_interval: float = DEFAULT_PING_INTERVAL,
    on_lost: Callable[[str], None] | None = None,
    retry_connect: Backoff | None = None,
) -> Subscription:
    """Subscribe to ``channels`` on a dedicated connection to ``url``::

    async with subscribe(url, "orders-confirmed") as sub:
        async for item in sub:
            if isinstance(item, Gap):
                ...  # resynchronise from the tables
            else:
                print(item.channel, item.payload)
    """
    return Subscription(
        url, channels, ping_interval=ping_interval, on_lost=on_lost, retry_connect=retry_connect
    )


__all__ = [
    "Gap",
    "Message",
    "Subscription",
    "publish",
    "subscribe",
]
