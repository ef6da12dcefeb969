"""Tasks that fail, as ``pgenough worker run tests.helpers.failapp:app`` loads them: what a
failed attempt leaves in the logs, in ``jobs.errors`` and in the worker's final line."""

from __future__ import annotations

from pathlib import Path

from pgenough.core import App

QUEUE = "failing"

app = App()


@app.task(name="fail.once", queue=QUEUE, max_attempts=1)
async def fail_once(n: int) -> None:
    raise ValueError(f"no such order {n}")  # RAISE_LINE


@app.task(name="fail.ok", queue=QUEUE)
async def ok(n: int) -> None:
    pass


FILE = str(Path(__file__).resolve())
RAISE_LINE = next(
    number
    for number, text in enumerate(Path(FILE).read_text("utf-8").splitlines(), start=1)
    if text.strip().endswith("# RAISE_LINE")
)
"""The line of ``fail_once``'s raise, which its traceback must name."""
WHERE = f'File "{FILE}", line {RAISE_LINE}, in fail_once'
