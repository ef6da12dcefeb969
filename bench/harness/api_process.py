"""``pgenough api --port P`` as its own process on a free port, and a plain HTTP GET."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from bench.harness.processes import plans_command

CACHE_TTL = "60"
READY_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Api:
    """``pgenough api --port P`` as its own process."""

    def __init__(
        self, url: str, log: IO[bytes], cwd: Path, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "PGENOUGH_API_CACHE_TTL": CACHE_TTL,
            **(env or {}),
        }
        env.pop("PGENOUGH_CONFIG", None)
        command = [plans_command(), "api", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=cwd)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgenough api exited {self.proc.returncode} before ready")
            with contextlib.suppress(OSError):
                if http_get(self.base + "/health/ready", 1.0)[0] == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError("pgenough api was not ready in time")

    def cache_counts(self) -> tuple[float, float]:
        _, body = http_get(self.base + "/metrics")
        found = {"hits": 0.0, "misses": 0.0}
        for line in body.decode().splitlines():
            m = re.match(r"pgenough_api_cache_(hits|misses)_total (\S+)", line)
            if m:
                found[m[1]] = float(m[2])
        return found["hits"], found["misses"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
