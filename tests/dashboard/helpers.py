"""Helpers of the dashboard's tests: its settings on the test database, the dashboard
mounted in a host application (FastAPI or plain Starlette, at a prefix or at the root) and
called in-process, and what pages say."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

import httpx
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount
from starlette.types import ASGIApp

from pgenough.dashboard import Dashboard, Extension
from pgenough.settings import Settings

TOKEN: Final = "s3cret-token"
IN_PROCESS_HOST: Final = "api"
"""The host the in-process client calls, which the dashboard is told to answer to."""
PREFIX: Final = "/ui"

Pair = tuple[Dashboard, httpx.AsyncClient]


def ui_settings(database_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "ui_allowed_hosts": IN_PROCESS_HOST,
        "ui_tick": 0.5,
    }
    values.update(overrides)
    return Settings(**values)


def dashboard_of(settings: Settings, extensions: Sequence[Extension] = ()) -> Dashboard:
    assert settings.database_url is not None
    return Dashboard(
        settings.ui_config(), database_url=settings.database_url, extensions=extensions
    )


def host_app(
    dashboard: Dashboard,
    prefix: str = PREFIX,
    *,
    lifespan: bool = True,
    routes: Sequence[BaseRoute] = (),
) -> ASGIApp:
    """A Starlette application with ``routes`` and the dashboard mounted at ``prefix`` (the
    dashboard's own app at ``""``), running the dashboard's lifespan as its own unless told
    not to."""
    if not prefix:
        return dashboard.app
    return Starlette(
        routes=[*routes, Mount(prefix, dashboard.app)],
        lifespan=dashboard.lifespan if lifespan else None,
    )


@contextlib.asynccontextmanager
async def serving(
    settings: Settings, prefix: str = PREFIX, extensions: Sequence[Extension] = ()
) -> AsyncIterator[Pair]:
    """The dashboard running, mounted at ``prefix``, and a client that calls it in-process."""
    dashboard = dashboard_of(settings, extensions)
    async with dashboard.running():
        transport = httpx.ASGITransport(app=host_app(dashboard, prefix, lifespan=False))
        async with httpx.AsyncClient(
            transport=transport, base_url=f"http://{IN_PROCESS_HOST}"
        ) as client:
            yield dashboard, client


def html(response: httpx.Response, status: int = 200) -> str:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    return response.text


def text(page: str) -> str:
    """The page's visible text, roughly: tags dropped, whitespace squeezed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" (?:value|content)="([^"]+)"', page)
    assert match, "the page has no CSRF field"
    return match.group(1)
