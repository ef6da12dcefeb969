"""The shared app's worker in this process, until idle, on the project's (test) database:
what ``manage.py pgenough worker --until-idle`` runs, called from Django tests."""

from typing import Any

from pgenough.contrib.django import app, db
from pgenough.contrib.django.worker import default_queues
from pgenough.core import WorkerConfig, open_pool


async def run_until_idle(concurrency: int | None = None, batch_size: int | None = None) -> Any:
    pool = await open_pool(db.conninfo())
    try:
        config = WorkerConfig(batch_size=batch_size) if batch_size else None
        worker = app.worker(pool, queues=default_queues(), concurrency=concurrency, config=config)
        return await worker.run(until_idle=True)
    finally:
        await pool.close()
