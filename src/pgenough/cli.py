"""The ``pgenough`` command. Each command reads options and settings, calls one function, and
turns pgenough's errors into a one-line message and a non-zero exit.

This module imports only the messaging core and what its commands need, so that
``pgenough`` works where only the core is installed (``pip install pgenough``). The plan
service, the API and uvicorn are imported by the commands that use them, inside
``_needs_service``: without the ``service`` extra such a command says in one line what to
install.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import signal
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn, TypeVar

import prometheus_client
import psycopg
import typer
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

# typer (0.29) vendors click: its usage errors are these classes, not click's.
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer._click.globals import get_current_context

from pgenough import __version__, eventloop, jsonable, logs, render
from pgenough.core import (
    JOB_STATES,
    AppNotFound,
    DatabaseError,
    MigrationSet,
    PgenoughError,
    Worker,
    WorkerStats,
    database_url,
    get_job,
    list_jobs,
    load_app,
    migrate,
    open_pool,
    parse_job_state,
    queue_stats,
    repair,
    schema_version,
)
from pgenough.core.statements import AsyncConn
from pgenough.httpserver import ListenError, listen
from pgenough.plans.defaults import RUN_STATUSES
from pgenough.settings import MAX_CONCURRENCY, ConfigFileError, Settings

if TYPE_CHECKING:
    from pgenough.api.proxies import TrustedProxies
    from pgenough.plans.fetch import FetchConfig, RunResult
    from pgenough.plans.provider import ProviderConfig

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


def _service_layers() -> Sequence[MigrationSet]:
    """The schema layers above the core that this installation ships: the plan service's
    and the API's, or none where only the core is installed, so that a queue user's
    ``pgenough migrate`` creates the queue's tables and never the plan service's."""
    try:
        from pgenough.api import MIGRATIONS  # FastAPI: slow to import
    except ModuleNotFoundError as exc:
        if not _extra_missing(exc):
            raise
        return ()
    return MIGRATIONS


def _run_of() -> render.RunOf:
    """Which run a job applies (a chunk job of the plan service); where only the core is
    installed there are no chunk jobs, so no job applies one."""
    try:
        from pgenough.plans.inspect import chunk_run
    except ModuleNotFoundError as exc:
        if not _extra_missing(exc):
            raise
        return lambda job: None
    return chunk_run


def _database_url(settings: Settings) -> str:
    """``DATABASE_URL``, or the embedded server's, started now if need be."""
    try:
        return database_url(settings.database_url, settings.data_dir)
    except PgenoughError as exc:
        _fail(str(exc))


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound now: a busy port is one line and exit 1, before anything
    (the database, uvicorn) has started."""
    try:
        return listen(host, port)
    except ListenError as exc:
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


@app.command("migrate")
def migrate_cmd(
    api_role: Annotated[
        str | None,
        typer.Option(
            "--api-role",
            help="Also create (or tighten) this login role for `pgenough api`: it may only"
            " read pgenough.plans.",
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
    """Create or upgrade the schema (safe when replicas run it at the same time)."""
    settings = _settings()
    _setup_logging(settings)
    if api_password is not None and not api_role:
        _fail("--api-password needs --api-role", code=2)
    if api_role:
        with _needs_service():  # the role is the API's, and reads the plan service's tables
            from pgenough.api import grant_api_role

    async def main() -> tuple[int, list[str], bool | None]:
        pool = await open_pool(
            database_url(settings.database_url, settings.data_dir),
            max_size=1,
            name="pgenough-migrate",
        )
        try:
            async with pool.connection() as conn:
                applied = await migrate(conn, _service_layers())
                created = None
                if api_role:
                    created = await grant_api_role(conn, api_role, api_password)
                return (
                    await schema_version(conn),
                    [f"{m.track}/{m.version:04d}_{m.name}" for m in applied],
                    created,
                )
        finally:
            await pool.close()

    version, applied, created = _run(main, settings)
    for name in applied:
        out.print(f"applied {name}")
    if api_role:
        verb = "created" if created else "updated"
        out.print(
            f"API role {api_role} {verb}: CONNECT, USAGE on schema pgenough,"
            " SELECT on pgenough.plans and pgenough.api_secrets",
            soft_wrap=True,
            highlight=False,
        )
    out.print(f"schema version {version}")


def _finite(value: float | None) -> float | None:
    # A minimum lets inf through (inf >= 0.1); the settings refuse it too (allow_inf_nan).
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number of seconds")
    return value


def _snapshot_plans(value: int) -> int:
    """``--plans`` within what the simulator generates (its module is imported only here:
    the other commands never need it)."""
    with _needs_service():
        from pgenough.plans.sim import MAX_PLANS

    if not 1 <= value <= MAX_PLANS:
        raise typer.BadParameter(f"{value} is not in the range 1 to {MAX_PLANS:,}")
    return value


@app.command()
def demo(
    port: Annotated[int, typer.Option(min=0, max=65535, help="API port (0: any free one).")] = 8000,
    plans: Annotated[
        int, typer.Option(callback=_snapshot_plans, help="Plans per simulated snapshot.")
    ] = 20_000,
    interval: Annotated[
        float, typer.Option(min=1, callback=_finite, help="Seconds between fetches.")
    ] = 15.0,
) -> None:
    """The whole plan service in one process: a misbehaving simulated provider, fetch and
    process workers, and the API (embedded PostgreSQL unless DATABASE_URL)."""
    with _needs_service():
        from pgenough.demo import HOST, DemoConfig
        from pgenough.demo import run as run_demo

    settings = _settings()
    _setup_logging(settings)
    # The demo prints each run itself; keep the log to what needs attention.
    logging.getLogger("pgenough").setLevel(logging.WARNING)
    logging.getLogger("pgenough.core.db").setLevel(logging.INFO)
    _check_api_settings(settings)
    with _listen(HOST, port) as sock:
        url = _database_url(settings)
        config = DemoConfig(plans=plans, interval=interval)
        raise typer.Exit(_run(lambda: run_demo(settings, url, config, sock), settings))


worker_app = typer.Typer(
    help="Run your tasks, or a plan service fetch or process worker.", no_args_is_help=True
)
app.add_typer(worker_app, name="worker")


async def _ready_core_pool(
    settings: Settings,
    name: str,
    max_size: int | None = None,
    layers: Sequence[MigrationSet] = (),
) -> AsyncConnectionPool:
    """A pool on a database migrated for the core and ``layers`` (workers migrate on
    start-up; it is idempotent)."""
    pool = await open_pool(
        database_url(settings.database_url, settings.data_dir),
        max_size=max_size or settings.pool_max_size,
        name=name,
        prepared_statements=settings.prepared_statements,
    )
    async with pool.connection() as conn:
        await migrate(conn, layers)
    return pool


async def _ready_pool(
    settings: Settings, name: str, max_size: int | None = None
) -> AsyncConnectionPool:
    """A pool on a database migrated for the plan service, for its workers."""
    from pgenough.plans.store import MIGRATIONS as PLANS_MIGRATIONS

    return await _ready_core_pool(settings, name, max_size, [PLANS_MIGRATIONS])


MetricsPortOption = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        min=0,
        max=65535,
        help="Serve Prometheus metrics at /metrics on this port (default: settings; none).",
    ),
]


def _serve_metrics(settings: Settings, port: int | None) -> None:
    """A worker's own /metrics endpoint, on a daemon thread: its counters (fetches, chunks,
    jobs, pools) exist only in its process, so Prometheus must scrape each worker."""
    port = settings.metrics_port if port is None else port
    if port is None:
        return
    host = settings.metrics_host
    try:
        server, _ = prometheus_client.start_http_server(port, addr=host)
    except OSError as exc:
        _fail(f"metrics: {ListenError(host, port, exc)}")
    logging.getLogger("pgenough.cli").info(
        "metrics at http://%s:%d/metrics", host, server.server_port
    )


def _queue_option(values: list[str] | None) -> dict[str, int | None] | None:
    """``--queue NAME`` or ``--queue NAME=CONCURRENCY``, repeated; None when not given."""
    if not values:
        return None
    queues: dict[str, int | None] = {}
    for value in values:
        name, sep, count = value.partition("=")
        if not name or name in queues:
            raise typer.BadParameter(
                f"{value!r}: give each queue once, as NAME or NAME=N", param_hint="'--queue'"
            )
        if sep:
            if not (count.isascii() and count.isdigit()) or not 1 <= int(count) <= MAX_CONCURRENCY:
                raise typer.BadParameter(
                    f"{value!r}: the concurrency must be 1 to {MAX_CONCURRENCY}",
                    param_hint="'--queue'",
                )
            queues[name] = int(count)
        else:
            queues[name] = None
    return queues


@worker_app.command("run")
def worker_run(
    app_spec: Annotated[
        str,
        typer.Argument(
            metavar="MODULE:APP", help="Your pgenough App, e.g. myapp.tasks:app (MODULE: its app)."
        ),
    ],
    queue: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            "-q",
            help=f"QUEUE or QUEUE=CONCURRENCY (1..{MAX_CONCURRENCY}); repeat. Default: every queue"
            " of the app's tasks.",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_CONCURRENCY,
            help=f"Jobs run at once per queue, 1..{MAX_CONCURRENCY} (default: settings).",
        ),
    ] = None,
    shutdown_timeout: Annotated[
        float | None,
        typer.Option(
            min=0,
            callback=_finite,
            help="On SIGTERM, seconds running jobs get to finish (default: settings).",
        ),
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Drain every claimable job, then exit.")
    ] = False,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Run your tasks: one process, one executor per queue, one listening connection and one
    set of maintenance duties whatever the number of queues. SIGTERM lets running jobs
    finish (up to the shutdown timeout), then cancels the async ones and hands them back; a
    plain function (a thread) cannot be stopped and is waited for. Exit 0 once stopped, 1 on a
    runtime error, 2 on bad usage or configuration."""
    settings = _settings()
    _setup_logging(settings)
    queues = _queue_option(queue)
    try:
        app = load_app(app_spec)
    except AppNotFound as exc:
        _fail(str(exc), code=2)
    overrides: dict[str, object] = {}
    if shutdown_timeout is not None:
        overrides["shutdown_timeout"] = shutdown_timeout
    config = settings.worker_config(**overrides)
    _serve_metrics(settings, metrics_port)
    log = logging.getLogger("pgenough.cli")

    async def main() -> int:
        name = f"worker-{uuid.uuid4().hex[:12]}"
        pool = await _ready_core_pool(settings, name, layers=app.migrations)
        try:
            worker = app.worker(
                pool, queues=queues, concurrency=concurrency, name=name, config=config
            )
            # Each running job may hold a connection, and so may each queue's claim loop and
            # heartbeat and the process's duties: never wait on the pool for them.
            needed = sum(c.concurrency for c in worker.configs) + 2 * len(worker.configs) + 3
            await pool.resize(pool.min_size, max(pool.max_size, needed))
            log.info(
                "%s: %d task(s); queues %s",
                name,
                len(app.tasks),
                ", ".join(f"{c.queue} ({c.concurrency})" for c in worker.configs),
            )
            stats = await worker.run(until_idle=until_idle, handle_signals=True)
            log.info(
                "%s stopped: %d job(s) completed, %d failed attempt(s)",
                name,
                stats.completed,
                stats.failed,
            )
            return 0
        finally:
            await pool.close()

    raise typer.Exit(_run(main, settings))


def _lower_priority(nice: int) -> None:
    """Bulk ingestion gives the CPU to the API first on a machine they share
    (``PGENOUGH_INGEST_NICE``); its PostgreSQL backends keep their own priority."""
    if nice > 0:
        os.nice(nice)


@worker_app.command("fetch")
def worker_fetch(
    provider: Annotated[
        list[str] | None,
        typer.Option("--provider", help="NAME=URL; repeat for several providers."),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Fetch each provider once; exit 1 if any run failed.")
    ] = False,
    interval: Annotated[
        float | None,
        typer.Option(
            min=0.1, callback=_finite, help="Seconds between fetches (default: settings)."
        ),
    ] = None,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Fetch providers' snapshots into staging: each provider at most once per interval
    across every fetch replica, under its lock; SIGTERM ends fetches in flight as FAILED."""
    with _needs_service():
        from pgenough.plans.fetch import fetch_loop
    settings = _settings()
    _setup_logging(settings)
    _lower_priority(settings.ingest_nice)
    try:
        providers = settings.provider_configs(provider)
    except ValueError as exc:
        _fail(str(exc), code=2)
    if not providers:
        _fail("no providers: pass --provider NAME=URL or set PGENOUGH_PROVIDERS", code=2)
    owner = f"fetch-{uuid.uuid4().hex[:12]}"
    config = settings.fetch_config()
    _serve_metrics(settings, metrics_port)

    async def main() -> int:
        pool = await _ready_pool(settings, owner, max_size=len(providers) + 2)
        # SIGTERM/SIGINT end fetches in flight at once: their runs end FAILED ("worker
        # stopped") and their provider locks are released.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            if once:
                results = await _fetch_once(pool, providers, owner, config, stop)
                _print_runs(results)
                return 1 if any(r is not None and r.status == "FAILED" for r in results) else 0
            await fetch_loop(
                pool, providers, interval or settings.fetch_interval, stop, config, owner=owner
            )
            return 0
        finally:
            await pool.close()

    raise typer.Exit(_run(main, settings))


async def _fetch_once(
    pool: AsyncConnectionPool,
    providers: Sequence[ProviderConfig],
    owner: str,
    config: FetchConfig,
    stop: asyncio.Event,
) -> list[RunResult | None]:
    """``fetch_all``, with a live line per provider when someone watches stderr."""
    from pgenough import progress
    from pgenough.plans.fetch import fetch_all

    console = progress.console()
    if console is None:
        return await fetch_all(pool, providers, config, owner=owner, stop=stop)
    display = progress.FetchDisplay(console, [p.name for p in providers])
    with display.shown():
        return await fetch_all(
            pool, providers, config, owner=owner, on_progress=display.update, stop=stop
        )


def _print_runs(results: list[RunResult | None]) -> None:
    table = Table("run", "provider", "status", "plans staged", "skipped", "MB", "reason")
    for r in results:
        if r is None:
            continue
        table.add_row(
            str(r.run_id),
            r.provider,
            r.status,
            str(r.plans_staged),
            str(r.plans_skipped),
            f"{r.bytes / 1e6:.1f}",
            r.reason or "",
        )
    if any(r is None for r in results):
        table.caption = "providers being fetched by another worker were skipped"
    out.print(table)


@worker_app.command("process")
def worker_process(
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_CONCURRENCY,
            help=f"Chunks applied at once, 1..{MAX_CONCURRENCY} (default: settings).",
        ),
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Drain everything claimable, then exit.")
    ] = False,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Apply the chunks of staged runs to the canonical plans."""
    with _needs_service():
        from pgenough import progress
        from pgenough.plans.process import process_worker
    settings = _settings()
    _setup_logging(settings)
    _lower_priority(settings.ingest_nice)
    overrides: dict[str, object] = {"batch_size": 1}
    if concurrency:
        overrides["concurrency"] = concurrency
    config = settings.worker_config(**overrides)
    _serve_metrics(settings, metrics_port)

    async def main() -> int:
        pool = await _ready_pool(
            settings,
            "pgenough-process",
            max_size=max(settings.pool_max_size, config.concurrency + 4),
        )
        try:
            worker = process_worker(pool, config, settings.pacing_config())
            console = progress.console() if until_idle else None
            if console is None:
                stats = await worker.run(until_idle=until_idle, handle_signals=True)
            else:
                stats = await _drain_with_progress(pool, worker, console)
            out.print(f"chunks applied: {stats.completed}, failed attempts: {stats.failed}")
            return 0
        finally:
            await pool.close()

    raise typer.Exit(_run(main, settings))


async def _drain_with_progress(
    pool: AsyncConnectionPool, worker: Worker, console: Console
) -> WorkerStats:
    """``worker.run(until_idle=True)`` under a bar of the chunks claimable at the start."""
    from pgenough import progress
    from pgenough.plans.process import PLANS_QUEUE

    async with pool.connection() as conn:
        plans = [q for q in await queue_stats(conn) if q.queue == PLANS_QUEUE]
    total = sum(q.ready + q.running for q in plans)
    display = progress.ChunkDisplay(console, total)
    work = asyncio.create_task(worker.run(until_idle=True, handle_signals=True))
    await display.follow(lambda: (worker.stats.completed, worker.stats.failed), work)
    return await work


def _check_api_settings(settings: Settings) -> TrustedProxies:
    """Impossible API or dashboard settings: one line and exit 2 now, before the database
    starts (``create_app`` would find them only after it has). Returns the proxies whose
    headers uvicorn may believe."""
    with _needs_service():
        from pgenough.api import ApiConfigError, ui  # FastAPI: slow to import
        from pgenough.api.app import api_config
        from pgenough.api.proxies import TrustedProxies

    try:
        api_config(settings)
        ui.ui_config(settings)
        return TrustedProxies.parse(settings.api_trusted_proxies)
    except ApiConfigError as exc:
        _fail(f"invalid configuration: {exc}", code=2)


@app.command("api")
def api_cmd(
    host: Annotated[
        str | None, typer.Option(help="Address to bind (default: settings, 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="Port (default: settings, 8000).")
    ] = None,
    access_log: Annotated[
        bool, typer.Option("--access-log", help="Log every request (off: see /metrics).")
    ] = False,
) -> None:
    """Serve the HTTP API (/search, /health/*, /metrics, /docs) in one process."""
    with _needs_service():
        from pgenough.api import create_app, prepare_database  # slow to import
        from pgenough.api.server import ApiServer, uvicorn_config

    settings = _settings()
    _setup_logging(settings)
    # --host is where the API binds, which the dashboard answers to as its own name.
    settings = settings.model_copy(update={"api_host": host or settings.api_host})
    proxies = _check_api_settings(settings)
    with _listen(settings.api_host, settings.api_port if port is None else port) as sock:
        url = _database_url(settings)
        api = create_app(settings.model_copy(update={"database_url": url}))
        config = uvicorn_config(
            api, proxies, workers=1, loop="asyncio", log_config=None, access_log=access_log
        )
        server = ApiServer(config)  # uvicorn's, ending the dashboard's live streams on stop

        async def main() -> int:
            await prepare_database(
                url,
                migrate_schema=settings.api_migrate,
                read_cursor_secret=settings.api_cursor_secret is None,
            )
            await server.serve(sockets=[sock])
            return 0 if server.started else 1

        raise typer.Exit(_run(main, settings))


@app.command("provider-sim")
def provider_sim(
    plans: Annotated[
        int, typer.Option(callback=_snapshot_plans, help="Plans per snapshot.")
    ] = 1000,
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8080,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    seed: Annotated[int, typer.Option(help="Snapshots are a function of seed and version.")] = 1,
) -> None:
    """Serve generated planList snapshots, with injectable faults (see docs)."""
    with _needs_service():
        from pgenough.plans import sim  # imported here: the other commands never need it

    settings = _settings()
    _setup_logging(settings)
    try:
        sim.serve(plans=plans, port=port, seed=seed, host=host)
    except ListenError as exc:
        _fail(str(exc))


# -- inspecting and repairing ---------------------------------------------------------------
# These commands never migrate: looking must not change the database, and a repair changes
# only the jobs it names. Each opens a small pool, calls one function of plans.inspect (or,
# for jobs, of the core), and prints tables, or with --json exactly one JSON document on
# stdout.

INSPECT_PANEL = "Inspect and repair"
PIPED_WIDTH = 200
INSPECT_TIMEOUT = 5.0
"""Seconds to reach the database: someone asking for status wants an answer or an error now."""

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")
]


async def _on_connection(
    settings: Settings, name: str, action: Callable[[AsyncConn], Awaitable[T]]
) -> T:
    """Run ``action`` on a connection of a two-connection pool, translating what psycopg says
    about a database without pgenough's tables into what the operator should do."""
    pool = await open_pool(
        database_url(settings.database_url, settings.data_dir),
        max_size=2,
        name=name,
        timeout=INSPECT_TIMEOUT,
    )
    try:
        async with pool.connection() as conn:
            return await action(conn)
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
        raise DatabaseError("pgenough's schema is missing: run `pgenough migrate`") from exc
    except psycopg.OperationalError as exc:
        # The connection broke mid-command (server restart, timeout): one line, no traceback.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseError(f"database error: {reason}") from exc
    finally:
        await pool.close()


def _inspect(name: str, action: Callable[[AsyncConn], Awaitable[T]]) -> T:
    settings = _settings()
    _setup_logging(settings)
    return _run(lambda: _on_connection(settings, f"pgenough-{name}", action), settings)


def _show(value: Any, as_json: bool, view: Callable[[], RenderableType]) -> None:
    if as_json:
        # Plain stdout, not rich: rich would wrap and highlight, and the document must parse.
        sys.stdout.write(json.dumps(jsonable.as_json(value), indent=2) + "\n")
    else:
        # Piped into a file, grep or less, a table is not cut to 80 columns (rich's default
        # when it cannot ask a terminal); a terminal gets its own width.
        wide = out if out.is_terminal else Console(width=max(out.width, PIPED_WIDTH))
        wide.print(view())


def _now() -> datetime:
    # Ages in tables are read against this machine's clock; --json carries the timestamps.
    return datetime.now(UTC)


@app.command("status", rich_help_panel=INSPECT_PANEL)
def status_cmd(as_json: JsonOption = False) -> None:
    """Providers (last run, age, counts, throughput), queues, and failures of the last hour."""
    with _needs_service():
        from pgenough.plans import inspect
    view = _inspect("status", inspect.overview)
    _show(view, as_json, lambda: render.overview(view))


@app.command("runs", rich_help_panel=INSPECT_PANEL)
def runs_cmd(
    failed: Annotated[bool, typer.Option("--failed", help="Only failed runs.")] = False,
    status: Annotated[
        str | None,
        typer.Option(help=f"Only runs in this status ({', '.join(RUN_STATUSES)})."),
    ] = None,
    provider: Annotated[str | None, typer.Option(help="Only this provider's runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=BIGINT_MAX, help="At most this many runs.")] = 50,
    before: Annotated[
        int | None,
        typer.Option(min=1, max=BIGINT_MAX, help="Runs older than this run id (the next page)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Runs, newest first."""
    if status is not None and status.upper() not in RUN_STATUSES:
        _fail(f"--status must be one of {', '.join(RUN_STATUSES)}", code=2)
    if failed:
        if status is not None and status.upper() != "FAILED":
            _fail("--failed and --status disagree: give one of them", code=2)
        status = "FAILED"
    with _needs_service():
        from pgenough.plans import inspect
    runs = _inspect(
        "runs",
        lambda conn: inspect.list_runs(
            conn, status=status, provider=provider, limit=limit, before=before
        ),
    )
    _show(runs, as_json, lambda: render.runs_table(runs, _now()))


@app.command("run", rich_help_panel=INSPECT_PANEL)
def run_cmd(
    run_id: Annotated[
        int, typer.Argument(metavar="ID", min=1, max=BIGINT_MAX, help="The run's id.")
    ],
    as_json: JsonOption = False,
) -> None:
    """One run: timings, HTTP attempts, skipped records, failed rows, chunk jobs left."""
    with _needs_service():
        from pgenough.plans import inspect
    detail = _inspect("run", lambda conn: inspect.get_run(conn, run_id))
    if detail is None:
        _fail(f"run {run_id} not found")
    _show(detail, as_json, lambda: render.run_detail(detail, _now()))


@app.command("failures", rich_help_panel=INSPECT_PANEL)
def failures_cmd(
    queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=BIGINT_MAX, help="At most this many jobs and runs.")
    ] = 50,
    as_json: JsonOption = False,
) -> None:
    """Failing jobs with their last error, and the runs that failed in the last hour."""
    with _needs_service():
        from pgenough.plans import inspect

    async def both(conn: AsyncConn) -> dict[str, Any]:
        return {
            "window": inspect.DEFAULT_WINDOW,
            "jobs": await inspect.failed_jobs(conn, queue=queue, limit=limit),
            "runs": await inspect.failed_runs(conn, limit=limit),
        }

    found = _inspect("failures", both)

    _show(
        found,
        as_json,
        lambda: render.failures(found["jobs"], found["runs"], found["window"], _now()),
    )


@app.command("jobs", rich_help_panel=INSPECT_PANEL)
def jobs_cmd(
    state: Annotated[
        str | None,
        typer.Option(help=f"Only jobs in this state ({', '.join(JOB_STATES)})."),
    ] = None,
    queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=BIGINT_MAX, help="At most this many jobs.")] = 50,
    before: Annotated[
        int | None,
        typer.Option(min=1, max=BIGINT_MAX, help="Jobs older than this job id (the next page)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Jobs still queued, newest first: ready, scheduled, running (worker, lease), dead."""
    wanted = None
    if state is not None:
        try:
            wanted = parse_job_state(state.lower())
        except ValueError as exc:
            _fail(f"--{exc}", code=2)
    jobs = _inspect(
        "jobs",
        lambda conn: list_jobs(conn, state=wanted, queue=queue, limit=limit, before=before),
    )
    more = len(jobs) == limit
    run_of = _run_of()
    _show(jobs, as_json, lambda: render.jobs_list(jobs, _now(), run_of=run_of, more=more))


@app.command("job", rich_help_panel=INSPECT_PANEL)
def job_cmd(
    job_id: Annotated[
        int, typer.Argument(metavar="ID", min=1, max=BIGINT_MAX, help="The job's id.")
    ],
    as_json: JsonOption = False,
) -> None:
    """One job: state, attempts, times, worker and lease, payload, every recorded error."""
    job = _inspect("job", lambda conn: get_job(conn, job_id))
    if job is None:
        _fail(f"job {job_id} not found (completed jobs are deleted; it may have finished)")
    run_of = _run_of()
    _show(job, as_json, lambda: render.job_detail(job, _now(), run_of))


@app.command("retry", rich_help_panel=INSPECT_PANEL)
def retry_cmd(
    job_id: Annotated[
        int | None,
        typer.Argument(metavar="ID", min=1, max=BIGINT_MAX, help="The job to run again now."),
    ] = None,
    all_dead: Annotated[
        bool, typer.Option("--all-dead", help="Every dead job instead of one.")
    ] = False,
    queue: Annotated[
        str | None, typer.Option(help="With --all-dead: only this queue's dead jobs.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Make a dead, cancelled or waiting job runnable now (or every dead job)."""
    if (job_id is None) == (not all_dead):
        _fail("give a job ID or --all-dead (exactly one)", code=2)
    if queue is not None and not all_dead:
        _fail("--queue goes with --all-dead", code=2)
    if job_id is not None:
        job = _inspect("retry", lambda conn: repair.retry(conn, job_id))
        _show(job, as_json, lambda: render.job_line("retried", job))
        return
    retried = _inspect("retry", lambda conn: repair.retry_all_dead(conn, queue))
    where = f" of queue {queue}" if queue else ""
    _show(
        {"retried": retried, "queue": queue},
        as_json,
        lambda: render.message(f"retried {retried} dead job(s){where}"),
    )


@app.command("discard", rich_help_panel=INSPECT_PANEL)
def discard_cmd(
    job_id: Annotated[
        int, typer.Argument(metavar="ID", min=1, max=BIGINT_MAX, help="The job to cancel.")
    ],
    as_json: JsonOption = False,
) -> None:
    """Cancel a job that has not finished (it can still be retried until cleaned up)."""
    job = _inspect("discard", lambda conn: repair.discard(conn, job_id))
    _show(job, as_json, lambda: render.job_line("discarded", job))


@app.command("requeue-stuck", rich_help_panel=INSPECT_PANEL)
def requeue_stuck_cmd(as_json: JsonOption = False) -> None:
    """Take back now every claim whose lease expired (a worker died holding it)."""
    result = _inspect("requeue-stuck", repair.requeue_stuck)
    _show(
        result,
        as_json,
        lambda: render.message(
            f"requeued {result.retried} stuck job(s); {result.dead} dead-lettered (attempts spent)"
        ),
    )


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
