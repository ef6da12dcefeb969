"""Run a command and write its exact resource usage as JSON (a helper of ``bench.ingest``).

    python bench/_rusage.py RESULT.json TIMEOUT COMMAND [ARG...]

Why a separate, small process: on Linux a child's ``ru_maxrss`` is at least the resident set of
the process it was forked from (``exec`` folds the pre-exec address space's high-water mark
into the process's ``maxrss``, and ``fork``/``vfork`` start from the parent's pages). The
benchmark holds up to a gigabyte of parsed records, so a worker spawned by it directly would
report the *benchmark's* size. Spawned from this stdlib-only launcher (~10 MB), the worker's
``ru_maxrss`` from ``os.wait4`` is its own peak.

Also samples the child's ``VmRSS`` every ``SAMPLE_EVERY`` seconds (the RSS curve), and kills
the child with SIGKILL after TIMEOUT seconds. SIGTERM/SIGINT are forwarded to the child.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from types import FrameType

SAMPLE_EVERY = 0.1


def _vmrss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    result_path, timeout, command = argv[0], float(argv[1]), argv[2:]
    started = time.perf_counter()
    pid = os.posix_spawnp(command[0], command, dict(os.environ))

    def forward(signum: int, frame: FrameType | None) -> None:
        os.kill(pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_EVERY):
            kib = _vmrss_kib(pid)
            if kib is not None:
                samples.append((round(time.perf_counter() - started, 3), kib))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    killer = threading.Timer(timeout, lambda: os.kill(pid, signal.SIGKILL))
    killer.start()
    try:
        _, status, usage = os.wait4(pid, 0)
    finally:
        killer.cancel()
        done.set()
    wall = time.perf_counter() - started
    sampler.join()
    code = os.waitstatus_to_exitcode(status)
    with open(result_path, "w") as out:
        json.dump(
            {
                "code": code,
                "wall_s": wall,
                "maxrss_kib": usage.ru_maxrss,
                "utime_s": usage.ru_utime,
                "stime_s": usage.ru_stime,
                "rss_samples": samples,
            },
            out,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
