"""The messaging core's commands: ``migrate``, ``worker run``, and inspecting and repairing
jobs (``jobs``, ``job``, ``failures``, ``retry``, ``discard``, ``requeue-stuck``). They work
where only the core is installed (``failures`` adds the plan service's failed runs where it
is installed)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any

import typer

from pgenough import render
from pgenough.cli.base import (
    BIGINT_MAX,
    _extra_missing,
    _fail,
    _finite,
    _needs_service,
    _run,
    _settings,
    _setup_logging,
    out,
    quiet_jobs,
)
from pgenough.cli.inspecting import JsonOption, _inspect, _now, _show
from pgenough.cli.workers import MetricsPortOption, _ready_core_pool, _serve_metrics
from pgenough.core import (
    JOB_STATES,
    AppNotFound,
    MigrationSet,
    get_job,
    list_jobs,
    load_app,
    migrate,
    open_pool,
    parse_job_state,
    repair,
    schema_version,
)
from pgenough.core.statements import AsyncConn
from pgenough.core.worker_options import MAX_BATCH_SIZE, MAX_CONCURRENCY, parse_queues


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
            settings.resolve_database_url(),
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


def _queue_option(values: list[str] | None) -> dict[str, int | None] | None:
    """``--queue NAME`` or ``--queue NAME=CONCURRENCY``, repeated; None when not given."""
    if not values:
        return None
    try:
        return parse_queues(values)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--queue'") from None


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
    batch_size: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=MAX_BATCH_SIZE,
            help=f"Most jobs one claim takes, 1..{MAX_BATCH_SIZE}: a batch task gets at most"
            " this many (and no more than the concurrency) per call (default: settings, 10).",
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
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            help="No line per job done (failures are still logged, with their traceback);"
            " or PGENOUGH_LOG_JOBS=0.",
        ),
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
    if quiet:
        quiet_jobs()
    queues = _queue_option(queue)
    try:
        app = load_app(app_spec)
    except AppNotFound as exc:
        _fail(str(exc), code=2)
    overrides: dict[str, object] = {}
    if shutdown_timeout is not None:
        overrides["shutdown_timeout"] = shutdown_timeout
    if batch_size is not None:
        overrides["batch_size"] = batch_size
    config = settings.worker_config(**overrides)
    _serve_metrics(settings, metrics_port)
    log = logging.getLogger("pgenough.cli")
    if app.eager:
        log.warning(
            "%s is eager (App(eager=True) or PGENOUGH_EAGER): a job its tasks enqueue runs at"
            " once in the enqueuing task, not on a worker; eager is for tests",
            app_spec,
        )

    async def main() -> int:
        name = f"worker-{uuid.uuid4().hex[:12]}"
        pool = await _ready_core_pool(settings, name, layers=app.migrations)
        try:
            worker = app.worker(
                pool,
                queues=queues,
                concurrency=concurrency,
                name=name,
                config=config,
                listen_url=settings.session_url(),
            )
            # Each running job may hold a connection, and so may each queue's claim loop and
            # heartbeat and the process's duties: never wait on the pool for them.
            needed = sum(c.concurrency for c in worker.configs) + 2 * len(worker.configs) + 3
            await pool.resize(pool.min_size, max(pool.max_size, needed))
            log.info(
                "%s: %d task(s); queues %s; batch size %d",
                name,
                len(app.tasks),
                ", ".join(f"{c.queue} ({c.concurrency})" for c in worker.configs),
                config.batch_size,
            )
            stats = await worker.run(until_idle=until_idle, handle_signals=True)
            log.info("%s stopped: %s", name, stats.summary())
            return 0
        finally:
            await pool.close()

    raise typer.Exit(_run(main, settings))


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


def failures_cmd(
    queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=BIGINT_MAX, help="At most this many jobs and runs.")
    ] = 50,
    as_json: JsonOption = False,
) -> None:
    """Failing jobs with their last error (dead, or waiting to retry), and, where the plan
    service is installed, the runs that failed in the last hour."""
    failed_runs = _failed_runs()

    async def both(conn: AsyncConn) -> dict[str, Any]:
        found: dict[str, Any] = {
            "jobs": await list_jobs(conn, queue=queue, failing=True, limit=limit)
        }
        if failed_runs is not None:
            window, runs = failed_runs
            found.update(window=window, runs=await runs(conn, limit=limit))
        return found

    found = _inspect("failures", both)
    if "runs" not in found:  # a core-only install: jobs are all there is
        _show(found, as_json, lambda: render.jobs_table(found["jobs"], _now()))
        return
    _show(
        found,
        as_json,
        lambda: render.failures(found["jobs"], found["runs"], found["window"], _now()),
    )


def _failed_runs() -> tuple[float, Callable[..., Awaitable[Any]]] | None:
    """The plan service's failed runs query and its window, None where only the core is
    installed (failing jobs are the core's; runs are the plan service's, and their tables
    exist only where ``pgenough migrate`` has the service's layers to apply)."""
    if not _service_layers():
        return None
    from pgenough.plans import inspect

    return inspect.DEFAULT_WINDOW, inspect.failed_runs


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


def discard_cmd(
    job_id: Annotated[
        int, typer.Argument(metavar="ID", min=1, max=BIGINT_MAX, help="The job to cancel.")
    ],
    as_json: JsonOption = False,
) -> None:
    """Cancel a job that has not finished (it can still be retried until cleaned up)."""
    job = _inspect("discard", lambda conn: repair.discard(conn, job_id))
    _show(job, as_json, lambda: render.job_line("discarded", job))


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
