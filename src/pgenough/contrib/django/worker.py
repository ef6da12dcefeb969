"""``manage.py pgenough worker``'s work, apart from its options: the queues it serves, the
schema it needs, and the worker run on the ``PGENOUGH["DATABASE"]`` alias.

The worker runs the shared app (``registry.app``), whose tasks every installed app's
``tasks.py`` registered when Django started (``apps.PgenoughConfig.ready``), and the
django.tasks backend's one task when ``pgenough.contrib.django.backend`` is there.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from pgenough.contrib.django import db, schema
from pgenough.contrib.django.registry import app
from pgenough.core import PgenoughError
from pgenough.core.migrations import CORE, available, schema_version
from pgenough.core.worker import WorkerConfig, WorkerStats


class SchemaNotMigrated(PgenoughError):
    """The database lacks (part of) pgenough's schema: ``manage.py migrate`` creates it."""


@dataclass(frozen=True)
class WorkerRun:
    alias: str
    queues: Mapping[str, int | None] | None
    """None: ``default_queues()``."""
    concurrency: int
    config: WorkerConfig
    until_idle: bool = False


def backend_queues() -> list[str]:
    """The queues of the django.tasks backend's ``TASKS`` entries, importing the backend so
    its task is registered on the shared app; none where the backend is not installed."""
    try:
        backend = importlib.import_module("pgenough.contrib.django.backend")
    except ModuleNotFoundError as exc:
        if exc.name != "pgenough.contrib.django.backend":
            raise
        return []
    return list(backend.configured_queues())


def default_queues() -> dict[str, int | None]:
    """Every queue of the project's tasks and of the django.tasks backend."""
    return dict.fromkeys(sorted({*app.queues, *backend_queues()}))


async def check_schema(pool: AsyncConnectionPool, alias: str) -> None:
    async with pool.connection() as conn:
        for track in (CORE, *schema.MIGRATIONS):
            have = await schema_version(conn, track.track)
            want = available(track)[-1].version
            if have < want:
                raise SchemaNotMigrated(
                    f"database {alias!r} has pgenough's {track.track} schema at version {have},"
                    f" this pgenough needs {want}: run `manage.py migrate`"
                )


async def run(spec: WorkerRun, say: Callable[[str], None]) -> WorkerStats:
    """Serve ``spec``'s queues until stopped (SIGTERM, SIGINT) or, with ``until_idle``,
    until nothing is left to run."""
    name = f"worker-{uuid.uuid4().hex[:12]}"
    queues = spec.queues if spec.queues is not None else default_queues()
    pool = await db.open_worker_pool(spec.alias, name, max_size=4)
    try:
        await check_schema(pool, spec.alias)
        worker = app.worker(
            pool, queues=queues or None, concurrency=spec.concurrency, name=name, config=spec.config
        )
        # As `pgenough worker run`: a connection for each running job, each queue's claim
        # loop and heartbeat, and the process's duties.
        needed = sum(c.concurrency for c in worker.configs) + 2 * len(worker.configs) + 3
        await pool.resize(pool.min_size, max(pool.max_size, needed))
        say(
            f"{name}: {len(app.tasks)} task(s); queues "
            + ", ".join(f"{c.queue} ({c.concurrency})" for c in worker.configs)
            + f"; batch size {spec.config.batch_size}"
        )
        stats = await worker.run(until_idle=spec.until_idle, handle_signals=True)
        say(f"{name} stopped: {stats.summary()}")
        return stats
    finally:
        await pool.close()
