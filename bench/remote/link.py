"""The link of ``bench.remote``: a delaying TCP proxy (``tests/helpers/netproxy.py``) in its
own process between the workers and the server, and the round trips measured through it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import psycopg
from bench.harness.server import ROOT
from psycopg.conninfo import make_conninfo
from tests.helpers.netproxy import Counters


class Link:
    """A proxy process between the workers and the server, with ``rtt_ms`` of delay."""

    def __init__(self, target: str, rtt_ms: float) -> None:
        self.rtt_ms = rtt_ms
        argv = [
            sys.executable,
            "-m",
            "tests.helpers.netproxy",
            "--target",
            target,
            "--rtt-ms",
            f"{rtt_ms:g}",
            "--control",
        ]
        if rtt_ms > 0:
            argv.append("--select")  # its timers keep microseconds (epoll's and libuv's: ms)
        elif importlib.util.find_spec("uvloop") is not None:
            argv.append("--uvloop")  # the least cost per message
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            self.proc.kill()
            raise RuntimeError(f"the link's proxy did not start: {line!r}")
        host, _, port = line.split()[1].rpartition(":")
        self.host, self.port = host, int(port)
        self.loop = argv[-1].lstrip("-") if argv[-1] in ("--uvloop", "--select") else "asyncio"

    def url(self, direct: str) -> str:
        """``direct`` (a database URL) through the link."""
        return make_conninfo(direct, host=self.host, port=str(self.port))

    def counters(self) -> Counters:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        word, _, data = self.proc.stdout.readline().partition(" ")
        if word != "stats":
            raise RuntimeError(f"the link's proxy answered {word!r}")
        return Counters(**json.loads(data))

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def round_trip_times(url: str, samples: int) -> list[float]:
    """Seconds per ``SELECT 1`` on one connection (after 10 unmeasured)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(10):
            conn.execute("SELECT 1", prepare=False)
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            conn.execute("SELECT 1", prepare=False).fetchall()
            times.append(time.perf_counter() - start)
    return times
