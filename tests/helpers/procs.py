"""Start and watch helper processes (``tests/helpers/proc.py``) from tests."""

from __future__ import annotations

import asyncio
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Proc:
    """A helper process whose stdout lines can be awaited with a deadline."""

    def __init__(self, env: dict[str, str], mode: str, *args: str) -> None:
        self._start([sys.executable, "-m", "tests.helpers.proc", mode, *args], env)

    @classmethod
    def pgenough(cls, env: dict[str, str], *args: str, program: str = "pgenough") -> Proc:
        """``pgenough *args`` (or ``program``'s), its stderr (the log) among the lines
        ``expect`` waits for."""
        proc = cls.__new__(cls)
        command = str(Path(sys.executable).with_name(program))  # the installed entry point
        proc._start([command, *args], env, merge_stderr=True)
        return proc

    @classmethod
    def plans(cls, env: dict[str, str], *args: str) -> Proc:
        """``pgenough-plans *args``: the plan service's command."""
        return cls.pgenough(env, *args, program="pgenough-plans")

    def _start(self, argv: list[str], env: dict[str, str], merge_stderr: bool = False) -> None:
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        if not merge_stderr:
            threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def _pump_err(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr[-40:]) or "\n".join(self.lines[-40:])

    def expect(self, predicate: Callable[[str], bool] | str, timeout: float = 30.0) -> str:
        """Wait for the next line matching ``predicate`` (a prefix, or a function)."""
        match = predicate if callable(predicate) else (lambda s: s.startswith(predicate))
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no line matching {predicate!r}; stderr:\n{self.stderr}")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise EOFError(f"process exited ({self.popen.poll()}); stderr:\n{self.stderr}")
            self.lines.append(line)
            if match(line):
                return line

    def wait(self, timeout: float = 60.0) -> int:
        return self.popen.wait(timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)


WORKER_STARTED = re.compile(r"(worker-[0-9a-f]{12}): \d+ task\(s\); queues")
"""The line ``pgenough worker run`` logs once it serves; group 1 is the worker's name."""


def wait_for_file(path: Path, limit: float) -> bool:
    """Whether ``path`` exists within ``limit`` seconds (a blocking wait, for a thread)."""
    deadline = time.monotonic() + limit
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``condition`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


async def wait_until(
    condition: Callable[[], Awaitable[bool]], timeout: float = 30.0, what: str = "condition"
) -> None:
    """Await ``condition`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)
