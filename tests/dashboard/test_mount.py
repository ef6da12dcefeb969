"""The dashboard mounted in a user's application, at a prefix: in FastAPI (called
in-process, and on a real uvicorn) and in plain Starlette (on uvicorn), with the host's own
lifespan running the dashboard's. Every link, form, redirect, static file, cookie and the live
stream follow the mount; the host's own routes are left alone."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from pgenough.core import enqueue
from pgenough.dashboard import Dashboard
from tests.dashboard import scenes
from tests.dashboard.helpers import TOKEN, csrf_of, dashboard_of, html, ui_settings
from tests.dashboard.server import UiServer, sse
from tests.dashboard.test_actions import job_state
from tests.helpers.procs import ROOT

pytestmark = pytest.mark.db

PREFIX = "/queue"
LINK = re.compile(r'(?<![\w-])(?:href|action|src|formaction)="([^"]*)"')


def links(page: str) -> list[str]:
    """Every URL a page points at (but the inline favicon)."""
    return [u for u in LINK.findall(page) if not u.startswith("data:")]


def users_fastapi_app(dashboard: Dashboard) -> FastAPI:
    """A user's application, as docs/dashboard.md shows it."""
    app = FastAPI(lifespan=dashboard.lifespan)

    @app.get("/")
    async def home() -> dict[str, str]:
        return {"hello": "from the application"}

    app.mount(PREFIX, dashboard.app)
    return app


async def test_mounted_in_fastapi_every_link_and_cookie_follows_the_prefix(
    db: AsyncConnectionPool, database_url: str
) -> None:
    settings = ui_settings(database_url, ui_token=TOKEN, ui_actions=True)
    dashboard = dashboard_of(settings)
    app = users_fastapi_app(dashboard)
    dead = await scenes.dead_letters(db)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as c,
    ):
        assert (await c.get("/")).json() == {"hello": "from the application"}
        bare = await c.get(PREFIX)
        assert bare.status_code == 307 and bare.headers["location"].endswith(f"{PREFIX}/")
        # The login, at the mount.
        to_login = await c.get(f"{PREFIX}/failures")
        assert to_login.headers["location"] == f"{PREFIX}/login?next={PREFIX}/failures"
        form = html(await c.get(to_login.headers["location"]))
        assert f'action="{PREFIX}/login"' in form
        signed = await c.post(
            f"{PREFIX}/login",
            data={"csrf": csrf_of(form), "token": TOKEN, "next": f"{PREFIX}/failures"},
        )
        assert signed.status_code == 303 and signed.headers["location"] == f"{PREFIX}/failures"
        assert f"path={PREFIX}" in signed.headers["set-cookie"].lower()
        # Every page's every link, form and script under the mount.
        await scenes.periodic_tasks(db)
        pages = ("/", "/?window=6h&queue=billing", "/jobs", "/failures", f"/jobs/{dead[0]}")
        for path in (*pages, "/workers", "/periodic", "/nowhere"):
            response = await c.get(PREFIX + path)
            assert response.status_code == (404 if path == "/nowhere" else 200), path
            page = response.text
            found = links(page)
            stray = [u for u in found if not u.startswith(f"{PREFIX}/")]
            assert found and not stray, (path, stray)
            assert f'data-base="{PREFIX}"' in page
        assert (await c.get(f"{PREFIX}/static/live.js")).status_code == 200
        history = (await c.get(f"{PREFIX}/api/history", params={"window": "24h"})).json()
        assert history["data"]["window"] == "24h" and history["error"] is None
        # An action, CSRF-checked, redirects back under the mount.
        page = html(await c.get(f"{PREFIX}/failures"))
        back = f"{PREFIX}/failures?state=dead"
        response = await c.post(
            f"{PREFIX}/jobs/{dead[0]}/retry", data={"csrf": csrf_of(page), "next": back}
        )
        assert response.status_code == 303 and response.headers["location"] == back
        assert f"path={PREFIX}" in response.headers["set-cookie"].lower()  # the flash
        assert await job_state(db, dead[0]) == "ready"
        assert f"job {dead[0]} will run again now" in (await c.get(back)).text
        refused = await c.post(f"{PREFIX}/jobs/{dead[1]}/retry", data={"csrf": "forged"})
        assert refused.status_code == 403
        # A next outside the dashboard, even in the same application, is not followed.
        response = await c.post(
            f"{PREFIX}/jobs/{dead[1]}/retry", data={"csrf": csrf_of(page), "next": "/"}
        )
        assert response.headers["location"] == f"{PREFIX}/"
        out = await c.post(f"{PREFIX}/logout", data={"csrf": csrf_of(page)})
        assert out.headers["location"] == f"{PREFIX}/login"
        assert (await c.get(f"{PREFIX}/")).status_code == 303


@asynccontextmanager
async def _own_lifespan(app: Starlette) -> AsyncIterator[None]:
    """A user's own lifespan, running the dashboard inside it."""
    dashboard: Dashboard = app.state.the_dashboard
    app.state.ready = True
    async with dashboard.running():
        yield


async def _home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("home")


async def test_mounted_in_starlette_on_uvicorn_with_the_live_stream(
    db: AsyncConnectionPool, database_url: str
) -> None:
    settings = ui_settings(database_url, ui_actions=True, ui_tick=60.0)
    dashboard = dashboard_of(settings)
    app = Starlette(
        routes=[Route("/", _home), Mount(PREFIX, dashboard.app)], lifespan=_own_lifespan
    )
    app.state.the_dashboard = dashboard
    server = UiServer(settings, prefix=PREFIX, dashboard=dashboard)
    server.server.config.app = app
    with server:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            assert (await client.get("/")).text == "home"
            page = html(await client.get(f"{PREFIX}/"))
            assert f'<script src="{PREFIX}/static/live.js">' in page
            css = await client.get(f"{PREFIX}/static/ui.css")
            assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
            async with client.stream("GET", f"{PREFIX}/events") as stream:
                assert stream.headers["content-type"].startswith("text/event-stream")
                events = sse(stream)
                name, first = await anext(events)
                assert name == "overview" and first["queues"] == []
                async with db.connection() as conn:
                    job = await enqueue(conn, "send_mail", {"to": "ann"}, queue="mounted")
                async for _, data in events:
                    if [q["queue"] for q in data["queues"]] == ["mounted"]:
                        break
            assert job is not None
            failures = html(await client.get(f"{PREFIX}/failures"))
            response = await client.post(
                f"{PREFIX}/jobs/{job}/discard",
                data={"csrf": csrf_of(failures), "next": f"{PREFIX}/jobs"},
            )
            assert response.status_code == 303 and response.headers["location"] == f"{PREFIX}/jobs"
            assert await job_state(db, job) == "cancelled"
    assert app.state.ready and dashboard.state is not None and dashboard.state.feed.closed


async def test_the_documented_mount_works_as_written(
    db: AsyncConnectionPool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/dashboard.md's first example, run as it is written."""
    docs = (ROOT / "docs" / "dashboard.md").read_text("utf-8")
    example = re.findall(r"```python\n(.*?)```", docs, flags=re.DOTALL)[0]
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("PGENOUGH_UI_ALLOWED_HOSTS", "api")
    monkeypatch.delenv("PGENOUGH_CONFIG", raising=False)
    namespace: dict[str, object] = {}
    exec(compile(example, "docs/dashboard.md", "exec"), namespace)
    app = namespace["app"]
    assert isinstance(app, FastAPI)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as c,
    ):
        page = html(await c.get(f"{PREFIX}/"))
        assert f'href="{PREFIX}/jobs"' in page and "No jobs queued." in page
