"""The task module bench.boundary deploys: ``pgenough worker run bench._boundary_tasks:app``."""

from __future__ import annotations

from pgenough.core import App

QUEUE = "boundary"

app = App()


@app.task(queue=QUEUE)
async def noop(n: int) -> None:
    """Does nothing: the benchmark measures the queue, not the work."""
