"""Helpers of the API tests: apps on the test database, plans written directly, a uvicorn
server on a thread, ``pgenough-plans api`` as its own process, and (from tests/helpers/netproxy.py)
a TCP proxy that can cut the API off its database."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

from pgenough.core import publish
from pgenough_plans.api import create_app
from pgenough_plans.api.deps import ApiState
from pgenough_plans.api.proxies import TrustedProxies
from pgenough_plans.api.server import ApiServer, uvicorn_config
from pgenough_plans.ingest.store import plan_uuid
from pgenough_plans.settings import PlanSettings
from tests.helpers.netproxy import Proxy as Proxy  # its old home: still importable from here
from tests.helpers.netproxy import free_port
from tests.helpers.procs import ROOT

PROVIDER = "test"
IN_PROCESS_HOST = "api"
"""The host ``serving``'s client calls, which the dashboard is told to answer to."""


def api_settings(database_url: str, **overrides: Any) -> PlanSettings:
    """PlanSettings for an app on the test database; the cache is off unless asked for."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "api_cache_ttl": 0.0,
        "ui_allowed_hosts": IN_PROCESS_HOST,
    }
    values.update(overrides)
    return PlanSettings(**values)


def api_app(settings: PlanSettings) -> FastAPI:
    """The app for ``settings``, as ``pgenough-plans api`` builds it (``database_url`` set)."""
    ui = settings.ui_config() if settings.ui_enabled else None
    return create_app(settings.api_config(), ui)


def state(app: FastAPI) -> ApiState:
    api: ApiState = app.state.api
    return api


@contextlib.asynccontextmanager
async def serving(settings: PlanSettings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app with its lifespan running, and a client that calls it in-process."""
    app = api_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url=f"http://{IN_PROCESS_HOST}"
        ) as client:
            yield app, client


@dataclass(frozen=True)
class Plan:
    plan_id: str
    starts_at: str
    ends_at: str | None
    """None: a plan without an end."""
    title: str = "A plan"
    min_price: str | None = "10.00"
    """None (with max_price): a plan without priced zones."""
    max_price: str | None = "20.00"
    ever_online: bool = True
    base_plan_id: str = "b1"

    @property
    def id(self) -> str:
        return str(plan_uuid(PROVIDER, self.base_plan_id, self.plan_id))


INSERT = """
INSERT INTO plans.plans (provider, base_plan_id, plan_id, id, title, sell_mode, starts_at,
                            ends_at, sold_out, min_price, max_price, ever_online)
VALUES (%(provider)s, %(base)s, %(plan)s, plans.plan_uuid(%(provider)s, %(base)s, %(plan)s),
        %(title)s, 'online', %(starts)s, %(ends)s, false, %(min)s, %(max)s, %(online)s)
"""


def insert_params(plans: Iterable[Plan]) -> list[dict[str, Any]]:
    """``INSERT``'s parameters for each of ``plans``."""
    return [
        {
            "provider": PROVIDER,
            "base": p.base_plan_id,
            "plan": p.plan_id,
            "title": p.title,
            "starts": p.starts_at,
            "ends": p.ends_at,
            "min": None if p.min_price is None else Decimal(p.min_price),
            "max": None if p.max_price is None else Decimal(p.max_price),
            "online": p.ever_online,
        }
        for p in plans
    ]


async def add_plans(pool: AsyncConnectionPool, *plans: Plan, notify: bool = False) -> None:
    """Write plans as a process worker would (optionally announcing them on plans_changed)."""
    async with pool.connection() as conn, conn.transaction():
        async with conn.cursor() as cur:
            await cur.executemany(INSERT, insert_params(plans))
        if notify:
            await publish(conn, "plans_changed", '{"test": true}')


def events(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["error"] is None
    result: list[dict[str, Any]] = body["data"]["events"]
    return result


class ServerThread:
    """``app`` on a real uvicorn server (the one ``pgenough-plans api`` runs, configured as it
    configures it), on a thread with its own event loop."""

    def __init__(
        self, app: FastAPI, proxies: TrustedProxies | None = None, http: str = "auto"
    ) -> None:
        self.app = app
        self.port = free_port()
        self.server = ApiServer(
            uvicorn_config(
                app,
                proxies or TrustedProxies(),
                host="127.0.0.1",
                port=self.port,
                loop="asyncio",
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=2,
                http=http,
            )
        )
        self.thread = threading.Thread(target=self.server.run, name="api-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)


PGENOUGH = str(Path(sys.executable).with_name("pgenough-plans"))
"""The installed entry point, as a user runs it."""


def api_start_error(env: dict[str, str]) -> str:
    """What ``pgenough-plans api`` says when its settings stop it before it serves: exit 2 and one
    line on stderr, returned."""
    result = subprocess.run(
        [PGENOUGH, "api", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr  # a configuration error, as every other
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@contextlib.contextmanager
def api_process(env: dict[str, str], *args: str, timeout: float = 60.0) -> Iterator[str]:
    """``pgenough-plans api`` as its own process on a free port, until it stops (SIGTERM: a graceful
    stop, exit 0 after the lifespan's shutdown); yields its base URL once ``/health/ready``
    says 200."""
    port = free_port()
    server = subprocess.Popen(
        [PGENOUGH, "api", "--port", str(port), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"pgenough-plans api exited: {server.communicate()[1]}")
            if time.monotonic() > deadline:
                raise TimeoutError("pgenough-plans api did not become ready")
            try:
                if httpx.get(base + "/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield base
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=30)
    # A graceful stop is a success (uvicorn alone would re-raise the signal: -15).
    assert server.returncode == 0, stderr
    assert "Application shutdown complete" in stderr, stderr
