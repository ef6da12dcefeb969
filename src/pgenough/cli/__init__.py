"""The ``pgenough`` command, and the toolkit an application's own command is built with.

``pgenough`` needs only the core (``pip install pgenough``); ``pgenough dashboard`` needs the
``dashboard`` extra and says so in one line without it. Each command reads options and
settings, calls one function, and turns pgenough's errors into a one-line message and a
non-zero exit: 1 for a runtime error, 2 for bad usage or configuration.

The other public names are that toolkit: an application built on pgenough (the plan
service's ``pgenough-plans``) makes its own typer app with them, so that its settings, errors,
exit codes, logging and ``--json`` behave as pgenough's (docs/operations/cli.md, "Your own
commands").
"""

from __future__ import annotations

from typing import NoReturn

from pgenough.cli import core, dashboard
from pgenough.cli.base import (
    BIGINT_MAX,
    app,
    common_options,
    console_script,
    database_url,
    err,
    extra_missing,
    fail,
    finite,
    load_settings,
    needs_extra,
    out,
    run,
    say_error,
    setup_logging,
    undecodable,
)
from pgenough.cli.inspecting import INSPECT_PANEL, JsonOption, inspect, now, show
from pgenough.cli.workers import (
    MetricsPortOption,
    ready_pool,
    serve_metrics,
    session_pool,
    worker_app,
)
from pgenough.jsonable import as_json

__all__ = [
    "BIGINT_MAX",
    "INSPECT_PANEL",
    "JsonOption",
    "MetricsPortOption",
    "app",
    "as_json",
    "common_options",
    "console_script",
    "database_url",
    "err",
    "extra_missing",
    "fail",
    "finite",
    "inspect",
    "load_settings",
    "main",
    "needs_extra",
    "now",
    "out",
    "ready_pool",
    "run",
    "say_error",
    "serve_metrics",
    "session_pool",
    "setup_logging",
    "show",
    "undecodable",
]

# Registered here, in the order `pgenough --help` lists them.
app.add_typer(worker_app, name="worker")
app.command("migrate")(core.migrate_cmd)
worker_app.command("run")(core.worker_run)
app.command("status", rich_help_panel=INSPECT_PANEL)(core.status_cmd)
app.command("failures", rich_help_panel=INSPECT_PANEL)(core.failures_cmd)
app.command("jobs", rich_help_panel=INSPECT_PANEL)(core.jobs_cmd)
app.command("job", rich_help_panel=INSPECT_PANEL)(core.job_cmd)
app.command("retry", rich_help_panel=INSPECT_PANEL)(core.retry_cmd)
app.command("discard", rich_help_panel=INSPECT_PANEL)(core.discard_cmd)
app.command("requeue-stuck", rich_help_panel=INSPECT_PANEL)(core.requeue_stuck_cmd)
app.command("pause", rich_help_panel=INSPECT_PANEL)(core.pause_cmd)
app.command("resume", rich_help_panel=INSPECT_PANEL)(core.resume_cmd)
app.command("limit", rich_help_panel=INSPECT_PANEL)(core.limit_cmd)
app.command("dashboard")(dashboard.dashboard_cmd)


def main() -> NoReturn:
    """The ``pgenough`` console script."""
    console_script(app)
