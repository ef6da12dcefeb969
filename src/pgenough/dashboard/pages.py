"""The dashboard's read pages: the overview (and its JSON) with the queues' throughput and
backlog over a chosen window, of all of them or one (and that history's JSON), the jobs
(filtered by queue, task, state and payload text), a job with every failed attempt and its
traceback, the failures (dead letters, with bulk actions), the workers and what each runs,
the periodic tasks, and the live overview's event stream.

Pages read through ``View.read`` (the dashboard's reader: its own pool, unless the
application gives another) and the core's public reads (``queue_stats``, ``list_jobs``,
``get_job``, ``job_failures_by_queue``, ``queue_trend``, ``list_workers``,
``list_periodic``); the overview adds each extension's sections.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Final

from fastapi.responses import Response, StreamingResponse

from pgenough.core import get_job
from pgenough.core.admin import (
    JOB_STATES,
    list_jobs,
    list_periodic,
    list_workers,
    parse_job_state,
    paused_queues,
    queue_stats,
)
from pgenough.core.failures import ERRORS_KEPT, TRACEBACKS_KEPT
from pgenough.core.registry import ALIVE_AFTER, GONE_RETENTION
from pgenough.dashboard import params
from pgenough.dashboard.errors import DashboardError, not_found
from pgenough.dashboard.extension import Link, extension_router
from pgenough.dashboard.history import DEFAULT, WINDOWS, History, read_history, window_param
from pgenough.dashboard.live import FeedFull
from pgenough.dashboard.overview import Overview, database_now, read_overview, state_totals
from pgenough.dashboard.views import View, ViewDep, read_headers
from pgenough.jsonable import as_json

KEEPALIVE: Final = 15.0
RECONNECT_MS: Final = 2000
FAILING: Final = ("dead", "ready")
"""The states a failing job is in: dead, or waiting to retry (``ready`` after a failure)."""

NAVIGATION: Final = (
    Link("Overview", "/", "overview"),
    Link("Jobs", "/jobs", "jobs"),
    Link("Failures", "/failures", "failures"),
    Link("Workers", "/workers", "workers"),
    Link("Periodic", "/periodic", "periodic"),
)
"""The dashboard's own entries of the navigation; the extensions' follow."""

router = extension_router()


async def _overview(view: View) -> Overview:
    async with view.read() as conn:
        return await read_overview(conn, view.config.failure_window, view.ui.sections)


@router.get("/", name="overview")
async def overview(view: ViewDep, window: str = "", queue: str = "") -> Response:
    chosen = window_param(window)
    queue = params.text("queue", queue)
    async with view.read() as conn:
        found = await read_overview(conn, view.config.failure_window, view.ui.sections)
        history = found.history
        if chosen != DEFAULT or queue:
            history = await read_history(conn, chosen, queue)
    return view.render(
        "overview.html",
        {
            "view": found,
            "data": as_json(found),
            "history": history,
            "history_data": as_json(history),
            "windows": WINDOWS,
            "queues": _history_queues(found, queue),
        },
        nav="overview",
    )


def _history_queues(found: Overview, chosen: str) -> list[str]:
    """The queues the history may show: those of the overview, and the one chosen."""
    names = {q.queue for q in found.queues}
    return sorted(names | {chosen} if chosen else names)


@router.get("/api/overview")
async def overview_json(view: ViewDep) -> Response:
    found = await _overview(view)
    return _json(view, found)


@router.get("/api/history")
async def history_json(view: ViewDep, window: str = "", queue: str = "") -> Response:
    chosen = window_param(window)
    queue = params.text("queue", queue)
    async with view.read() as conn:
        found = await read_history(conn, chosen, queue)
    return _json(view, found)


def _json(view: View, found: Overview | History) -> Response:
    body = json.dumps({"data": as_json(found), "error": None})
    return Response(body, media_type="application/json", headers=read_headers(view.last_read))


@router.get("/workers")
async def workers(view: ViewDep) -> Response:
    async with view.read() as conn:
        found = await list_workers(conn)
        now = await database_now(conn)
    return view.render(
        "workers.html",
        {
            "workers": found,
            "alive": sum(w.alive for w in found),
            "running": sum(w.running_count for w in found),
            "alive_after": ALIVE_AFTER,
            "gone_retention": GONE_RETENTION,
            "now": now,
        },
        nav="workers",
    )


@router.get("/periodic")
async def periodic(view: ViewDep) -> Response:
    async with view.read() as conn:
        found = await list_periodic(conn)
        now = await database_now(conn)
    return view.render(
        "periodic.html",
        {
            "tasks": found,
            "overdue": sum(t.overdue > 0 for t in found),
            "now": now,
        },
        nav="periodic",
    )


def _filters(state: str, queue: str, task: str, text: str) -> dict[str, str]:
    """The jobs filters of a query string, checked: a 400 page names a bad one."""
    filters = {
        "state": params.text("state", state).lower(),
        "queue": params.text("queue", queue),
        "task": params.text("task", task),
        "text": params.text("text", text),
    }
    if filters["state"]:
        try:
            parse_job_state(filters["state"])
        except ValueError as exc:
            raise params.bad(str(exc)) from None
    return filters


@router.get("/jobs")
async def jobs(
    view: ViewDep,
    state: str = "",
    queue: str = "",
    task: str = "",
    text: str = "",
    before: str = "",
) -> Response:
    filters = _filters(state, queue, task, text)
    before_id = params.optional_id("before", before, "a job id")
    limit = view.config.jobs_page
    async with view.read() as conn:
        found = await list_jobs(
            conn,
            state=filters["state"] or None,
            queue=filters["queue"] or None,
            kind=filters["task"] or None,
            text=filters["text"] or None,
            limit=limit + 1,
            before=before_id,
        )
        counts = await queue_stats(conn)
        pauses = {p.queue: p for p in await paused_queues(conn)} if filters["queue"] else {}
    shown = found[:limit]
    older = shown[-1].id if len(found) > limit else None
    return view.render(
        "jobs.html",
        {
            "jobs": shown,
            "older": older,
            "filters": filters,
            "before": "" if before_id is None else str(before_id),
            "states": JOB_STATES,
            "totals": state_totals(counts, filters["queue"] or None),
            "queues": [c.queue for c in counts],
            "pauses": pauses,
            # Relative times are read against this host's clock, as the CLI's are; the
            # instants beside them are the database's own.
            "now": datetime.now(UTC),
        },
        nav="jobs",
    )


@router.get("/jobs/{job_id:int}")
async def job(view: ViewDep, job_id: int) -> Response:
    params.checked_id("the job id", job_id, "a job id")
    async with view.read() as conn:
        record = await get_job(conn, job_id)
    if record is None:
        raise not_found(
            f"there is no job {job_id}: completed jobs are deleted; it may have finished"
        )
    return view.render(
        "job.html",
        {
            "job": record,
            "now": datetime.now(UTC),
            "errors_kept": ERRORS_KEPT,
            "tracebacks_kept": TRACEBACKS_KEPT,
        },
        nav="jobs",
    )


@router.get("/failures")
async def failures(
    view: ViewDep,
    state: str = "",
    queue: str = "",
    task: str = "",
    text: str = "",
    before: str = "",
) -> Response:
    filters = _filters(state, queue, task, text)
    if filters["state"] not in ("", *FAILING):
        raise params.bad("state must be dead or ready (waiting to retry), or empty for both")
    before_id = params.optional_id("before", before, "a job id")
    limit = view.config.jobs_page
    async with view.read() as conn:
        found = await list_jobs(
            conn,
            failing=True,
            state=filters["state"] or None,
            queue=filters["queue"] or None,
            kind=filters["task"] or None,
            text=filters["text"] or None,
            limit=limit + 1,
            before=before_id,
        )
        counts = await queue_stats(conn)
    shown = found[:limit]
    older = shown[-1].id if len(found) > limit else None
    return view.render(
        "failures.html",
        {
            "jobs": shown,
            "older": older,
            "filters": filters,
            "before": "" if before_id is None else str(before_id),
            "queues": [c.queue for c in counts],
            "now": datetime.now(UTC),
        },
        nav="failures",
    )


@router.get("/events")
async def events(view: ViewDep) -> Response:
    feed = view.ui.feed
    if feed.full:
        raise DashboardError(503, "TOO_BUSY", f"{feed.max_clients} browsers already follow")

    async def stream() -> AsyncIterator[str]:
        # Attached here, not before the response: the generator's ``finally`` is what
        # detaches, and it only runs once the generator has started.
        try:
            queue = feed.attach()
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
            feed.detach(queue)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )
