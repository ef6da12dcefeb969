"""``manage.py reports_worker``: the shared app's worker until it is idle, on the project's
database. A STAND-IN (djtasks helper) for the djapp helper's ``manage.py pgenough worker
--until-idle``, which the tests switch to once it lands."""

import asyncio
from typing import Any

from django.core.management.base import BaseCommand
from django.db import connections
from psycopg.conninfo import make_conninfo

from pgenough.contrib.django import app, backend
from pgenough.core import WorkerConfig, open_pool


class Command(BaseCommand):
    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--batch-size", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        stats = asyncio.run(run_until_idle(options["concurrency"], options["batch_size"]))
        self.stdout.write(f"completed={stats.completed} failed={stats.failed}")


def conninfo(alias: str = "default") -> str:
    """Django's connection parameters for ``alias``, as a libpq conninfo string."""
    s = connections[alias].settings_dict
    return make_conninfo(
        dbname=s["NAME"],
        user=s["USER"] or None,
        password=s["PASSWORD"] or None,
        host=s["HOST"] or None,
        port=str(s["PORT"]) if s["PORT"] else None,
    )


async def run_until_idle(concurrency: int | None = None, batch_size: int | None = None) -> Any:
    pool = await open_pool(conninfo())
    try:
        config = WorkerConfig(batch_size=batch_size) if batch_size else None
        worker = app.worker(
            pool,
            queues=sorted({*app.queues, *backend.configured_queues()}),
            concurrency=concurrency,
            config=config,
        )
        return await worker.run(until_idle=True)
    finally:
        await pool.close()
