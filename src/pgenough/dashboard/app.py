"""``Dashboard``: the queue's dashboard as an ASGI app, mountable under any prefix.

``Dashboard(config, database_url=..., extensions=[...], reader=...)`` builds ``.app``, its own
FastAPI application: the pages of ``pages.py``, the actions of ``actions.py``, the login of
``login.py`` and each extension's routes, then a 404 page for any other path; its static files
and each extension's; its error pages; behind its host check (``hosts.py``) and its request
ids (``errors.RequestIds``). Served on its own (``pgenough dashboard``: the app at the root
of its server, its lifespan run by uvicorn), or mounted in an application::

    dashboard = Dashboard(settings.ui_config(), database_url=url)
    app = FastAPI(lifespan=dashboard.lifespan)
    app.mount("/queue", dashboard.app)

Every link, redirect, form action, static URL, live stream URL and cookie path follows the
mount's ``root_path``. Starlette runs no lifespan of a mounted app: the host runs the
dashboard's, as its own (``lifespan=dashboard.lifespan``) or inside its own
(``async with dashboard.running(): ...``). Without it every page is a 503 page that says so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import jinja2
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException

from pgenough.core import JobRecord
from pgenough.dashboard import actions, format, login, pages
from pgenough.dashboard.config import DashboardConfig
from pgenough.dashboard.errors import (
    DashboardConfigError,
    DashboardError,
    ErrorCode,
    RequestIds,
    handler,
    not_found,
)
from pgenough.dashboard.extension import Extension, Link, extension_router
from pgenough.dashboard.hosts import DashboardGuard
from pgenough.dashboard.reader import ReaderFactory
from pgenough.dashboard.state import DashboardState, running
from pgenough.dashboard.views import Pages

HERE: Final = Path(__file__).resolve().parent

fallback = extension_router()


@fallback.api_route("/{rest:path}", methods=["GET", "HEAD", "POST"])
async def unknown(rest: str) -> Response:
    raise not_found(f"the dashboard has no page /{rest}")


def _templates(extensions: Sequence[Extension]) -> Jinja2Templates:
    own = jinja2.FileSystemLoader(HERE / "templates")
    theirs = jinja2.PrefixLoader(
        {e.name: jinja2.FileSystemLoader(e.templates) for e in extensions if e.templates}
    )
    env = jinja2.Environment(loader=jinja2.ChoiceLoader([own, theirs]), autoescape=True)
    env.filters.update(format.FILTERS)
    links = [e.job_link for e in extensions if e.job_link is not None]

    def job_link(job: JobRecord) -> Link | None:
        """What ``job`` belongs to in the application, as the first extension that knows."""
        for link_of in links:
            found = link_of(job)
            if found is not None:
                return found
        return None

    env.globals["job_link"] = job_link
    env.globals["has_job_links"] = bool(links)
    env.globals["overview_sections"] = [
        {
            "name": s.name,
            "template": f"{e.name}/{s.template}",
            "script": None if s.script is None else f"/ext/{e.name}/{s.script}",
        }
        for e in extensions
        for s in e.overview
    ]
    return Jinja2Templates(env=env)


class Dashboard:
    """The queue's dashboard (the module's docstring shows it mounted).

    ``config``: ``Settings.ui_config()``; ``database_url``: the database it shows (its
    ``config.database_url``, ``PGENOUGH_UI_DATABASE_URL``, wins when set: a role of its
    own); ``extensions``: what an application adds (``Extension``); ``reader``: where its
    read-only pages read (``reader.py``; default, its own pool).
    """

    def __init__(
        self,
        config: DashboardConfig,
        *,
        database_url: str,
        extensions: Sequence[Extension] = (),
        reader: ReaderFactory | None = None,
    ) -> None:
        names = [e.name for e in extensions]
        if len(set(names)) != len(names):
            raise DashboardConfigError(f"extension names must be unique: {names}")
        self.config = config
        self.database_url = config.database_url or database_url
        self.extensions = tuple(extensions)
        self.reader = reader
        self.state: DashboardState | None = None
        """What the dashboard holds while its lifespan runs (None before: pages say so)."""
        navigation = [*pages.NAVIGATION, *(link for e in extensions for link in e.nav)]
        self.pages = Pages(_templates(self.extensions), navigation)
        self.app = self._build()

    def _build(self) -> FastAPI:
        app = FastAPI(
            title="pgenough dashboard",
            openapi_url=None,
            docs_url=None,
            redoc_url=None,
            redirect_slashes=False,
            lifespan=self.lifespan,
        )
        app.state.dashboard = self
        # Mounted before the routes: the fallback's 404 page would shadow them otherwise.
        app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
        for extension in self.extensions:
            if extension.static is not None:
                app.mount(f"/ext/{extension.name}", StaticFiles(directory=extension.static))
        for part in (pages.router, actions.router, login.router):
            app.include_router(part)
        for extension in self.extensions:
            if extension.router is not None:
                app.include_router(extension.router)
        app.include_router(fallback)  # last: it answers every path the others do not
        render = handler(self.pages.templates)
        app.add_exception_handler(DashboardError, render)
        app.add_exception_handler(HTTPException, _http_error(render))
        app.add_exception_handler(RequestValidationError, _invalid(render))
        app.add_middleware(DashboardGuard, hosts=self.config.allowed_hosts, render=render)
        app.add_middleware(RequestIds)
        return app

    @asynccontextmanager
    async def running(self) -> AsyncIterator[DashboardState]:
        """Run the dashboard (its pool, reader, live feed) for as long as the block lasts:
        what a host application's lifespan does with it."""
        sections = [s for e in self.extensions for s in e.overview]
        channels = [c for e in self.extensions for c in e.channels]
        async with running(
            self.config,
            self.database_url,
            reader=self.reader,
            sections=sections,
            channels=channels,
        ) as state:
            self.state = state
            yield state

    def lifespan(self, app: Any) -> AbstractAsyncContextManager[None]:
        """The dashboard's lifespan, for ``FastAPI(lifespan=dashboard.lifespan)`` (or
        Starlette's): ``running`` for an app's lifetime."""
        return self._lifespan()

    @asynccontextmanager
    async def _lifespan(self) -> AsyncIterator[None]:
        async with self.running():
            yield

    def end_streams(self) -> None:
        """End every live stream now, and refuse new ones: for a server that waits for open
        responses before it runs the lifespan's shutdown (uvicorn does), when it stops."""
        if self.state is not None:
            self.state.feed.close()


Handler = Callable[[Request, Exception], Coroutine[Any, Any, Response]]


def _http_error(render: Handler) -> Handler:
    """Starlette's own errors (a method a route does not take) as the dashboard's pages."""

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code: ErrorCode = "NOT_FOUND" if exc.status_code == 404 else "INVALID_REQUEST"
        headers = dict(exc.headers or {})
        error = DashboardError(exc.status_code, code, str(exc.detail), headers=headers)
        return await render(request, error)

    return handle


def _invalid(render: Handler) -> Handler:
    """A parameter FastAPI refuses, as the dashboard's 400 page."""

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "query")
        error = DashboardError(
            400, "INVALID_REQUEST", f"{where}: {first.get('msg')}", "Bad request"
        )
        return await render(request, error)

    return handle
