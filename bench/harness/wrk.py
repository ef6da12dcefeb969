"""``wrk`` against the API: its Lua scripts (fixed paths, hot ranges, random cold searches, a
fixed rate shared by every connection), one run of it (``run_wrk``) and its figures
(``Result``, ``show``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.api_process import Api, http_get
from bench.harness.report import down, up

CONNECTIONS = 64
FIXED_RATE = 1_000
PAGE = 50  # the page every wrk scenario asks for (/search's default before it sent everything)
OPEN_ENDED = 3600  # wrk's -d when it is stopped with its phase instead
HOT_RANGES = (
    ("2021-03-01T00:00:00Z", "2021-03-08T00:00:00Z"),
    ("2021-06-01T00:00:00Z", "2021-07-01T00:00:00Z"),
    ("2021-09-15T12:00:00Z", "2021-09-16T12:00:00Z"),
    ("2022-01-10T00:00:00Z", "2022-01-24T00:00:00Z"),
    ("2022-07-01T00:00:00Z", "2022-07-31T00:00:00Z"),
)
LUA_DONE = r"""
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"p50_us":%.0f,"p99_us":%.0f,"max_us":%.0f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""
LUA_FIXED = r"""
local paths = {@PATHS@}
local reqs = {}
local i = 0
function init(args)
  for k, p in ipairs(paths) do reqs[k] = wrk.format("GET", p) end
end
function request()
  i = i % #reqs + 1
  return reqs[i]
end
"""
LUA_COLD = r"""
local first = 1609459200  -- 2021-01-01T00:00:00Z
local span = 730 * 86400
function init(args)
  math.randomseed(tonumber(args[1]) or 1)
end
function request()
  local s = first + math.random(0, span - 1)
  local e = s + math.random(86400, 30 * 86400)
  local path = string.format("/search?starts_at=%s&ends_at=%s&limit=50&offset=%d",
    os.date("!%Y-%m-%dT%H:%M:%SZ", s), os.date("!%Y-%m-%dT%H:%M:%SZ", e),
    math.random(0, 1000))
  return wrk.format("GET", path)
end
"""
LUA_PACE = r"""
-- A fixed rate for all connections: every delay() (called between a response and the
-- connection's next request) reserves the next free 1/RATE-second slot on a shared schedule
-- (CLOCK_MONOTONIC through LuaJIT's FFI) and waits for it.
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk, bench_timespec *tp);
]]
local ts = ffi.new("bench_timespec")
local interval = 1000 / @RATE@
local next_at = 0
function delay()
  ffi.C.clock_gettime(1, ts)
  local now = tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  if next_at < now then next_at = now end
  next_at = next_at + interval
  return math.floor(next_at - now)
end
"""


@dataclass
class Result:
    name: str
    requests: int
    duration_s: float
    non2xx: int
    socket_errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    cache_hits: float
    cache_misses: float
    note: str = ""

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s

    @property
    def ok_rps(self) -> float:
        return (self.requests - self.non2xx) / self.duration_s


def hot_path(start: str, end: str) -> str:
    return f"/search?starts_at={start}&ends_at={end}&limit={PAGE}"


def lua_script(kind: str, rate: int | None) -> str:
    if kind == "trivial":
        body = LUA_FIXED.replace("@PATHS@", '"/health/live"')
    elif kind == "hot":
        paths = ", ".join(f'"{hot_path(s, e)}"' for s, e in HOT_RANGES)
        body = LUA_FIXED.replace("@PATHS@", paths)
    elif kind.startswith("/"):  # one fixed path
        body = LUA_FIXED.replace("@PATHS@", json.dumps(kind))
    else:
        body = LUA_COLD
    if rate is not None:
        body += LUA_PACE.replace("@RATE@", str(rate))
    return body + LUA_DONE


def run_wrk(
    api: Api,
    name: str,
    kind: str,
    duration: int | None,
    tmp: Path,
    seed: int,
    rate: int | None = None,
    connections: int = CONNECTIONS,
    cpus: frozenset[int] | None = None,
    stop_when: Callable[[], bool] | None = None,
) -> Result:
    """wrk for ``duration`` seconds or, with ``duration`` None, until ``stop_when()`` (then
    SIGINT, on which wrk still reports everything it measured); on ``cpus`` when given."""
    script = tmp / f"{re.sub(r'[^A-Za-z0-9@=.-]', '_', name)}-{seed}.lua"
    script.write_text(lua_script(kind, rate))
    if kind == "hot":  # steady state: each range cached before the clock starts
        for start, end in HOT_RANGES:
            http_get(api.base + hot_path(start, end))
    hits0, misses0 = api.cache_counts()
    seconds = duration if duration is not None else OPEN_ENDED
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "5s"]
    proc = subprocess.Popen(
        [*command, "-s", str(script), api.base, "--", str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus is not None else None,
    )
    if duration is None:
        assert stop_when is not None
        while not stop_when() and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=seconds + 60)
    if proc.returncode not in (0, -signal.SIGINT):
        raise RuntimeError(f"wrk exited {proc.returncode}: {err}")
    hits1, misses1 = api.cache_counts()
    line = next((x for x in out.splitlines() if x.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{out}{err}")
    data: dict[str, Any] = json.loads(line.removeprefix("WRKJSON "))
    return Result(
        name=name,
        requests=int(data["requests"]),
        duration_s=int(data["duration_us"]) / 1e6,
        non2xx=int(data["status"]),
        socket_errors=sum(int(data[k]) for k in ("connect", "read", "write", "timeout")),
        p50_ms=float(data["p50_us"]) / 1000,
        p99_ms=float(data["p99_us"]) / 1000,
        max_ms=float(data["max_us"]) / 1000,
        cache_hits=hits1 - hits0,
        cache_misses=misses1 - misses0,
    )


def show(r: Result) -> None:
    print(
        f"  {r.name:<26} rps {down(r.rps):>7}  2xx rps {down(r.ok_rps):>7}"
        f"  p50 {up(r.p50_ms, 2):>7} ms  p99 {up(r.p99_ms, 2):>8} ms  max {up(r.max_ms, 2):>8} ms"
        f"  non-2xx {r.non2xx:>6}  sock err {r.socket_errors}"
        f"  cache h/m {r.cache_hits:.0f}/{r.cache_misses:.0f}{r.note}",
        flush=True,
    )
