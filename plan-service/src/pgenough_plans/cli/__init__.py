"""The ``pgenough-plans`` command: the plan service's workers, API, demo and inspection.

Built with pgenough's command toolkit (``pgenough.cli``): the same one-line errors, exit codes
(1 for a runtime error, 2 for bad usage or configuration), logging and ``--json``. The
queue's own commands (jobs, retries, dead letters, the dashboard) are ``pgenough``'s.
"""

from __future__ import annotations

from typing import NoReturn

from pgenough.cli import INSPECT_PANEL, console_script
from pgenough_plans.cli import ingest, servers
from pgenough_plans.cli.base import app, worker_app
from pgenough_plans.cli.migrating import migrate_cmd

__all__ = ["app", "main"]

# Registered here, in the order `pgenough-plans --help` lists them.
app.command("demo")(servers.demo)
app.command("migrate")(migrate_cmd)
app.add_typer(worker_app, name="worker")
worker_app.command("fetch")(ingest.worker_fetch)
worker_app.command("process")(ingest.worker_process)
app.command("api")(servers.api_cmd)
app.command("provider-sim")(servers.provider_sim)
app.command("status", rich_help_panel=INSPECT_PANEL)(ingest.status_cmd)
app.command("runs", rich_help_panel=INSPECT_PANEL)(ingest.runs_cmd)
app.command("run", rich_help_panel=INSPECT_PANEL)(ingest.run_cmd)
app.command("failures", rich_help_panel=INSPECT_PANEL)(ingest.failures_cmd)


def main() -> NoReturn:
    """The ``pgenough-plans`` console script."""
    console_script(app)
