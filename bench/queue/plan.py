"""What ``bench.queue`` runs: the systems selected (``--systems``, its aliases), the counted
drains per cell, and the (system, workers, batch) configurations in run order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import get_args

from bench.harness.systems.base import BROKERS, OURS, System

ALL_SYSTEMS: tuple[System, ...] = get_args(System)
SYSTEM_ALIASES: dict[str, tuple[System, ...]] = {
    "ours": OURS,
    "peers": ("pgqueuer", "procrastinate", "graphile"),
    "brokers": ("nats", "nats-ackall", "rabbitmq", "rabbitmq-multi"),
    "all": ALL_SYSTEMS,
}
"""``--systems`` names beside the systems' own."""
UNBATCHED: tuple[System, ...] = ("procrastinate", "graphile")
"""Systems without a batch size of ours to match: run once per worker count (key batch 0)."""
BATCH_ACKS: tuple[System, ...] = ("nats-ackall", "rabbitmq-multi")
"""The brokers' batch-acknowledge forms: one ack per batch, so run only at batches above 1."""
REFERENCE_BATCH = 100
"""The batch size of the targets, the peers' comparison and the plot."""
DRAINS = 3
"""Counted drains per cell (rounds of the matrix) by default; the median is reported."""


@dataclass(frozen=True)
class Plan:
    jobs: int
    """The first size of every cell (grown for a cell whose drain is shorter than min_drain_s)."""
    min_drain_s: float
    workers: tuple[int, ...]
    batches: tuple[int, ...]
    pgqueuer_batches: tuple[int, ...]
    procrastinate_workers: tuple[int, ...]
    latency_samples: int
    repeat: int
    systems: tuple[System, ...]
    """The systems that will run (selected and available)."""

    def configurations(self) -> Iterator[tuple[System, int, int]]:
        """(system, workers, batch) in run order: the pairs a ratio compares run side by side.
        Unbatched systems run under batch 0."""
        on = set(self.systems)
        graphile_batch = REFERENCE_BATCH if REFERENCE_BATCH in self.batches else None
        for batch in self.batches:
            for workers in self.workers:
                for system in ("raw", *OURS):
                    if system in on:
                        yield system, workers, batch
                if "graphile" in on and batch == graphile_batch:
                    yield "graphile", workers, 0
                if "pgqueuer" in on and batch in self.pgqueuer_batches:
                    yield "pgqueuer", workers, batch
                for system in BROKERS:
                    if system in on and (batch > 1 or system not in BATCH_ACKS):
                        yield system, workers, batch
        if "graphile" in on and graphile_batch is None:
            for workers in self.workers:
                yield "graphile", workers, 0
        if "pgqueuer" in on:
            for batch in self.pgqueuer_batches:
                if batch not in self.batches:
                    for workers in self.workers:
                        yield "pgqueuer", workers, batch
        if "procrastinate" in on:
            for workers in self.procrastinate_workers:
                yield "procrastinate", workers, 0


def parse_systems(spec: str) -> tuple[System, ...]:
    chosen: list[System] = []
    for word in (w.strip() for w in spec.split(",") if w.strip()):
        names: tuple[System, ...]
        if word in SYSTEM_ALIASES:
            names = SYSTEM_ALIASES[word]
        elif word in ALL_SYSTEMS:
            names = tuple(s for s in ALL_SYSTEMS if s == word)
        else:
            known = ", ".join((*ALL_SYSTEMS, *SYSTEM_ALIASES))
            raise SystemExit(f"--systems: unknown {word!r} (known: {known})")
        chosen.extend(n for n in names if n not in chosen)
    return tuple(s for s in ALL_SYSTEMS if s in chosen)
