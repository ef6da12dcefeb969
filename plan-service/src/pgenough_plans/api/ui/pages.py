"""The dashboard's read pages (overview, runs, failures, jobs), its overview as JSON, and the
live overview's event stream.

Pages read through ``plans.inspect`` and the core's job reads (``list_jobs``, ``get_job``) on
the dashboard's own pool: on a read replica within the lag bound when there are some
(``state.reading``: not one behind the browser's own last action), else the primary. Each page
says where it read, and how far behind that replica was (``Pages.render``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Final

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from pgenough.cli import as_json
from pgenough.core import JOB_STATES, get_job, list_jobs, parse_job_state, queue_stats
from pgenough_plans.api.replica import Read
from pgenough_plans.api.ui import params
from pgenough_plans.api.ui.deps import Authed, PagesDep, read_headers, ui_router
from pgenough_plans.api.ui.errors import UiError, not_found
from pgenough_plans.api.ui.live import FeedFull
from pgenough_plans.api.ui.state import UiState, reading
from pgenough_plans.ingest import inspect
from pgenough_plans.ingest.runs import RunStatus

KEEPALIVE: Final = 15.0
RECONNECT_MS: Final = 2000
FAILED_JOBS_SHOWN: Final = 200
FAILED_RUNS_SHOWN: Final = 50

router = ui_router()


def read_page(request: Request, ui: UiState) -> contextlib.AbstractAsyncContextManager[Read]:
    """Where a page reads: ``state.reading``, held to the browser's last action."""
    return reading(ui, ui.auth.read_wrote(request))


@router.get("", name="ui_overview")
@router.get("/")
async def overview(request: Request, ui: Authed, pages: PagesDep) -> Response:
    async with read_page(request, ui) as read:
        conn = read.conn
        view = await inspect.overview(conn)
    return pages.render(
        request,
        ui,
        "overview.html",
        {"view": view, "data": as_json(view), "nav": "overview"},
        read=read,
    )


@router.get("/api/overview")
async def overview_json(request: Request, ui: Authed) -> Response:
    async with read_page(request, ui) as read:
        conn = read.conn
        view = await inspect.overview(conn)
    body = json.dumps({"data": as_json(view), "error": None})
    return Response(body, media_type="application/json", headers=read_headers(ui, read))


@router.get("/runs")
async def runs(
    request: Request,
    ui: Authed,
    pages: PagesDep,
    status: str = "",
    provider: str = "",
    before: str = "",
) -> Response:
    status = params.text("status", status).upper()
    provider = params.text("provider", provider)
    before_id = params.optional_id("before", before, "a run id")
    if status and RunStatus.lookup(status) is None:
        raise params.bad(f"status must be one of {RunStatus.choices()}")
    limit = ui.config.runs_page
    async with read_page(request, ui) as read:
        conn = read.conn
        found = await inspect.list_runs(
            conn,
            status=status or None,
            provider=provider or None,
            limit=limit + 1,
            before=before_id,
        )
        providers = await inspect.provider_names(conn)
    shown = found[:limit]
    older = shown[-1].id if len(found) > limit else None
    return pages.render(
        request,
        ui,
        "runs.html",
        {
            "runs": shown,
            "older": older,
            "status": status,
            "provider": provider,
            "before": "" if before_id is None else str(before_id),
            "statuses": list(RunStatus),
            "providers": providers,
            "nav": "runs",
        },
        read=read,
    )


@router.get("/runs/{run_id:int}")
async def run(request: Request, ui: Authed, pages: PagesDep, run_id: int) -> Response:
    params.checked_id("the run id", run_id, "a run id")
    async with read_page(request, ui) as read:
        conn = read.conn
        detail = await inspect.get_run(conn, run_id)
    if detail is None:
        raise not_found(f"there is no run {run_id}")
    return pages.render(request, ui, "run.html", {"run": detail, "nav": "runs"}, read=read)


@router.get("/failures")
async def failures(request: Request, ui: Authed, pages: PagesDep) -> Response:
    async with read_page(request, ui) as read:
        conn = read.conn
        jobs = await inspect.failed_jobs(conn, limit=FAILED_JOBS_SHOWN)
        runs = await inspect.list_runs(conn, status=RunStatus.FAILED, limit=FAILED_RUNS_SHOWN)
    dead = sum(1 for j in jobs if j.state == "dead")
    return pages.render(
        request,
        ui,
        "failures.html",
        {"jobs": jobs, "runs": runs, "dead": dead, "nav": "failures"},
        read=read,
    )


@router.get("/jobs")
async def jobs(
    request: Request,
    ui: Authed,
    pages: PagesDep,
    state: str = "",
    queue: str = "",
    before: str = "",
) -> Response:
    state = params.text("state", state).lower()
    queue = params.text("queue", queue)
    before_id = params.optional_id("before", before, "a job id")
    if state:
        try:
            parse_job_state(state)
        except ValueError as exc:
            raise params.bad(str(exc)) from None
    limit = ui.config.jobs_page
    async with read_page(request, ui) as read:
        conn = read.conn
        found = await list_jobs(
            conn,
            state=state or None,
            queue=queue or None,
            limit=limit + 1,
            before=before_id,
        )
        counts = await queue_stats(conn)
    shown = found[:limit]
    older = shown[-1].id if len(found) > limit else None
    return pages.render(
        request,
        ui,
        "jobs.html",
        {
            "jobs": shown,
            "older": older,
            "state": state,
            "queue": queue,
            "before": "" if before_id is None else str(before_id),
            "states": JOB_STATES,
            "totals": inspect.state_totals(counts, queue or None),
            "queues": [c.queue for c in counts],
            # Relative times are read against this host's clock, as the CLI's are; the
            # instants beside them are the database's own.
            "now": datetime.now(UTC),
            "nav": "jobs",
        },
        read=read,
    )


@router.get("/jobs/{job_id:int}")
async def job(request: Request, ui: Authed, pages: PagesDep, job_id: int) -> Response:
    params.checked_id("the job id", job_id, "a job id")
    async with read_page(request, ui) as read:
        conn = read.conn
        record = await get_job(conn, job_id)
    if record is None:
        raise not_found(
            f"there is no job {job_id}: completed jobs are deleted; it may have finished"
        )
    return pages.render(
        request,
        ui,
        "job.html",
        {"job": record, "now": datetime.now(UTC), "nav": "jobs"},
        read=read,
    )


@router.get("/events")
async def events(request: Request, ui: Authed) -> Response:
    if ui.feed.full:
        raise UiError(503, "TOO_BUSY", f"{ui.feed.max_clients} browsers already follow")

    async def stream() -> AsyncIterator[str]:
        # Attached here, not before the response: the generator's ``finally`` is what
        # detaches, and it only runs once the generator has started.
        try:
            queue = ui.feed.attach()
        except FeedFull:
            return  # lost a race for the last slot: the browser retries
        try:
            yield f"retry: {RECONNECT_MS}\n\n"
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE):
                        event = await queue.get()
                except TimeoutError:
                    # A comment line: keeps proxies from closing an idle stream and finds
                    # a vanished client at the next write.
                    yield ": keep-alive\n\n"
                    continue
                if event is None:
                    return
                yield event.encode()
        finally:
            ui.feed.detach(queue)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )
