"""The plan service's part of pgenough's dashboard (``pgenough.dashboard``), served at ``/ui``
by ``pgenough-plans api`` (and ``demo``): an extension with the runs (``/ui/runs``), a run's
detail, the Providers section of the overview (with its "plans processed / min" chart) and a
link from each chunk job to its run; and a reader that puts the dashboard's read-only pages
on the API's read replicas (``reader.py``).

Everything else (the queue's pages, the login, CSRF, the read-only mode, the Host check, the
live overview) is the library's: ``plan_dashboard`` builds it with these.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from pgenough.core import JobRecord
from pgenough.dashboard import Dashboard, DashboardConfig, Extension, Link, Section
from pgenough_plans.api.replica import Replicas
from pgenough_plans.api.ui import pages
from pgenough_plans.api.ui.reader import replica_reader
from pgenough_plans.ingest import inspect
from pgenough_plans.ingest.events import RUN_CHANGED
from pgenough_plans.ingest.process import PLANS_CHANGED

HERE: Final = Path(__file__).resolve().parent
NAME: Final = "plans"

__all__ = ["NAME", "extension", "plan_dashboard"]


def run_link(job: JobRecord) -> Link | None:
    """A chunk job's run, as the dashboard links it."""
    run_id = inspect.chunk_run(job)
    return None if run_id is None else Link(f"#{run_id}", f"/runs/{run_id}", "runs")


def extension() -> Extension:
    """The plan service's pages, overview section and job links."""
    return Extension(
        NAME,
        nav=[Link("Runs", "/runs", "runs")],
        router=pages.router,
        templates=HERE / "templates",
        static=HERE / "static",
        overview=[Section("providers", "providers.html", inspect.providers_view, "providers.js")],
        channels=[RUN_CHANGED, PLANS_CHANGED],
        job_link=run_link,
    )


def plan_dashboard(
    config: DashboardConfig,
    database_url: str,
    replicas: Callable[[], Replicas | None] | None = None,
) -> Dashboard:
    """pgenough's dashboard with the plan service's extension; ``replicas``: the API's read
    replicas once it runs (None: the API has none), which its pages then read."""
    return Dashboard(
        config,
        database_url=database_url,
        extensions=[extension()],
        reader=None if replicas is None else replica_reader(replicas),
    )
