"""The plan service's ingestion commands: ``worker fetch``, ``worker process``, and inspecting
runs (``status``, ``runs``, ``run``, ``failures``). The heavy imports (httpx, lxml) are made
inside the commands that need them, so that ``pgenough-plans --help`` stays quick."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from psycopg_pool import AsyncConnectionPool
from rich.console import Console
from rich.table import Table

from pgenough.cli import (
    BIGINT_MAX,
    JsonOption,
    MetricsPortOption,
    fail,
    finite,
    now,
    out,
    ready_pool,
    run,
    serve_metrics,
    session_pool,
    setup_logging,
    show,
)
from pgenough.core import Worker, WorkerStats
from pgenough.core.admin import list_jobs, queue_stats
from pgenough.core.db import AsyncConn
from pgenough.settings import MAX_CONCURRENCY
from pgenough_plans import render
from pgenough_plans.cli.base import plan_settings, read
from pgenough_plans.ingest.runs import RunStatus
from pgenough_plans.settings import PlanSettings

if TYPE_CHECKING:
    from pgenough_plans.ingest.fetch import FetchConfig, RunResult
    from pgenough_plans.ingest.provider import ProviderConfig


async def _ready_pool(
    settings: PlanSettings, name: str, max_size: int | None = None
) -> AsyncConnectionPool:
    """A pool on a database migrated for the plan service, for its workers."""
    from pgenough_plans.ingest.store import MIGRATIONS as PLANS_MIGRATIONS

    return await ready_pool(settings, name, max_size, [PLANS_MIGRATIONS])


def _lower_priority(nice: int) -> None:
    """Bulk ingestion gives the CPU to the API first on a machine they share
    (``PGENOUGH_INGEST_NICE``); its PostgreSQL backends keep their own priority."""
    if nice > 0:
        os.nice(nice)


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
        typer.Option(min=0.1, callback=finite, help="Seconds between fetches (default: settings)."),
    ] = None,
    metrics_port: MetricsPortOption = None,
) -> None:
    """Fetch providers' snapshots into staging: each provider at most once per interval
    across every fetch replica, under its lock; SIGTERM ends fetches in flight as FAILED."""
    from pgenough_plans.ingest.fetch import fetch_loop

    settings = plan_settings()
    setup_logging(settings)
    _lower_priority(settings.ingest_nice)
    try:
        providers = settings.provider_configs(provider)
    except ValueError as exc:
        fail(str(exc), code=2)
    if not providers:
        fail("no providers: pass --provider NAME=URL or set PGENOUGH_PROVIDERS", code=2)
    owner = f"fetch-{uuid.uuid4().hex[:12]}"
    config = settings.fetch_config()
    serve_metrics(settings, metrics_port)

    async def main() -> int:
        pool = await _ready_pool(settings, owner, max_size=len(providers) + 2)
        # Each provider's lock is a session lock held for its whole fetch: direct sessions
        # behind a transaction pooler.
        lock_pool = await session_pool(settings, owner, max_size=len(providers))
        # SIGTERM/SIGINT end fetches in flight at once: their runs end FAILED ("worker
        # stopped") and their provider locks are released.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            if once:
                results = await _fetch_once(pool, providers, owner, config, stop, lock_pool)
                _print_runs(results)
                return (
                    1 if any(r is not None and r.status == RunStatus.FAILED for r in results) else 0
                )
            await fetch_loop(
                pool,
                providers,
                interval or settings.fetch_interval,
                stop,
                config,
                owner=owner,
                lock_pool=lock_pool,
            )
            return 0
        finally:
            if lock_pool is not None:
                await lock_pool.close()
            await pool.close()

    raise typer.Exit(run(main, settings))


async def _fetch_once(
    pool: AsyncConnectionPool,
    providers: Sequence[ProviderConfig],
    owner: str,
    config: FetchConfig,
    stop: asyncio.Event,
    lock_pool: AsyncConnectionPool | None = None,
) -> list[RunResult | None]:
    """``fetch_all``, with a live line per provider when someone watches stderr."""
    from pgenough_plans import progress
    from pgenough_plans.ingest.fetch import fetch_all

    console = progress.console()
    if console is None:
        return await fetch_all(pool, providers, config, owner=owner, stop=stop, lock_pool=lock_pool)
    display = progress.FetchDisplay(console, [p.name for p in providers])
    with display.shown():
        return await fetch_all(
            pool,
            providers,
            config,
            owner=owner,
            on_progress=display.update,
            stop=stop,
            lock_pool=lock_pool,
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
    from pgenough_plans import progress
    from pgenough_plans.ingest.process import process_worker

    settings = plan_settings()
    setup_logging(settings)
    _lower_priority(settings.ingest_nice)
    config = settings.worker_config(batch_size=1, concurrency=concurrency)
    serve_metrics(settings, metrics_port)

    async def main() -> int:
        pool = await _ready_pool(
            settings,
            "pgenough-process",
            max_size=max(settings.pool_max_size, config.concurrency + 4),
        )
        try:
            worker = process_worker(
                pool, config, settings.pacing_config(), listen_url=settings.session_url()
            )
            console = progress.console() if until_idle else None
            if console is None:
                stats = await worker.run(until_idle=until_idle, handle_signals=True)
            else:
                stats = await _drain_with_progress(pool, worker, console)
            out.print(f"chunks applied: {stats.completed}, failed attempts: {stats.failed}")
            return 0
        finally:
            await pool.close()

    raise typer.Exit(run(main, settings))


async def _drain_with_progress(
    pool: AsyncConnectionPool, worker: Worker, console: Console
) -> WorkerStats:
    """``worker.run(until_idle=True)`` under a bar of the chunks claimable at the start."""
    from pgenough_plans import progress
    from pgenough_plans.ingest.process import PLANS_QUEUE

    async with pool.connection() as conn:
        plans = [q for q in await queue_stats(conn) if q.queue == PLANS_QUEUE]
    total = sum(q.ready + q.running for q in plans)
    display = progress.ChunkDisplay(console, total)
    work = asyncio.create_task(worker.run(until_idle=True, handle_signals=True))
    await display.follow(lambda: (worker.stats.completed, worker.stats.failed), work)
    return await work


def status_cmd(as_json: JsonOption = False) -> None:
    """Providers (last run, age, counts, throughput), queues, and failures of the last hour."""
    from pgenough_plans.ingest import inspect

    view = read("status", inspect.overview)
    show(view, as_json, lambda: render.overview(view))


def runs_cmd(
    failed: Annotated[bool, typer.Option("--failed", help="Only failed runs.")] = False,
    status: Annotated[
        str | None,
        typer.Option(help=f"Only runs in this status ({RunStatus.choices()})."),
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
    if status is not None and RunStatus.lookup(status) is None:
        fail(f"--status must be one of {RunStatus.choices()}", code=2)
    if failed:
        if status is not None and RunStatus.lookup(status) != RunStatus.FAILED:
            fail("--failed and --status disagree: give one of them", code=2)
        status = RunStatus.FAILED
    from pgenough_plans.ingest import inspect

    runs = read(
        "runs",
        lambda conn: inspect.list_runs(
            conn, status=status, provider=provider, limit=limit, before=before
        ),
    )
    show(runs, as_json, lambda: render.runs_table(runs, now()))


def run_cmd(
    run_id: Annotated[
        int, typer.Argument(metavar="ID", min=1, max=BIGINT_MAX, help="The run's id.")
    ],
    as_json: JsonOption = False,
) -> None:
    """One run: timings, HTTP attempts, skipped records, failed rows, chunk jobs left."""
    from pgenough_plans.ingest import inspect

    detail = read("run", lambda conn: inspect.get_run(conn, run_id))
    if detail is None:
        fail(f"run {run_id} not found")
    show(detail, as_json, lambda: render.run_detail(detail, now()))


def failures_cmd(
    limit: Annotated[
        int, typer.Option(min=1, max=BIGINT_MAX, help="At most this many jobs and runs.")
    ] = 50,
    as_json: JsonOption = False,
) -> None:
    """Failing jobs of the plans queue (dead, or waiting to retry) and the runs that failed in
    the last hour. Every queue's failing jobs: `pgenough failures`."""
    from pgenough_plans.ingest import inspect
    from pgenough_plans.ingest.process import PLANS_QUEUE

    async def both(conn: AsyncConn) -> dict[str, Any]:
        return {
            "jobs": await list_jobs(conn, queue=PLANS_QUEUE, failing=True, limit=limit),
            "window": inspect.DEFAULT_WINDOW,
            "runs": await inspect.failed_runs(conn, limit=limit),
        }

    found = read("failures", both)
    show(
        found,
        as_json,
        lambda: render.failures(found["jobs"], found["runs"], found["window"], now()),
    )
