"""The ``pgenough`` command. Each command reads options and settings, calls one function, and
turns pgenough's errors into a one-line message and a non-zero exit."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console

from pgenough import __version__
from pgenough.core import PgenoughError, database_url, migrate, open_pool, schema_version
from pgenough.settings import Settings

app = typer.Typer(
    help="pgenough: reliable ingestion and messaging on one PostgreSQL database.",
    no_args_is_help=True,
    add_completion=False,
)
err = Console(stderr=True, soft_wrap=True)
out = Console()
T = TypeVar("T")


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        _fail(f"invalid configuration: {where}: {first['msg']}")


def _fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    try:
        return asyncio.run(main())
    except PgenoughError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _setup_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # One line per HTTP request of the demo's client is noise, not information.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _version(value: bool) -> None:
    if value:
        out.print(f"pgenough {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show version.")
    ] = False,
) -> None:
    pass


@app.command("migrate")
def migrate_cmd() -> None:
    """Create or upgrade the schema (safe when replicas run it at the same time)."""
    settings = _settings()
    _setup_logging(settings)

    async def main() -> tuple[int, list[str]]:
        pool = await open_pool(
            database_url(settings.database_url, settings.data_dir),
            max_size=1,
            name="pgenough-migrate",
        )
        try:
            async with pool.connection() as conn:
                applied = await migrate(conn)
                return await schema_version(conn), [f"{m.version:04d}_{m.name}" for m in applied]
        finally:
            await pool.close()

    version, applied = _run(main)
    for name in applied:
        out.print(f"applied {name}")
    out.print(f"schema version {version}")


def _load_checkout() -> ModuleType:
    """The checkout example: packaged in wheels, from the source tree in editable installs."""
    try:
        return importlib.import_module("pgenough._examples.checkout")
    except ModuleNotFoundError:
        path = Path(__file__).resolve().parents[2] / "examples" / "checkout.py"
        spec = importlib.util.spec_from_file_location("pgenough_checkout_example", path)
        if spec is None or spec.loader is None or not path.exists():
            _fail(f"the checkout example is not installed (looked for {path})")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


@app.command()
def demo(
    orders: Annotated[int, typer.Option(min=1, help="Orders to place.")] = 5,
    port: Annotated[int, typer.Option(min=0, max=65535, help="HTTP port.")] = 8000,
    keep_running: Annotated[
        bool, typer.Option("--keep-running", help="Keep serving after the scripted orders.")
    ] = False,
) -> None:
    """Run the order-checkout example end to end (embedded PostgreSQL unless DATABASE_URL)."""
    settings = _settings()
    _setup_logging(settings)
    checkout = _load_checkout()
    url = database_url(settings.database_url, settings.data_dir)
    code = _run(lambda: checkout.run(url, orders=orders, port=port, keep_running=keep_running))
    raise typer.Exit(code)


def main() -> None:
    app()
