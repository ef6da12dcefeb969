"""The dashboard's actions: retry or discard one job; retry or discard the jobs checked in a
list (``/jobs/retry``, ``/jobs/discard``), or every dead job a filter matches
(``/jobs/retry-dead``, ``/jobs/discard-dead``); pause or resume a queue (``/queues/pause``,
``/queues/resume``).

Each changes state only through the core's repairs, one statement or one transaction, on the
dashboard's pool, then redirects (303) back with a flash message; each first checks the
login, that actions are enabled and the CSRF token. Where the reader reads elsewhere than the
pool (the plan service's replicas), the redirect also carries what the write left
(``auth.WROTE_COOKIE``), so the page it leads to shows the action's effect
(read-your-writes, ``reader.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from pgenough.core import JobRecord, get_job
from pgenough.core.admin import (
    discard_dead,
    discard_job,
    discard_jobs,
    pause_queue,
    resume_queue,
    retry_dead,
    retry_job,
    retry_jobs,
)
from pgenough.core.db import AsyncConn
from pgenough.core.errors import JobNotFound
from pgenough.dashboard import params, sessions
from pgenough.dashboard.auth import (
    FLASH_COOKIE,
    FLASH_MAX_AGE,
    WROTE_COOKIE,
    BadForm,
    Flash,
    Form,
    cookie_path,
    read_form,
)
from pgenough.dashboard.errors import LoginRequired, base_of, forbidden
from pgenough.dashboard.extension import extension_router
from pgenough.dashboard.reader import Written
from pgenough.dashboard.state import DashboardState, connection
from pgenough.dashboard.views import UiDep, target

MAX_CHECKED: Final = 1000
"""Jobs one bulk action may name (a page lists ``ui_jobs_page``; the form's size caps it
lower still)."""

router = extension_router()


async def action(request: Request, ui: DashboardState) -> Form:
    """The form of a permitted, genuine action; else 401, 403 or 400."""
    if not await sessions.signed_in(ui, request):
        raise LoginRequired
    if not ui.config.actions:
        raise forbidden("the dashboard is read-only: set PGENOUGH_UI_ACTIONS=1 to allow actions")
    try:
        form = await read_form(request)
    except BadForm as exc:
        raise params.bad(str(exc), params.FORM) from exc
    if not ui.auth.csrf_valid(request, form):
        raise forbidden(
            "the form's CSRF token is missing or stale, or it came from another site:"
            " reload the page and try again"
        )
    return form


def done(
    request: Request, ui: DashboardState, form: Form, flash: Flash, wrote: Written | None = None
) -> Response:
    base = base_of(request.scope)
    response = RedirectResponse(target(request, form.get("next")), status_code=303)
    path = cookie_path(base)
    if wrote is not None:
        response.set_cookie(
            WROTE_COOKIE,
            ui.auth.wrote_cookie(wrote.position),
            max_age=max(1, round(wrote.hold)),
            path=path,
            httponly=True,
            samesite="strict",
        )
    response.set_cookie(
        FLASH_COOKIE,
        ui.auth.flash_cookie(flash),
        max_age=FLASH_MAX_AGE,
        path=path,
        httponly=True,
        samesite="strict",
    )
    return response


def jobs_word(n: int) -> str:
    return "1 job" if n == 1 else f"{n} jobs"


async def _on_job(
    request: Request,
    ui: DashboardState,
    job_id: int,
    act: Callable[[AsyncConn, int], Awaitable[JobRecord]],
    said: str,
) -> Response:
    """One operator action on one job, answered with a flash: ``said`` of the job, or why not."""
    form = await action(request, ui)
    params.checked_id("the job id", job_id, "a job id")
    try:
        async with connection(ui) as conn:
            job = await act(conn, job_id)
            wrote = await ui.reader.written(conn)
    except JobNotFound as exc:
        return done(request, ui, form, Flash("error", str(exc)))
    return done(request, ui, form, Flash("ok", f"job {job.id} {said} ({job.state})"), wrote)


async def _retried(conn: AsyncConn, job_id: int) -> JobRecord:
    async with conn.transaction():
        await retry_job(conn, job_id)
        return await _record(conn, job_id)


async def _discarded(conn: AsyncConn, job_id: int) -> JobRecord:
    async with conn.transaction():
        await discard_job(conn, job_id)
        return await _record(conn, job_id)


async def _record(conn: AsyncConn, job_id: int) -> JobRecord:
    job = await get_job(conn, job_id)
    assert job is not None  # just changed in this transaction
    return job


@router.post("/jobs/{job_id:int}/retry")
async def retry(request: Request, ui: UiDep, job_id: int) -> Response:
    return await _on_job(request, ui, job_id, _retried, "will run again now")


@router.post("/jobs/{job_id:int}/discard")
async def discard(request: Request, ui: UiDep, job_id: int) -> Response:
    return await _on_job(request, ui, job_id, _discarded, "discarded")


def checked(form: Form) -> list[int]:
    """The job ids a bulk form checked (``ids``, repeated)."""
    values = form.every("ids")
    if len(values) > MAX_CHECKED:
        raise params.bad(f"at most {MAX_CHECKED} jobs at once", params.FORM)
    ids = [params.optional_id("ids", v, "a job id", params.FORM) for v in values]
    return [i for i in ids if i is not None]


async def _on_checked(
    request: Request,
    ui: DashboardState,
    act: Callable[[AsyncConn, list[int]], Awaitable[int]],
    said: str,
) -> Response:
    form = await action(request, ui)
    ids = checked(form)
    if not ids:
        return done(request, ui, form, Flash("error", "no job checked: nothing done"))
    async with connection(ui) as conn:
        n = await act(conn, ids)
        wrote = await ui.reader.written(conn)
    skipped = len(set(ids)) - n
    also = f"; {jobs_word(skipped)} no longer in a state it applies to" if skipped else ""
    return done(request, ui, form, Flash("ok", f"{jobs_word(n)} {said}{also}"), wrote)


@router.post("/jobs/retry")
async def retry_checked(request: Request, ui: UiDep) -> Response:
    return await _on_checked(request, ui, retry_jobs, "will run again now")


@router.post("/jobs/discard")
async def discard_checked(request: Request, ui: UiDep) -> Response:
    return await _on_checked(request, ui, discard_jobs, "discarded")


async def _on_dead(
    request: Request,
    ui: DashboardState,
    act: Callable[..., Awaitable[int]],
    said: str,
) -> Response:
    form = await action(request, ui)
    queue = params.text("queue", form.get("queue", ""), params.FORM)
    task = params.text("task", form.get("task", ""), params.FORM)
    text = params.text("text", form.get("text", ""), params.FORM)
    async with connection(ui) as conn:
        n = await act(conn, queue or None, kind=task or None, text=text or None)
        wrote = await ui.reader.written(conn)
    plural = "job" if n == 1 else "jobs"
    return done(request, ui, form, Flash("ok", f"{n} dead {plural} {said}"), wrote)


@router.post("/jobs/retry-dead")
async def retry_all_dead(request: Request, ui: UiDep) -> Response:
    return await _on_dead(request, ui, retry_dead, "will run again now")


@router.post("/jobs/discard-dead")
async def discard_all_dead(request: Request, ui: UiDep) -> Response:
    return await _on_dead(request, ui, discard_dead, "discarded")


MAX_REASON: Final = 200
"""Characters of a pause's reason (the form's field says as much)."""


async def _on_queue(request: Request, ui: DashboardState, pause: bool) -> Response:
    form = await action(request, ui)
    queue = params.text("queue", form.get("queue", ""), params.FORM)
    if not queue:
        return done(request, ui, form, Flash("error", "no queue given: nothing done"))
    async with connection(ui) as conn:
        if pause:
            reason = params.text("reason", form.get("reason", ""), params.FORM, MAX_REASON)
            changed = await pause_queue(conn, queue, reason=reason or None)
            said = f"queue {queue} paused" if changed else f"queue {queue} was already paused"
        else:
            changed = await resume_queue(conn, queue)
            said = f"queue {queue} resumed" if changed else f"queue {queue} was not paused"
        wrote = await ui.reader.written(conn)
    return done(request, ui, form, Flash("ok", said), wrote)


@router.post("/queues/pause")
async def pause(request: Request, ui: UiDep) -> Response:
    return await _on_queue(request, ui, pause=True)


@router.post("/queues/resume")
async def resume(request: Request, ui: UiDep) -> Response:
    return await _on_queue(request, ui, pause=False)
