"""Child processes of the plan service's benchmarks: the ``pgenough`` command, the provider
simulator it serves snapshots from, and a command run under ``bench/_rusage.py`` so that its own
peak RSS, CPU time and RSS curve are measured (``run_measured``)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

SEED = 1
SIM_START_TIMEOUT = 60.0


class _Child(Protocol):
    def join(self, timeout: float | None = ...) -> None: ...
    def is_alive(self) -> bool: ...
    def terminate(self) -> None: ...


def stop_processes(procs: Iterable[_Child], wait: float = 30.0) -> None:
    """Let worker processes (``multiprocessing``) end on their own within ``wait`` seconds,
    then terminate whichever have not."""
    procs = list(procs)
    deadline = time.monotonic() + wait
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(5)


def plans_command() -> str:
    """The plan service's command (``pgenough-plans``: its workers, API and provider simulator)
    of this interpreter's environment."""
    beside = Path(sys.executable).with_name("pgenough-plans")
    if beside.exists():
        return str(beside)
    found = shutil.which("pgenough-plans")
    if found is None:
        raise SystemExit("the pgenough-plans command is not installed (make .venv/.installed-test)")
    return found


LAUNCHER = Path(__file__).resolve().parents[1] / "_rusage.py"


@dataclass
class Reaped:
    code: int
    wall_s: float
    maxrss_kib: int
    cpu_s: float
    rss_samples: list[tuple[float, int]] = field(default_factory=list)
    """``(seconds since spawn, VmRSS KiB)`` every 0.1 s."""


def reap(proc: subprocess.Popen[Any], started: float, timeout: float) -> Reaped:
    """Wait for ``proc`` with ``os.wait4``; kill it after ``timeout``. Its ``ru_maxrss`` is
    at least this process's RSS (see ``_rusage.py``): use ``run_measured`` for a worker."""
    timer = threading.Timer(timeout, lambda: _kill(proc.pid))
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return Reaped(proc.returncode, wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def run_measured(
    command: list[str], env: dict[str, str], cwd: Path, log: IO[bytes], timeout: float
) -> Reaped:
    """Run ``command`` under the small ``_rusage.py`` launcher, which reaps it with
    ``os.wait4`` and reports its own peak RSS, CPU time, wall time and RSS curve."""
    result = cwd / f"rusage-{uuid.uuid4().hex[:8]}.json"
    launcher = [sys.executable, str(LAUNCHER), str(result), str(timeout), *command]
    proc = subprocess.Popen(launcher, stdout=log, stderr=log, env=env, cwd=cwd)
    try:
        proc.wait(timeout + 30)
    finally:
        if proc.returncode is None:
            _kill(proc.pid)
            proc.wait()
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"the launcher failed ({proc.returncode}) for {command[:3]}")
    data = json.loads(result.read_text())
    result.unlink()
    return Reaped(
        code=int(data["code"]),
        wall_s=float(data["wall_s"]),
        maxrss_kib=int(data["maxrss_kib"]),
        cpu_s=float(data["utime_s"]) + float(data["stime_s"]),
        rss_samples=[(float(t), int(k)) for t, k in data["rss_samples"]],
    )


class Simulator:
    """``pgenough provider-sim`` as a child process, its stdout drained by a thread."""

    def __init__(self, plans: int, log: IO[bytes], env: dict[str, str], cwd: Path) -> None:
        command = [plans_command(), "provider-sim", "--plans", str(plans), "--port", "0"]
        self.proc = subprocess.Popen(
            [*command, "--seed", str(SEED)],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            cwd=cwd,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = self._wait_ready()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._lines.put(raw.decode(errors="replace"))
        self._lines.put(None)

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + SIM_START_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError("the provider simulator exited before it was ready")
            if line.startswith("provider simulator:"):
                return line.split()[2]  # "provider simulator: URL (N plans, seed S)"
        raise RuntimeError("the provider simulator did not print its URL in time")

    def stop(self) -> float:
        """Stop it (SIGINT, then SIGKILL); its CPU seconds."""
        if self.proc.returncode is not None:
            return 0.0
        self.proc.send_signal(signal.SIGINT)
        return reap(self.proc, time.perf_counter(), 15.0).cpu_s
