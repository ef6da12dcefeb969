"""Live progress of the worker commands, on stderr, only for a person at a terminal.

``pgenough-plans worker fetch --once`` shows each provider's bytes and plans as its snapshot
streams; ``pgenough-plans worker process --until-idle`` shows the chunks left. Piped or redirected
output (and ``--json``) never sees a byte of it: the display exists only when stderr is an
interactive terminal, or when ``PGENOUGH_FORCE_PROGRESS=1`` asks for it (tests, recordings).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from pgenough_plans.ingest import fetch

FORCE_ENV = "PGENOUGH_FORCE_PROGRESS"
REFRESH = 0.25
"""Seconds between redraws of a display that follows a counter (no event marks a change)."""


def console() -> Console | None:
    """The stderr console to draw on, or None when nobody is watching."""
    if os.environ.get(FORCE_ENV) == "1":
        return Console(stderr=True, force_terminal=True, force_interactive=True, soft_wrap=True)
    # Both checks: rich also answers "terminal" for FORCE_COLOR (often set in CI for coloured
    # logs), where cursor movements would fill the log with redrawn bars.
    err = Console(stderr=True, soft_wrap=True)
    return err if sys.stderr.isatty() and err.is_interactive else None


@contextmanager
def _live(progress: Progress) -> Iterator[Progress]:
    """Run ``progress`` with log lines printed above it. A log handler writing straight to
    stderr would tear the display, so while it is on screen stderr handlers write through
    rich's proxy (``redirect_stderr``), which prints each line above the bars."""
    with progress:
        proxy = sys.stderr
        original: IO[str] | None = getattr(proxy, "rich_proxied_file", None)
        moved: list[logging.StreamHandler[Any]] = []
        if original is not None:
            for handler in logging.getLogger().handlers:
                if isinstance(handler, logging.StreamHandler) and handler.stream is original:
                    handler.setStream(proxy)
                    moved.append(handler)
        try:
            yield progress
        finally:
            for handler in moved:
                handler.setStream(original)


class FetchDisplay:
    """One line per provider: bytes downloaded, plans staged and skipped so far."""

    def __init__(self, console: Console, providers: Sequence[str]) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]fetch {task.description}"),
            TextColumn("{task.fields[mb]:>8.1f} MB"),
            TextColumn("{task.fields[staged]:>10,} plans staged"),
            TextColumn("{task.fields[skipped]:>7,} skipped"),
            TimeElapsedColumn(),
            console=console,
            redirect_stdout=False,
            redirect_stderr=True,
        )
        self._tasks = {
            name: self._progress.add_task(name, total=None, mb=0.0, staged=0, skipped=0)
            for name in providers
        }

    def update(self, provider: str, progress: fetch.Progress) -> None:
        """The ``on_progress`` callback of ``fetch_all``."""
        self._progress.update(
            self._tasks[provider],
            mb=progress.bytes / 1e6,
            staged=progress.staged,
            skipped=progress.skipped,
        )

    @contextmanager
    def shown(self) -> Iterator[FetchDisplay]:
        with _live(self._progress):
            yield self


class ChunkDisplay:
    """A bar of the chunks applied out of those claimable when the worker started."""

    def __init__(self, console: Console, total: int) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("chunks, {task.fields[left]:,} left, {task.fields[failed]:,} failed"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            redirect_stdout=False,
            redirect_stderr=True,
        )
        self._task: TaskID = self._progress.add_task("process", total=total, left=total, failed=0)
        self._total = total

    def update(self, completed: int, failed: int) -> None:
        # Runs sealed while we work add chunks nobody counted at the start: grow the total
        # rather than run past 100%.
        self._total = max(self._total, completed)
        self._progress.update(
            self._task,
            completed=completed,
            total=self._total,
            left=self._total - completed,
            failed=failed,
        )

    async def follow(self, counts: Callable[[], tuple[int, int]], work: asyncio.Task[Any]) -> None:
        """Redraw from ``counts()`` (completed, failed) until ``work`` ends. The worker has no
        event per chunk, so this reads its in-memory counters every ``REFRESH`` seconds."""
        with _live(self._progress):
            while not work.done():
                await asyncio.wait({work}, timeout=REFRESH)
                self.update(*counts())
