"""The ``pgenough`` command. Each command reads options and settings, calls one function, and
turns pgenough's errors into a one-line message and a non-zero exit.

This module imports only the messaging core and what its commands need, so that
``pgenough`` works where only the core is installed (``pip install pgenough``). The plan
service, the API and uvicorn are imported by the commands that use them, inside
``_needs_service``: without the ``service`` extra such a command says in one line what to
install.
"""

from __future__ import annotations

import os
import sys

import typer

# typer (0.29) vendors click: its usage errors are these classes, not click's.
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

from pgenough.cli import core, plans, servers
from pgenough.cli.base import BIGINT_MAX, _run, _say_error, _undecodable, app
from pgenough.cli.inspecting import INSPECT_PANEL
from pgenough.cli.workers import worker_app

__all__ = ["BIGINT_MAX", "_run", "app", "main"]

# Registered here, in the order `pgenough --help` lists them.
app.add_typer(worker_app, name="worker")
app.command("migrate")(core.migrate_cmd)
app.command()(servers.demo)
worker_app.command("run")(core.worker_run)
worker_app.command("fetch")(plans.worker_fetch)
worker_app.command("process")(plans.worker_process)
app.command("api")(servers.api_cmd)
app.command("provider-sim")(servers.provider_sim)
app.command("status", rich_help_panel=INSPECT_PANEL)(plans.status_cmd)
app.command("runs", rich_help_panel=INSPECT_PANEL)(plans.runs_cmd)
app.command("run", rich_help_panel=INSPECT_PANEL)(plans.run_cmd)
app.command("failures", rich_help_panel=INSPECT_PANEL)(core.failures_cmd)
app.command("jobs", rich_help_panel=INSPECT_PANEL)(core.jobs_cmd)
app.command("job", rich_help_panel=INSPECT_PANEL)(core.job_cmd)
app.command("retry", rich_help_panel=INSPECT_PANEL)(core.retry_cmd)
app.command("discard", rich_help_panel=INSPECT_PANEL)(core.discard_cmd)
app.command("requeue-stuck", rich_help_panel=INSPECT_PANEL)(core.requeue_stuck_cmd)


def main() -> None:
    """The console script: click's usage errors become one line like every other error."""
    for arg in sys.argv[1:]:
        if _undecodable(arg):
            _say_error(f"argument {os.fsencode(arg)!r} is not valid UTF-8")
            sys.exit(2)
    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()  # the help text, as `pgenough` alone has always shown
        sys.exit(exc.exit_code)
    except ClickException as exc:
        ctx = exc.ctx if isinstance(exc, UsageError) else None
        where = f"{ctx.command_path}: " if ctx is not None else ""
        _say_error(f"{where}{exc.format_message()}")
        sys.exit(exc.exit_code)
    except typer.Abort:
        _say_error("aborted")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
