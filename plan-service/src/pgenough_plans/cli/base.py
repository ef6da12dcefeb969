"""What the plan service's commands share: its settings, and reads on its database that say
to run ``pgenough-plans migrate`` when its schema is missing. Everything else comes from
pgenough's command toolkit (``pgenough.cli``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import typer

from pgenough import cli as toolkit
from pgenough.core.db import AsyncConn
from pgenough_plans import __version__
from pgenough_plans.settings import PlanSettings

T = TypeVar("T")
MIGRATE: str = "pgenough-plans migrate"

app = typer.Typer(
    help="The plan service: Fever planList snapshots ingested into PostgreSQL and served at"
    " /search, built on pgenough.",
    no_args_is_help=True,
    add_completion=False,
)
toolkit.common_options(app, "pgenough-plans", __version__)
worker_app = typer.Typer(help="Run a fetch or a process worker.", no_args_is_help=True)


def plan_settings() -> PlanSettings:
    """The plan service's settings, or exit 2 with what is wrong with them."""
    return toolkit.load_settings(PlanSettings)


def read(name: str, action: Callable[[AsyncConn], Awaitable[T]]) -> T:
    """``action`` on a connection to the plan service's database, for command ``name``."""
    return toolkit.inspect(name, action, plan_settings(), migrate_hint=MIGRATE)
