"""What a worker command's options mean, for every command that starts a worker:
``pgenough worker run`` and ``manage.py pgenough worker`` parse and bound them here, once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

MAX_CONCURRENCY: Final = 10_000
"""The most jobs or chunks a worker runs at once, per queue: the bound of every concurrency
setting and option (each may hold a database connection)."""
MAX_BATCH_SIZE: Final = 1000
"""The most jobs one claim takes (``--batch-size``, ``PGENOUGH_WORKER_BATCH_SIZE``, the
Django worker's ``BATCH_SIZE``): a claim and its acknowledgement carry every id in one
statement, and a batch task's call gets its items in one transaction."""


def parse_queues(values: Iterable[str]) -> dict[str, int | None]:
    """``NAME`` or ``NAME=CONCURRENCY`` each, as ``{name: concurrency or None}``; a
    ``ValueError`` saying what to write instead for a repeated name or a bad concurrency."""
    queues: dict[str, int | None] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not name or name in queues:
            raise ValueError(f"{value!r}: give each queue once, as NAME or NAME=N")
        if sep:
            if not (count.isascii() and count.isdigit()) or not 1 <= int(count) <= MAX_CONCURRENCY:
                raise ValueError(f"{value!r}: the concurrency must be 1 to {MAX_CONCURRENCY}")
            queues[name] = int(count)
        else:
            queues[name] = None
    return queues
