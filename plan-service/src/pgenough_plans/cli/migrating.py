"""``pgenough-plans migrate``: pgenough's schema and the plan service's, and its API role."""

from __future__ import annotations

from typing import Annotated

import typer

from pgenough.cli import fail, out, run, setup_logging
from pgenough.core import migrate, open_pool
from pgenough.core.migrations import schema_version
from pgenough_plans.cli.base import plan_settings


def migrate_cmd(
    api_role: Annotated[
        str | None,
        typer.Option(
            "--api-role",
            help="Also create (or tighten) this login role for `pgenough-plans api`: it may"
            " only read plans.plans.",
        ),
    ] = None,
    api_password: Annotated[
        str | None,
        typer.Option(
            "--api-password",
            envvar="PGENOUGH_API_ROLE_PASSWORD",
            help="Password to set on the API role (or PGENOUGH_API_ROLE_PASSWORD).",
        ),
    ] = None,
) -> None:
    """Create or upgrade the schema: pgenough's queue, then the plan service's own (safe when
    replicas run it at the same time)."""
    from pgenough_plans.api import MIGRATIONS, grant_api_role  # FastAPI: slow to import
    from pgenough_plans.ingest.store import MIGRATIONS as PLANS_MIGRATIONS

    settings = plan_settings()
    setup_logging(settings)
    if api_password is not None and not api_role:
        fail("--api-password needs --api-role", code=2)

    async def main() -> tuple[int, list[str], bool | None]:
        pool = await open_pool(settings.resolve_database_url(), max_size=1, name="plans-migrate")
        try:
            async with pool.connection() as conn:
                applied = await migrate(conn, MIGRATIONS)
                created = None
                if api_role:
                    created = await grant_api_role(conn, api_role, api_password)
                return (
                    await schema_version(conn, PLANS_MIGRATIONS.track),
                    [f"{m.track}/{m.version:04d}_{m.name}" for m in applied],
                    created,
                )
        finally:
            await pool.close()

    version, applied, created = run(main, settings)
    for name in applied:
        out.print(f"applied {name}")
    if api_role:
        verb = "created" if created else "updated"
        out.print(
            f"API role {api_role} {verb}: CONNECT, USAGE on schema plans,"
            " SELECT on plans.plans and plans.api_secrets",
            soft_wrap=True,
            highlight=False,
        )
    out.print(f"plan service schema version {version}")
