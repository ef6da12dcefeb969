"""The heartbeat of one queue's executor: every lease / 3 it extends the leases of the jobs in
flight, so a claim stays ours while its handler runs (and a dead worker's expire); and of the
jobs it could not extend, it stops the handlers of those an operator cancelled (when the
listener missed the cancel)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core import queue
from pgenough.core.worker._flight import Flight
from pgenough.core.worker.outcomes import log

MAX_STUCK_BEATS: Final = 3
"""Heartbeats of one executor that may wait at once on connections that do not answer (see
``Heartbeat.run``)."""


class Heartbeat:
    def __init__(
        self, pool: AsyncConnectionPool, flight: Flight, cancel: Callable[[int], None]
    ) -> None:
        self.pool = pool
        self.flight = flight
        self.name = flight.name
        self._cancel = cancel
        """Called with each job in flight that an operator cancelled: the heartbeat finds
        them when the listener missed the cancel (down, reconnecting)."""

    async def run(self) -> None:
        """Every lease / 3, extend the leases of the jobs in flight.

        A beat that has no answer by the next one's time is left to fail on its own and
        the next one starts at once, on another connection: its connection may be dead
        without a word (a link stall on that flow, a NAT or firewall that forgot it), which
        TCP notices only at the network timeout (``db.with_network_timeout``), and that may
        be as long as what the lease has left after a heartbeat interval (with the
        defaults, 20 s against 30 - 10 s): waiting for it, a healthy worker would lose the
        claims of every job it runs. At most ``MAX_STUCK_BEATS`` wait at once (the whole
        link is down: more would only queue up behind them).
        """
        interval = self.flight.config.lease / 3
        stuck: set[asyncio.Task[None]] = set()
        try:
            while True:
                await asyncio.sleep(interval)
                while self.flight.inflight:
                    beat = asyncio.create_task(self.beat(), name=f"{self.name}:heartbeat-beat")
                    done, _ = await asyncio.wait({beat}, timeout=interval)
                    if done:
                        beat.result()
                        break
                    stuck.add(beat)
                    beat.add_done_callback(self._stuck_beat_ended(stuck))
                    log.warning(
                        "%s: heartbeat has no answer after %.1fs; extending the leases on"
                        " another connection (%d heartbeat(s) waiting on theirs)",
                        self.name,
                        interval,
                        len(stuck),
                    )
                    if len(stuck) >= MAX_STUCK_BEATS:
                        await asyncio.wait(stuck, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for beat in stuck:
                beat.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)

    def _stuck_beat_ended(
        self, stuck: set[asyncio.Task[None]]
    ) -> Callable[[asyncio.Task[None]], None]:
        def ended(beat: asyncio.Task[None]) -> None:
            stuck.discard(beat)
            if not beat.cancelled() and (exc := beat.exception()) is not None:
                log.error("%s: heartbeat failed: %r", self.name, exc)

        return ended

    async def beat(self) -> None:
        """Extend the leases of the jobs in flight (running, or a thread not yet returned)."""
        ids = list(self.flight.inflight)
        try:
            async with self.pool.connection() as conn:
                extended = await queue.extend_leases(
                    conn, ids, worker=self.name, lease=self.flight.config.lease
                )
        except psycopg.OperationalError as exc:
            log.warning("%s: heartbeat failed: %s", self.name, exc)
            return
        missing = [i for i in ids if i not in extended and i in self.flight.inflight]
        if not missing:
            return
        log.debug(
            "%s: heartbeat skipped %d job(s) (finishing, lost or cancelled): %s",
            self.name,
            len(missing),
            missing[:10],
        )
        try:
            async with self.pool.connection() as conn:
                cancelled = await queue.cancelled_among(conn, missing)
        except psycopg.OperationalError as exc:
            log.warning("%s: heartbeat failed: %s", self.name, exc)
            return
        for job_id in cancelled:
            self._cancel(job_id)
