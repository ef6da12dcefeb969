"""The extension point: what an application adds to the dashboard, and nothing it copies.

An ``Extension`` brings, each optional:

- ``nav``: entries of the dashboard's top navigation (``Link``), after the dashboard's own;
- ``router``: routes, relative to the dashboard's root (an ``extension_router()``, whose
  errors become the dashboard's error pages); each page takes ``View`` (the login checked)
  and renders with the dashboard's base template and macros (``{% extends "base.html" %}``,
  ``{% from "_macros.html" import pill, jobs_table %}``);
- ``templates``: a directory of its templates, named ``<name>/<file>`` in ``View.render``
  (``plans/runs.html``), so that no extension shadows another's or the dashboard's;
- ``static``: a directory served at ``<root>/ext/<name>/`` (``static_url`` in templates);
- ``overview``: ``Section``s of the overview page, read with the queue's on every render and
  every live snapshot (their data under ``sections.<name>`` of the overview's JSON), drawn
  by a template and, live, by a script that registers a renderer with
  ``pgenoughDashboard.section(name, render)`` (``static/live.js``);
- ``channels``: NOTIFY channels whose messages refresh the live overview;
- ``job_link``: what a job belongs to in the application (a plan run's chunk job: its run),
  shown as a link in the jobs tables and on the job's page.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from fastapi import APIRouter

from pgenough.core import JobRecord
from pgenough.core.db import AsyncConn
from pgenough.dashboard.errors import DashboardConfigError, DashboardRoute

_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,39}")


@dataclass(frozen=True)
class Link:
    """A link to a page of the dashboard: ``path`` under its root (``/runs``); ``key``, the
    ``nav`` its pages render with, marks the navigation's entry active (default: the path)."""

    label: str
    path: str
    key: str = ""

    def __post_init__(self) -> None:
        if not self.path.startswith("/") or self.path.startswith("//"):
            raise DashboardConfigError(f"a dashboard link's path starts with one /: {self.path!r}")
        if not self.key:
            object.__setattr__(self, "key", self.path)


@dataclass(frozen=True)
class Section:
    """A section of the overview: ``read(conn, window)`` returns its data (dataclasses, lists,
    datetimes: what ``pgenough.cli.as_json`` turns into JSON), which ``template`` draws as
    ``section`` and the live overview hands to the renderer ``script`` registers."""

    name: str
    template: str
    read: Callable[[AsyncConn, float], Awaitable[Any]]
    script: str | None = None
    """A file of the extension's ``static`` directory, loaded on the overview."""


def extension_router() -> APIRouter:
    """A router for an extension's pages: outside any OpenAPI document, its errors shown as
    the dashboard's pages."""
    return APIRouter(include_in_schema=False, route_class=DashboardRoute)


@dataclass(frozen=True)
class Extension:
    """What an application adds to the dashboard (the module's docstring says each part)."""

    name: str
    nav: Sequence[Link] = ()
    router: APIRouter | None = None
    templates: Path | None = None
    static: Path | None = None
    overview: Sequence[Section] = ()
    channels: Sequence[str] = ()
    job_link: Callable[[JobRecord], Link | None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise DashboardConfigError(
                f"an extension's name is lower-case letters, digits, - and _: {self.name!r}"
            )
        for path in (self.templates, self.static):
            if path is not None and not path.is_dir():
                raise DashboardConfigError(f"extension {self.name}: {path} is not a directory")
        if self.overview and (self.templates is None):
            raise DashboardConfigError(
                f"extension {self.name}: overview sections need a templates directory"
            )
        if any(s.script for s in self.overview) and self.static is None:
            raise DashboardConfigError(
                f"extension {self.name}: an overview script needs a static directory"
            )
