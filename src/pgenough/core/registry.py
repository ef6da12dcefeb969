"""Live workers: each worker process registers itself in ``pgenough.workers`` at its start,
moves its heartbeat forward while it runs, and deletes its row when it stops. The dashboard
and ``pgenough status`` list them with the jobs each runs (``list_workers``); a worker that
died without stopping (kill -9, a lost host) shows as gone once its heartbeat is older than
``ALIVE_AFTER``, and the cleaner forgets it after ``GONE_RETENTION``.

The heartbeat here is the process's, for people to look at; a job's lease has its own
(``worker._executor``), which is what decides whether a claim is still held.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgenough.core._sql import PLAN_EACH_TIME, load
from pgenough.core.errors import first_line
from pgenough.core.service import Service
from pgenough.core.statements import Query, Steps, dual

log = logging.getLogger(__name__)
_Q = load("registry")

BEAT_INTERVAL: Final = 5.0
"""Seconds between a worker's heartbeats."""
ALIVE_AFTER: Final = 4 * BEAT_INTERVAL
"""A worker whose last heartbeat is older than this is shown as gone."""
GONE_RETENTION: Final = 3600.0
"""Seconds a gone worker stays listed before the cleaner forgets it."""
RUNNING_SHOWN: Final = 50
"""The jobs of a worker listed with it, at most (``WorkerInfo.running_count`` counts all)."""


@dataclass(frozen=True)
class RunningJob:
    """A job a worker holds now."""

    id: int
    queue: str
    kind: str
    attempts: int
    claimed_at: datetime | None


@dataclass(frozen=True)
class WorkerInfo:
    """A registered worker process, as ``list_workers`` reads it."""

    name: str
    host: str
    pid: int
    queues: list[str]
    started_at: datetime
    last_seen_at: datetime
    alive: bool
    """Its heartbeat is recent (within ``ALIVE_AFTER``); else it died without stopping."""
    seen_ago: float
    """Seconds since its last heartbeat, by the database's clock."""
    running_count: int
    """Jobs it holds now."""
    running: list[RunningJob] = field(default_factory=list)
    """The first ``RUNNING_SHOWN`` of them, oldest claim first."""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> WorkerInfo:
        jobs = [
            RunningJob(
                id=int(j["id"]),
                queue=str(j["queue"]),
                kind=str(j["kind"]),
                attempts=int(j["attempts"]),
                claimed_at=None
                if j["claimed_at"] is None
                else datetime.fromisoformat(j["claimed_at"]),
            )
            for j in row["running"]
        ]
        return cls(**{**row, "queues": list(row["queues"]), "running": jobs})


@dual
def list_workers() -> Steps[list[WorkerInfo]]:
    """Every registered worker, the live first, each with the jobs it runs."""
    result = yield Query(
        _Q["list_workers"],
        {"alive": ALIVE_AFTER, "jobs": RUNNING_SHOWN},
        prepare=PLAN_EACH_TIME,
    )
    columns = (
        "name",
        "host",
        "pid",
        "queues",
        "started_at",
        "last_seen_at",
        "alive",
        "seen_ago",
        "running_count",
        "running",
    )
    return [WorkerInfo.from_row(dict(zip(columns, row, strict=True))) for row in result.rows]


@dual
def forget_gone_workers(retention: float = GONE_RETENTION) -> Steps[int]:
    """Delete the rows of workers not seen for ``retention`` seconds; how many."""
    result = yield Query(_Q["forget_gone"], {"retention": retention}, prepare=PLAN_EACH_TIME)
    return int(result.rowcount)


class Registration(Service):
    """A worker process's row in ``pgenough.workers`` for as long as it runs: registered at
    ``start()``, its heartbeat every ``interval`` seconds, deleted at ``stop()``. A database
    that cannot be reached costs a warning, never the worker: it is only a listing."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        name: str,
        queues: Sequence[str],
        *,
        interval: float = BEAT_INTERVAL,
    ) -> None:
        self._pool = pool
        self._params = {
            "name": name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(queues),
        }
        self._interval = interval
        self.service_name = f"{name}:registry"
        self._failing = False

    async def _run(self, statement: str) -> None:
        try:
            async with self._pool.connection() as conn:
                await conn.execute(_Q[statement], self._params, prepare=PLAN_EACH_TIME)
        except psycopg.Error as exc:  # only a listing: log once per outage, carry on
            if not self._failing:
                log.warning(
                    "%s: could not update its row in pgenough.workers (%s)",
                    self._params["name"],
                    first_line(exc),
                )
            self._failing = True
        else:
            self._failing = False

    async def serve(self) -> None:
        await self._run("register")
        while True:
            await asyncio.sleep(self._interval)
            await self._run("beat")

    async def wait_stopped(self) -> None:
        await super().wait_stopped()
        await self._run("deregister")
