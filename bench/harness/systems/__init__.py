"""The queue systems the benchmarks drain, one module each (``ours``, ``raw``, ``pgqueuer``,
``procrastinate``, ``graphile``, ``nats``, ``rabbitmq``), and ``SYSTEMS``: per system, how to
set it up, load it, count what is left and clean up after a drain; which can run here."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass

from bench.harness.server import scalar
from bench.harness.systems.base import BROKERS, NATS_SYSTEMS, System
from bench.harness.systems.graphile import enqueue_graphile, graphile_missing, setup_graphile
from bench.harness.systems.nats import (
    NATS_URL,
    cleanup_nats,
    enqueue_nats,
    nats_connect,
    remaining_nats,
    setup_nats,
)
from bench.harness.systems.ours import enqueue_ours, setup_ours
from bench.harness.systems.pgqueuer import enqueue_pgqueuer, setup_pgqueuer
from bench.harness.systems.procrastinate import enqueue_procrastinate, setup_procrastinate
from bench.harness.systems.rabbitmq import (
    RABBITMQ_URL,
    cleanup_rabbitmq,
    enqueue_rabbitmq,
    rabbitmq_channel,
    remaining_rabbitmq,
    setup_rabbitmq,
)
from bench.harness.systems.raw import enqueue_raw, setup_raw


def broker_missing(system: System) -> str | None:
    """Why a broker cannot run here (None: it answers)."""
    module = "nats" if system in NATS_SYSTEMS else "aiormq"
    if importlib.util.find_spec(module) is None:
        return f"{module} not installed; pip install -e '.[bench]'"

    async def probe() -> None:
        if system in NATS_SYSTEMS:
            nc = await nats_connect()
            try:
                await nc.jetstream().account_info()
            finally:
                await nc.close()
        else:
            conn, _ = await rabbitmq_channel()
            await conn.close()

    aiormq_log = logging.getLogger("aiormq")
    level = aiormq_log.level
    aiormq_log.setLevel(logging.CRITICAL)  # it logs the refused connection it also raises
    try:
        asyncio.run(asyncio.wait_for(probe(), 10))
    except Exception as exc:  # any failure to answer means: skip it
        where = NATS_URL if system in NATS_SYSTEMS else RABBITMQ_URL.split("@")[-1]
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return f"no answer at {where}: {why}"
    finally:
        aiormq_log.setLevel(level)
    return None


def _nothing(url: str, name: str) -> None:
    pass


@dataclass(frozen=True)
class SystemOps:
    setup: Callable[[str], None]
    enqueue: Callable[[str, int, str], float]
    """Loads ``n`` jobs (into the broker stream or queue ``name``); returns the seconds."""
    remaining: Callable[[str, str], int]
    """Counts the jobs not done yet (must be 0 after a drain)."""
    database: str | None
    """PostgreSQL systems sharing a database share a schema and take turns on it; None for
    a broker, which gets a fresh stream or queue per drain (``cleanup`` drops it)."""
    cleanup: Callable[[str, str], None] = _nothing


def pg_ops(
    setup: Callable[[str], None],
    load: Callable[[str, int], float],
    remaining_sql: str,
    database: str,
) -> SystemOps:
    return SystemOps(
        setup,
        lambda url, n, name: load(url, n),
        lambda url, name: scalar(url, remaining_sql),
        database,
    )


OURS_LEFT = "SELECT count(*) FROM pgenough.jobs"
SYSTEMS: dict[System, SystemOps] = {
    "raw": pg_ops(setup_raw, enqueue_raw, "SELECT count(*) FROM raw_jobs", "raw"),
    "ours-batched": pg_ops(setup_ours, enqueue_ours, OURS_LEFT, "ours"),
    "ours-tx": pg_ops(setup_ours, enqueue_ours, OURS_LEFT, "ours"),
    "ours-batch-tx": pg_ops(setup_ours, enqueue_ours, OURS_LEFT, "ours"),
    "pgqueuer": pg_ops(
        setup_pgqueuer, enqueue_pgqueuer, "SELECT count(*) FROM pgqueuer", "pgqueuer"
    ),
    "procrastinate": pg_ops(
        setup_procrastinate,
        enqueue_procrastinate,
        "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
        "procrastinate",
    ),
    "graphile": SystemOps(
        setup_graphile,
        enqueue_graphile,
        lambda url, name: scalar(url, "SELECT count(*) FROM graphile_worker._private_jobs"),
        "graphile",
    ),
    "nats": SystemOps(setup_nats, enqueue_nats, remaining_nats, None, cleanup_nats),
    "nats-ackall": SystemOps(
        setup_nats,
        lambda url, n, name: enqueue_nats(url, n, name, ack_all=True),
        remaining_nats,
        None,
        cleanup_nats,
    ),
    "rabbitmq": SystemOps(
        setup_rabbitmq, enqueue_rabbitmq, remaining_rabbitmq, None, cleanup_rabbitmq
    ),
    "rabbitmq-multi": SystemOps(
        setup_rabbitmq, enqueue_rabbitmq, remaining_rabbitmq, None, cleanup_rabbitmq
    ),
}
BROKER_URLS: dict[System, str] = {
    "nats": NATS_URL,
    "nats-ackall": NATS_URL,
    "rabbitmq": RABBITMQ_URL,
    "rabbitmq-multi": RABBITMQ_URL,
}


def available_systems(selected: tuple[System, ...]) -> tuple[System, ...]:
    """The selected systems that can run here; every other one is printed as skipped."""
    found: list[System] = []
    for system in selected:
        why: str | None = None
        if system in ("pgqueuer", "procrastinate"):
            needs = ("pgqueuer", "asyncpg", "uvloop") if system == "pgqueuer" else (system,)
            missing = [m for m in needs if importlib.util.find_spec(m) is None]
            if missing:
                why = f"not installed ({', '.join(missing)}); pip install -e '.[bench]'"
        elif system == "graphile":
            why = graphile_missing()
        elif system in BROKERS:
            why = broker_missing(system)
        if why:
            print(f"skipped: {system} ({why})")
        else:
            found.append(system)
    return tuple(found)
