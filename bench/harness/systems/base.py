"""What every queue system of the benchmarks shares: the queue and kind of the no-op jobs,
the systems' names, and ``DrainSpec``, what one drain worker process is given (its batch,
handlers and connections per system)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

QUEUE = "default"
KIND = "noop"
BARRIER_TIMEOUT = 120.0
OURS_POOL_SIZE = 10
PROCRASTINATE_CONCURRENCY = 50
PROCRASTINATE_POOL_SIZE = 10
System: TypeAlias = Literal[
    "raw",
    "ours-batched",
    "ours-tx",
    "ours-batch-tx",
    "pgqueuer",
    "procrastinate",
    "graphile",
    "nats",
    "nats-ackall",
    "rabbitmq",
    "rabbitmq-multi",
]
OURS: tuple[System, ...] = ("ours-batched", "ours-tx", "ours-batch-tx")
BROKERS: tuple[System, ...] = ("nats", "nats-ackall", "rabbitmq", "rabbitmq-multi")
NATS_SYSTEMS: tuple[System, ...] = ("nats", "nats-ackall")
GRAPHILE_CONCURRENCY = 24
"""Keep in step with bench/graphile/worker.js (printed in the plan)."""
GRAPHILE_POOL_SIZE = 24
"""pg.Pool ``max`` per graphile process (lazy: it opens the few it uses, 3 measured)."""
BROKER_PUBLISH_WINDOW = 1000
"""Publishes in flight (awaiting their ack/confirm) while loading a broker."""


@dataclass(frozen=True)
class DrainSpec:
    """What one drain worker process needs (pickled to it)."""

    system: System
    url: str
    batch: int
    concurrency: int
    """Handlers at once per process (ours, Procrastinate)."""
    pool_size: int
    """Connections per process (ours, Procrastinate, graphile's pool maximum)."""
    name: str = ""
    """The broker's stream or queue of this drain."""

    @classmethod
    def default(
        cls, system: System, url: str, batch: int, workers: int, budget: int, name: str = ""
    ) -> DrainSpec:
        """``budget``: the connections the server can give all ``workers`` processes."""
        per_process = max(2, budget // workers)
        if system == "procrastinate":
            pool = min(PROCRASTINATE_POOL_SIZE, per_process)
            return cls(system, url, 1, PROCRASTINATE_CONCURRENCY, pool, name)
        if system == "graphile":
            return cls(system, url, 0, GRAPHILE_CONCURRENCY, GRAPHILE_POOL_SIZE, name)
        return cls(system, url, batch, max(10, batch), min(OURS_POOL_SIZE, per_process), name)


def broker_handler(body: bytes) -> None:
    """The brokers' no-op handler."""
