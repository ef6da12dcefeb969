"""What every command shares: the typer app, settings and errors as one line and an exit
code, the service extra's lazy imports, the event loop and logging."""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Annotated, Any, Final, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console
from rich.text import Text

# typer (0.29) vendors click: its usage errors are these classes, not click's.
from typer._click.globals import get_current_context

from pgenough import __version__, eventloop, logs
from pgenough.core import PgenoughError
from pgenough.core.executor import JOBS_LOGGER
from pgenough.settings import ConfigFileError, Settings

app = typer.Typer(
    help="pgenough: reliable ingestion and messaging on one PostgreSQL database.",
    no_args_is_help=True,
    add_completion=False,
)
err = Console(stderr=True, soft_wrap=True)
out = Console()
T = TypeVar("T")

BIGINT_MAX: Final = 2**63 - 1
"""The largest id or limit: PostgreSQL reads them as bigint, and a larger number would fail
there ("bigint out of range") instead of at the option."""


class _LogFormatOption(StrEnum):
    text = "text"
    json = "json"


_log_format: logs.LogFormat | None = None
"""``--log-format``, when given: it beats ``PGENOUGH_LOG_FORMAT``."""


def _settings() -> Settings:
    """The settings, or exit 2 with what is wrong with them (as for a usage error)."""
    prefix = Settings.model_config.get("env_prefix", "").upper()
    for name, value in os.environ.items():
        ours = name.upper().startswith(prefix) or name.upper() == "DATABASE_URL"
        # PGENOUGH_CONFIG is a path, which the OS takes in any bytes; any other value would
        # fail later, deep inside, the first time it is encoded.
        if ours and name.upper() != "PGENOUGH_CONFIG" and _undecodable(value):
            _fail(f"invalid configuration: {name} is not valid UTF-8", code=2)
    try:
        return Settings()
    except ConfigFileError as exc:
        _fail(str(exc), code=2)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        _fail(f"invalid configuration: {where}: {first['msg']}", code=2)
    except SettingsError as exc:  # a value pydantic-settings could not even decode
        _fail(f"invalid configuration: {exc}", code=2)


def _undecodable(text: str) -> bool:
    """Whether ``text`` (an argument, an environment value) held bytes that are not UTF-8:
    Python keeps them as lone surrogates, which nothing can encode again."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _say_error(message: str) -> None:
    # Text, not markup: a message may quote what it was given (a path, a URL, a command),
    # where "[/]" would be taken for a tag; and one line, whatever characters it quotes.
    line = Text.assemble(("error:", "bold red"), " ", logs.escape_controls(message))
    err.print(line, highlight=False)


def _fail(message: str, code: int = 1) -> NoReturn:
    _say_error(message)
    raise typer.Exit(code)


SERVICE_EXTRA: Final = "pgenough[service]"
"""What to install for the plan service, the API and the dashboard (with the embedded
PostgreSQL)."""


def _extra_missing(exc: ModuleNotFoundError) -> bool:
    """Whether ``exc`` is about a dependency of an extra that is not installed, rather than
    a missing module of pgenough's own (a bug, which keeps its traceback)."""
    top = (exc.name or "").partition(".")[0]
    return bool(top) and top != "pgenough"


@contextmanager
def _needs_service() -> Iterator[None]:
    """Around the imports of a command that uses the plan service or the API: when one of
    their dependencies is not installed, exit 1 with one line naming the extra to install.
    Detected where the import fails, so a new command needs no list to be kept up to date."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if not _extra_missing(exc):
            raise
        ctx = get_current_context(silent=True)
        command = ctx.command_path if ctx is not None else "this command"
        _fail(
            f"{command} needs the plan service ({exc.name} is not installed):"
            f" pip install '{SERVICE_EXTRA}'"
        )


def _database_url(settings: Settings) -> str:
    """``DATABASE_URL``, or the embedded server's, started now if need be."""
    try:
        return settings.resolve_database_url()
    except PgenoughError as exc:
        _fail(str(exc))


def _run(main: Callable[[], Coroutine[Any, Any, T]], settings: Settings) -> T:
    try:
        return eventloop.run(main, settings.event_loop)
    except PgenoughError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _setup_logging(settings: Settings) -> None:
    logs.setup(settings.log_level, _log_format or settings.log_format, stream=sys.stderr)
    # One line per HTTP request of the demo's client is noise, not information.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if not settings.log_jobs:
        quiet_jobs()


def quiet_jobs() -> None:
    """No line per job done, for every worker of this process; failures are still logged
    (``PGENOUGH_LOG_JOBS=0``, ``worker run --quiet``)."""
    logging.getLogger(JOBS_LOGGER).setLevel(logging.WARNING)


def _version(value: bool) -> None:
    if value:
        out.print(f"pgenough {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show version.")
    ] = False,
    log_format: Annotated[
        _LogFormatOption | None,
        typer.Option(
            "--log-format",
            help="Log lines as text or JSON objects (default: PGENOUGH_LOG_FORMAT, text).",
        ),
    ] = None,
) -> None:
    global _log_format
    _log_format = None if log_format is None else ("json" if log_format.value == "json" else "text")


def _finite(value: float | None) -> float | None:
    # A minimum lets inf through (inf >= 0.1); the settings refuse it too (allow_inf_nan).
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number of seconds")
    return value
