"""What every command shares, pgenough's and an application's built on it: settings and
errors as one line and an exit code, an extra's lazy imports, the event loop and logging, and
the console script that turns click's usage errors into the same one line.

An application's own CLI (the plan service's ``pgenough-plans``) is a typer app of its own
built with these (``pgenough.cli``'s public names), so that its errors, exit codes, logging
and ``--json`` read as pgenough's do.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Any, Final, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console
from rich.text import Text

# typer (0.29) vendors click: its usage errors are these classes, not click's.
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer._click.globals import get_current_context

from pgenough import __version__, eventloop, logs
from pgenough.core import PgenoughError
from pgenough.core.worker import JOBS_LOGGER
from pgenough.settings import ConfigFileError, Settings

app = typer.Typer(
    help="pgenough: a durable job queue, pub/sub, locks and periodic tasks on PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
)
err = Console(stderr=True, soft_wrap=True)
out = Console()
T = TypeVar("T")
S = TypeVar("S", bound=Settings)

BIGINT_MAX: Final = 2**63 - 1
"""The largest id or limit: PostgreSQL reads them as bigint, and a larger number would fail
there ("bigint out of range") instead of at the option."""


class _LogFormatOption(StrEnum):
    text = "text"
    json = "json"


_log_format: logs.LogFormat | None = None
"""``--log-format``, when given: it beats ``PGENOUGH_LOG_FORMAT``."""


def load_settings(cls: type[S]) -> S:
    """The settings (``cls``: pgenough's, or an application's subclass), or exit 2 with what
    is wrong with them (as for a usage error)."""
    prefix = cls.model_config.get("env_prefix", "").upper()
    for name, value in os.environ.items():
        ours = name.upper().startswith(prefix) or name.upper() == "DATABASE_URL"
        # A config file variable is a path, which the OS takes in any bytes; any other value
        # would fail later, deep inside, the first time it is encoded.
        if ours and name.upper() != cls.CONFIG_ENV and undecodable(value):
            fail(f"invalid configuration: {name} is not valid UTF-8", code=2)
    try:
        return cls()
    except ConfigFileError as exc:
        fail(str(exc), code=2)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        fail(f"invalid configuration: {where}: {first['msg']}", code=2)
    except SettingsError as exc:  # a value pydantic-settings could not even decode
        fail(f"invalid configuration: {exc}", code=2)


def undecodable(text: str) -> bool:
    """Whether ``text`` (an argument, an environment value) held bytes that are not UTF-8:
    Python keeps them as lone surrogates, which nothing can encode again."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def say_error(message: str) -> None:
    """``error: message`` on stderr, on one line."""
    # Text, not markup: a message may quote what it was given (a path, a URL, a command),
    # where "[/]" would be taken for a tag; and one line, whatever characters it quotes.
    line = Text.assemble(("error:", "bold red"), " ", logs.escape_controls(message))
    err.print(line, highlight=False)


def fail(message: str, code: int = 1) -> NoReturn:
    """Say ``message`` as the command's one error line and exit with ``code``."""
    say_error(message)
    raise typer.Exit(code)


def extra_missing(exc: ModuleNotFoundError) -> bool:
    """Whether ``exc`` is about a dependency of an extra that is not installed, rather than
    a missing module of pgenough's own (a bug, which keeps its traceback)."""
    top = (exc.name or "").partition(".")[0]
    return bool(top) and not top.startswith("pgenough")


@contextmanager
def needs_extra(install: str) -> Iterator[None]:
    """Around the imports of a command that needs an optional dependency: when one is not
    installed, exit 1 with one line naming what to install (``install``, e.g.
    ``pgenough[dashboard]``). Detected where the import fails, so a new command needs no list
    to be kept up to date."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if not extra_missing(exc):
            raise
        ctx = get_current_context(silent=True)
        command = ctx.command_path if ctx is not None else "this command"
        fail(f"{command} needs {exc.name}, which is not installed: pip install '{install}'")


def database_url(settings: Settings) -> str:
    """``DATABASE_URL``, or the embedded server's, started now if need be."""
    try:
        return settings.resolve_database_url()
    except PgenoughError as exc:
        fail(str(exc))


def run(main: Callable[[], Coroutine[Any, Any, T]], settings: Settings) -> T:
    """``main()`` on the settings' event loop; pgenough's errors as one line (exit 1), Ctrl-C
    as exit 130."""
    try:
        return eventloop.run(main, settings.event_loop)
    except PgenoughError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def setup_logging(settings: Settings) -> None:
    """Log to stderr at the settings' level, as text or JSON (``--log-format`` first)."""
    logs.setup(settings.log_level, _log_format or settings.log_format, stream=sys.stderr)
    # One line per HTTP request of a client is noise, not information.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if not settings.log_jobs:
        quiet_jobs()


def quiet_jobs() -> None:
    """No line per job done, for every worker of this process; failures are still logged
    (``PGENOUGH_LOG_JOBS=0``, ``worker run --quiet``)."""
    logging.getLogger(JOBS_LOGGER).setLevel(logging.WARNING)


def finite(value: float | None) -> float | None:
    """An option's callback: a number of seconds must be finite."""
    # A minimum lets inf through (inf >= 0.1); the settings refuse it too (allow_inf_nan).
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number of seconds")
    return value


def common_options(cli: typer.Typer, name: str, version: str) -> None:
    """``--version`` (``name version``) and ``--log-format`` on ``cli``, as on ``pgenough``."""

    def show_version(value: bool) -> None:
        if value:
            out.print(f"{name} {version}")
            raise typer.Exit()

    # Defaults, not Annotated: under postponed annotations typer would look the callback up
    # by name in this module's globals, where a closure is not.
    @cli.callback()
    def _options(
        version: bool = typer.Option(
            False, "--version", callback=show_version, is_eager=True, help="Show version."
        ),
        log_format: _LogFormatOption | None = typer.Option(  # noqa: B008 (typer's way)
            None,
            "--log-format",
            help="Log lines as text or JSON objects (default: PGENOUGH_LOG_FORMAT, text).",
        ),
    ) -> None:
        global _log_format
        _log_format = (
            None if log_format is None else ("json" if log_format.value == "json" else "text")
        )


common_options(app, "pgenough", __version__)


def console_script(cli: typer.Typer) -> NoReturn:
    """Run ``cli`` as a console script: click's usage errors become one line like every
    other error, and the exit code is the command's."""
    for arg in sys.argv[1:]:
        if undecodable(arg):
            say_error(f"argument {os.fsencode(arg)!r} is not valid UTF-8")
            sys.exit(2)
    try:
        code = cli(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()  # the help text, as a command alone has always shown
        sys.exit(exc.exit_code)
    except ClickException as exc:
        ctx = exc.ctx if isinstance(exc, UsageError) else None
        where = f"{ctx.command_path}: " if ctx is not None else ""
        say_error(f"{where}{exc.format_message()}")
        sys.exit(exc.exit_code)
    except typer.Abort:
        say_error("aborted")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
