"""pgenough's commands: ``migrate``, ``worker run``, ``status``, inspecting and repairing
jobs (``jobs``, ``job``, ``failures``, ``retry``, ``discard``, ``requeue-stuck``), pausing and
resuming a queue (``pause``, ``resume``) and limiting it across the fleet (``limit``). They
need only the core (the library with no extra)."""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass
from typing import Annotated

import typer

from pgenough import render
from pgenough.cli.base import (
    BIGINT_MAX,
    fail,
    finite,
    load_settings,
    out,
    quiet_jobs,
    run,
    setup_logging,
)
from pgenough.cli.inspecting import JsonOption, inspect, now, show
from pgenough.cli.workers import MetricsPortOption, ready_pool, serve_metrics
from pgenough.core import get_job, migrate, open_pool, repair
from pgenough.core.admin import (
    JOB_STATES,
    JobFailures,
    PeriodicInfo,
    QueuePoint,
    QueueStats,
    WorkerInfo,
    check_limits,
    clear_queue_limit,
    job_failures,
    list_jobs,
    list_periodic,
    list_workers,
    parse_job_state,
    pause_queue,
    queue_history,
    queue_stats,
    resume_queue,
    set_queue_limit,
)
from pgenough.core.migrations import schema_version
from pgenough.core.statements import AsyncConn
from pgenough.core.tasks import AppNotFound, load_app
from pgenough.core.worker.config import MAX_BATCH_SIZE, MAX_CONCURRENCY, parse_queues
from pgenough.dashboard.schema import MIGRATIONS as DASHBOARD_MIGRATIONS
from pgenough.settings import Settings

STATUS_WINDOW = 3600.0
"""Seconds of failures ``pgenough status`` counts."""


def migrate_cmd() -> None:
    """Create or upgrade pgenough's schema, the dashboard's table included (safe when
    replicas run it at the same time)."""
    settings = load_settings(Settings)
    setup_logging(settings)

    async def main() -> tuple[int, list[str]]:
        pool = await open_pool(settings.resolve_database_url(), max_size=1, name="pgenough-migrate")
        try:
            async with pool.connection() as conn:
                # The dashboard's track too: its SQL ships with the library, extra or not.
                applied = await migrate(conn, [DASHBOARD_MIGRATIONS])
                return (
                    await schema_version(conn),
                    [f"{m.track}/{m.version:04d}_{m.name}" for m in applied],
                )
        finally:
            await pool.close()

    version, applied = run(main, settings)
    for name in applied:
        out.print(f"applied {name}")
    out.print(f"schema version {version}")


@dataclass(frozen=True)
class Status:
    """What ``pgenough status`` shows (and prints with ``--json``)."""

    window: float
    queues: list[QueueStats]
    failures: JobFailures
    throughput: list[QueuePoint]
    """Per queue and minute of the window: jobs completed, attempts failed, dead-lettered."""
    workers: list[WorkerInfo]
    periodic: list[PeriodicInfo]


def status_cmd(as_json: JsonOption = False) -> None:
    """Every queue (depth, oldest ready, the last hour's throughput and failures), the
    workers (alive or gone, what each runs) and the periodic tasks (last and next run, missed
    ticks)."""

    async def read(conn: AsyncConn) -> Status:
        return Status(
            STATUS_WINDOW,
            await queue_stats(conn),
            await job_failures(conn, STATUS_WINDOW),
            await queue_history(conn, window=STATUS_WINDOW),
            await list_workers(conn),
            await list_periodic(conn),
        )

    found = inspect("status", read)
    show(found, as_json, lambda: render.status_view(found, now()))


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
            callback=finite,
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
    settings = load_settings(Settings)
    setup_logging(settings)
    if quiet:
        quiet_jobs()
    queues = _queue_option(queue)
    try:
        app = load_app(app_spec)
    except AppNotFound as exc:
        fail(str(exc), code=2)
    config = settings.worker_config(batch_size=batch_size, shutdown_timeout=shutdown_timeout)
    serve_metrics(settings, metrics_port)
    log = logging.getLogger("pgenough.cli")
    if app.eager:
        log.warning(
            "%s is eager (App(eager=True) or PGENOUGH_EAGER): a job its tasks enqueue runs at"
            " once in the enqueuing task, not on a worker; eager is for tests",
            app_spec,
        )

    async def main() -> int:
        name = f"worker-{uuid.uuid4().hex[:12]}"
        pool = await ready_pool(settings, name, layers=app.migrations)
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

    raise typer.Exit(run(main, settings))


def jobs_cmd(
    state: Annotated[
        str | None,
        typer.Option(help=f"Only jobs in this state ({', '.join(JOB_STATES)})."),
    ] = None,
    queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
    task: Annotated[
        str | None, typer.Option(help="Only jobs of this task (the job's kind).")
    ] = None,
    text: Annotated[
        str | None,
        typer.Option(
            help="Only jobs whose payload, as JSON text, contains this (case-insensitive).",
        ),
    ] = None,
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
            fail(f"--{exc}", code=2)
    jobs = inspect(
        "jobs",
        lambda conn: list_jobs(
            conn, state=wanted, queue=queue, kind=task, text=text, limit=limit, before=before
        ),
    )
    more = len(jobs) == limit
    show(jobs, as_json, lambda: render.jobs_list(jobs, now(), more=more))


def job_cmd(
    job_id: Annotated[
        int, typer.Argument(metavar="ID", min=1, max=BIGINT_MAX, help="The job's id.")
    ],
    as_json: JsonOption = False,
) -> None:
    """One job: state, attempts, times, worker and lease, payload, every recorded error."""
    job = inspect("job", lambda conn: get_job(conn, job_id))
    if job is None:
        fail(f"job {job_id} not found (completed jobs are deleted; it may have finished)")
    show(job, as_json, lambda: render.job_detail(job, now()))


def failures_cmd(
    queue: Annotated[str | None, typer.Option(help="Only jobs of this queue.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=BIGINT_MAX, help="At most this many jobs.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """Failing jobs with their last error: dead, or waiting to retry."""
    jobs = inspect("failures", lambda conn: list_jobs(conn, queue=queue, failing=True, limit=limit))
    show({"jobs": jobs}, as_json, lambda: render.jobs_table(jobs, now()))


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
        fail("give a job ID or --all-dead (exactly one)", code=2)
    if queue is not None and not all_dead:
        fail("--queue goes with --all-dead", code=2)
    if job_id is not None:
        job = inspect("retry", lambda conn: repair.retry(conn, job_id))
        show(job, as_json, lambda: render.job_line("retried", job))
        return
    retried = inspect("retry", lambda conn: repair.retry_all_dead(conn, queue))
    where = f" of queue {queue}" if queue else ""
    show(
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
    job = inspect("discard", lambda conn: repair.discard(conn, job_id))
    show(job, as_json, lambda: render.job_line("discarded", job))


def requeue_stuck_cmd(as_json: JsonOption = False) -> None:
    """Take back now every claim whose lease expired (a worker died holding it)."""
    result = inspect("requeue-stuck", repair.requeue_stuck)
    show(
        result,
        as_json,
        lambda: render.message(
            f"requeued {result.retried} stuck job(s); {result.dead} dead-lettered (attempts spent)"
        ),
    )


QueueArgument = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue's name.")]


def pause_cmd(
    queue: QueueArgument,
    reason: Annotated[
        str | None, typer.Option(help="Why, shown with the pause (status, dashboard).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Pause a queue on every worker: none claims its jobs until it is resumed (running
    jobs run on; enqueueing goes on)."""
    if not queue.strip():
        fail("give a queue name", code=2)
    paused = inspect("pause", lambda conn: pause_queue(conn, queue, reason=reason))
    what = f"paused queue {queue}" if paused else f"queue {queue} was already paused"
    show({"queue": queue, "paused": paused}, as_json, lambda: render.message(what))


def resume_cmd(queue: QueueArgument, as_json: JsonOption = False) -> None:
    """Resume a paused queue: its idle workers claim at once."""
    resumed = inspect("resume", lambda conn: resume_queue(conn, queue))
    what = f"resumed queue {queue}" if resumed else f"queue {queue} was not paused"
    show({"queue": queue, "resumed": resumed}, as_json, lambda: render.message(what))


RATE = re.compile(r"^(\d+)/(\d+(?:\.\d+)?)s?$")
"""``--rate``'s form: STARTS/SECONDS, the seconds optionally followed by ``s``."""


def limit_cmd(
    queue: QueueArgument,
    running: Annotated[
        int | None,
        typer.Argument(
            metavar="N", min=1, max=MAX_CONCURRENCY, help="At most N of its jobs run at once."
        ),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(
            metavar="M/Ts", help="At most M of its jobs start in any T seconds, e.g. 100/60s."
        ),
    ] = None,
    off: Annotated[bool, typer.Option("--off", help="Lift the queue's limits.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Let at most N jobs of a queue run at once across every worker, and at most M start in
    any T seconds (or lift its limits). Giving either replaces what the queue had."""
    if (running is None and rate is None) == (not off):
        fail("give a limit N, a --rate M/Ts, or --off", code=2)
    if not queue.strip():
        fail("give a queue name", code=2)
    if off:
        lifted = inspect("limit", lambda conn: clear_queue_limit(conn, queue))
        what = f"queue {queue}: limits lifted" if lifted else f"queue {queue} had no limits"
        shown: dict[str, object] = {"queue": queue, "max_running": None}
        shown |= {"rate_count": None, "rate_interval": None}
        show(shown, as_json, lambda: render.message(what))
        return
    starts, per = None, None
    if rate is not None:
        matched = RATE.match(rate.strip())
        if matched is None:
            fail(f"--rate {rate!r}: write it as STARTS/SECONDS, e.g. 100/60s", code=2)
        starts, per = int(matched.group(1)), float(matched.group(2))
    try:
        check_limits(queue, running, starts, per)
    except ValueError as exc:
        fail(str(exc), code=2)
    inspect("limit", lambda conn: set_queue_limit(conn, queue, running, starts=starts, per=per))
    parts = [] if running is None else [f"at most {running} job(s) run at once"]
    if starts is not None:
        parts.append(f"at most {starts} start(s) in any {per:g}s")
    what = f"queue {queue}: {' and '.join(parts)} across the fleet"
    shown = {"queue": queue, "max_running": running}
    shown |= {"rate_count": starts, "rate_interval": per}
    show(shown, as_json, lambda: render.message(what))
