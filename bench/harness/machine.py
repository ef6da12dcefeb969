"""Is the machine quiet enough to measure? A benchmark's figures are only as good as the CPU it
had: on this shared two-core machine another process's load is measured as the system's own,
and one capacity taken on a loaded machine spoils every rate derived from it.

``refuse_if_busy()`` at the start of a benchmark waits up to ``QUIET_WAIT`` seconds for the
machine to be quiet (at most ``QUIET_BUSY`` of its CPU time busy over half a second), and
refuses to start (exit 2) when it does not get quiet, unless ``PGENOUGH_BENCH_ALLOW_BUSY=1``:
then it starts, and says on its first line that the figures were taken on a busy machine.
``cpu_busy`` and ``wait_quiet`` are the measure itself, also taken before each drain by the
benchmarks that print it beside their figures.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Final

QUIET_BUSY: Final = 0.15
"""The busy CPU fraction above which a figure is flagged NOISY (and a benchmark refuses to
start)."""
QUIET_WAIT: Final = 60.0
"""Seconds a benchmark waits for the machine to get quiet before it refuses to start."""
ALLOW_BUSY: Final = "PGENOUGH_BENCH_ALLOW_BUSY"


def cpu_busy(seconds: float) -> float | None:
    """The machine's busy CPU fraction over the next ``seconds`` (Linux; None elsewhere)."""

    def snapshot() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    try:
        total0, idle0 = snapshot()
        time.sleep(seconds)
        total1, idle1 = snapshot()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(max_wait: float) -> float | None:
    """Wait (up to ``max_wait`` seconds) until nothing else keeps the CPUs busy; return the
    busy fraction last seen."""
    deadline = time.monotonic() + max_wait
    while True:
        busy = cpu_busy(0.5)
        if busy is None or busy <= QUIET_BUSY or time.monotonic() >= deadline:
            return busy


def fmt_busy(busy: float | None) -> str:
    if busy is None:
        return "busy ?"
    return f"busy {busy:4.0%}" + (" NOISY" if busy > QUIET_BUSY else "")


def refuse_if_busy(name: str, max_wait: float = QUIET_WAIT) -> None:
    """Start only on a quiet machine (see the module's docstring)."""
    busy = wait_quiet(max_wait)
    if busy is None or busy <= QUIET_BUSY:
        return
    if os.environ.get(ALLOW_BUSY) == "1":
        print(
            f"BUSY MACHINE: {busy:.0%} of the CPUs busy before {name} started ({ALLOW_BUSY}=1):"
            " every figure below is suspect",
            flush=True,
        )
        return
    sys.exit(
        f"{name}: the machine is busy ({busy:.0%} of the CPUs busy, after {max_wait:g} s of"
        f" waiting for at most {QUIET_BUSY:.0%}); figures taken now would be spoiled. Stop what"
        f" runs (a test suite, a helper) or set {ALLOW_BUSY}=1 to measure anyway, flagged."
    )
