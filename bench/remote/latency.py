"""``bench.remote``'s add-to-start latency through the link: ours and the raw loop woken by
LISTEN/NOTIFY."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue as MPQueue
from multiprocessing.synchronize import Event as MPEvent
from typing import Any

import psycopg
from bench.harness.latency import (
    Enqueue,
    LatencyWorker,
    Timed,
    latency_worker_main,
    run_latency,
    single_enqueuer,
)
from bench.harness.systems.base import KIND, QUEUE
from bench.harness.systems.raw import raw_connect, raw_take
from bench.remote import LatencyKind

RAW_CHANNEL = "raw_jobs"
RAW_ENQUEUE = (
    "WITH job AS (INSERT INTO raw_jobs (queue, kind, payload) VALUES (%s, %s, %s) RETURNING id)"
    f" SELECT pg_notify('{RAW_CHANNEL}', '') FROM job"
)
"""The raw loop's enqueue for the latency test: one statement, its own transaction, and the
notification its listener wakes on."""


@dataclass
class Latency(Timed):
    rtt_ms: float = 0.0
    kind: LatencyKind = "ours"


def _raw_latency_worker_main(
    url: str, ready: MPEvent, stop: MPEvent, starts: MPQueue[tuple[int, float]]
) -> None:
    """The raw loop woken by LISTEN/NOTIFY: on each notification, ``raw_take`` until empty,
    reporting each job's start."""
    with raw_connect(url) as conn:
        conn.execute(f"LISTEN {RAW_CHANNEL}")
        ready.set()
        while not stop.is_set():
            # Out of the generator first: it holds the connection while it iterates.
            if not list(conn.notifies(timeout=0.2, stop_after=1)):
                continue
            while True:  # until a take comes back short (not one more, empty, round trip)
                rows = raw_take(conn, 10)
                for row in rows:
                    starts.put((int(row[3]["n"]), time.time()))
                if len(rows) < 10:
                    break


@contextlib.asynccontextmanager
async def raw_enqueuer(url: str) -> Any:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:

        def one(n: int) -> Awaitable[object]:
            return conn.execute(RAW_ENQUEUE, (QUEUE, KIND, json.dumps({"n": n})))

        yield one


def measure_latency(
    ctx: SpawnContext, urls: dict[LatencyKind, str], samples: int, rtt: float
) -> dict[LatencyKind, Latency]:
    """bench.harness.latency's ``run_latency``: ours by its latency worker, raw by its loop."""
    workers: dict[LatencyKind, LatencyWorker] = {
        kind: (latency_worker_main, ("ours", url))
        if kind == "ours"
        else (_raw_latency_worker_main, (url,))
        for kind, url in urls.items()
    }

    def enqueuers(kind: LatencyKind) -> contextlib.AbstractAsyncContextManager[Enqueue]:
        url = urls[kind]
        return single_enqueuer("ours", url) if kind == "ours" else raw_enqueuer(url)

    timings = run_latency(ctx, workers, enqueuers, samples)
    return {kind: Latency(*timed, rtt_ms=rtt, kind=kind) for kind, timed in timings.items()}
