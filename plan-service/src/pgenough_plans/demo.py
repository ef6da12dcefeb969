"""``pgenough-plans demo``: the whole plan service in one process, on an embedded PostgreSQL.

A simulated provider (which misbehaves now and then, as real ones do: slow answers, 5xx, 429,
a truncated body, a reset connection), a fetch worker on an interval, process workers, and
the ``/search`` API. Each run is logged as it lands, so the retries and failed runs show while
``/search`` carries on unaffected. Ctrl-C stops everything cleanly; the data stays in the
embedded server's directory for the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import socket
import uuid
from dataclasses import dataclass
from typing import Final

from pgenough.core import Gap, WorkerConfig, migrate, open_pool, subscribe
from pgenough.dashboard import DashboardConfig
from pgenough.httpserver import base_url
from pgenough_plans.api.app import MIGRATIONS, create_app
from pgenough_plans.api.config import ApiConfig
from pgenough_plans.api.proxies import TrustedProxies
from pgenough_plans.api.server import ApiServer, uvicorn_config
from pgenough_plans.ingest.fetch import RunResult, fetch_loop
from pgenough_plans.ingest.process import PLANS_CHANGED, process_worker
from pgenough_plans.ingest.provider import ProviderConfig
from pgenough_plans.ingest.runs import RunStatus
from pgenough_plans.sim.server import SimServer

log = logging.getLogger("pgenough_plans.demo")

HOST: Final = "127.0.0.1"
"""Loopback only: the demo is for the machine it runs on."""

# What the simulated provider does to each fetch, and how often (weights).
FAULTS = {
    "ok": 70,
    "latency:2": 6,
    "503": 8,
    "429:1": 4,
    "truncate:0.5": 6,
    "reset:0.4": 6,
}


@dataclass(frozen=True)
class DemoConfig:
    plans: int = 20_000
    interval: float = 15.0
    seed: int = 1


def fault_schedule(rng: random.Random, n: int = 2000) -> list[str]:
    """The faults the simulated provider will inject, one per request, in order."""
    names, weights = zip(*FAULTS.items(), strict=True)
    schedule = rng.choices(names, weights=weights, k=n)
    schedule[0] = "ok"  # the first fetch fills /search
    return schedule


def _dashboard_line(base: str, ui: DashboardConfig | None) -> str:
    if ui is None:
        return ""
    mode = "actions enabled" if ui.actions else "read-only; PGENOUGH_UI_ACTIONS=1 to retry"
    login = ", needs PGENOUGH_UI_TOKEN" if ui.token is not None else ""
    return f"  dashboard: {base}/ui   ({mode}{login})\n"


def _describe(result: RunResult | None) -> str:
    if result is None:
        return "skipped (another fetcher holds the provider)"
    if result.status == RunStatus.FAILED:
        return f"run {result.run_id} FAILED: {result.reason}"
    return (
        f"run {result.run_id} {result.status}: {result.plans_staged} plans staged, "
        f"{result.plans_skipped} skipped, {result.bytes / 1e6:.1f} MB"
    )


async def run(
    api: ApiConfig,
    ui: DashboardConfig | None,
    proxies: TrustedProxies,
    config: DemoConfig,
    sock: socket.socket,
) -> int:
    """Run the demo until SIGINT/SIGTERM on ``api.database_url``, the API on ``sock``
    (``httpserver.listen(HOST, port)``: the caller binds it first, so that a busy port fails
    before anything starts)."""
    url = api.server_url()
    port = sock.getsockname()[1]
    pool = await open_pool(url, max_size=8, name="pgenough-demo")
    async with pool.connection() as conn:
        await migrate(conn, MIGRATIONS)
    sim = SimServer(plans=config.plans, seed=config.seed).start()
    sim.set_faults(fault_schedule(random.Random(config.seed)))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    server = ApiServer(uvicorn_config(create_app(api, ui), proxies, log_level="warning"))
    # The demo owns SIGINT/SIGTERM (they stop everything, in order); uvicorn must not take them.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    worker = process_worker(pool, WorkerConfig(concurrency=2, batch_size=1))

    async def on_result(result: RunResult | None) -> None:
        print(f"fetch  {_describe(result)}", flush=True)

    provider = ProviderConfig("fever-sim", sim.url, read_timeout=5.0, max_attempts=3)
    owner = f"demo-{uuid.uuid4().hex[:8]}"
    api_task = asyncio.create_task(server.serve(sockets=[sock]), name="api")
    while not server.started:  # uvicorn offers no event for this
        if api_task.done():
            print("error: the API did not start", flush=True)
            return 1
        await asyncio.sleep(0.05)
    base = base_url(HOST, port)
    print(
        f"\npgenough demo: the plan service, all in one process\n"
        f"  search: curl '{base}/search?starts_at=2021-01-01T00:00:00"
        f"&ends_at=2031-12-31T23:59:59&limit=3'\n"
        f"  API:    {base}/search   docs: {base}/docs   metrics: {base}/metrics\n"
        f"{_dashboard_line(base, ui)}"
        f"  provider (simulated; misbehaves now and then): {sim.url}\n"
        f"  a fetch every {config.interval:g}s, {config.plans} plans each; Ctrl-C to stop\n",
        flush=True,
    )
    tasks = [
        api_task,
        asyncio.create_task(worker.run(), name="process"),
        asyncio.create_task(
            fetch_loop(pool, [provider], config.interval, stop, owner=owner, on_result=on_result),
            name="fetch",
        ),
        asyncio.create_task(_print_processed(url), name="runs"),
    ]
    try:
        await stop.wait()
    finally:
        print("stopping...", flush=True)
        server.should_exit = True
        worker.stop()
        tasks[3].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        sim.stop()
        await pool.close()
    return 0


async def _print_processed(url: str) -> None:
    async with subscribe(url, PLANS_CHANGED) as sub:
        async for item in sub:
            if isinstance(item, Gap):
                continue
            with contextlib.suppress(ValueError, KeyError):
                info = json.loads(item.payload)
                print(
                    f"process run {info['run_id']} PROCESSED: {info['plans_written']} plans "
                    f"written, {info['rows_failed']} rows failed",
                    flush=True,
                )
