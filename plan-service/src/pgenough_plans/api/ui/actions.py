"""The dashboard's three actions: retry a job, discard a job, retry every dead job.

Each changes state only through the core's repairs, on the primary, then redirects (303)
back with a flash message; each first checks the login, that actions are enabled and the CSRF
token. With read replicas the redirect also carries the primary's WAL position after the
write (``auth.WROTE_COOKIE``), so the page it leads to shows the action's effect
(read-your-writes, ``state``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from pgenough.core import (
    AsyncConn,
    JobNotFound,
    JobRecord,
    discard_job,
    get_job,
    retry_job,
)
from pgenough.core import (
    retry_dead as retry_all_dead,
)
from pgenough_plans.api.replica import current_lsn
from pgenough_plans.api.ui import params, sessions
from pgenough_plans.api.ui.auth import (
    FLASH_COOKIE,
    FLASH_MAX_AGE,
    WROTE_COOKIE,
    BadForm,
    Flash,
    read_form,
)
from pgenough_plans.api.ui.deps import UiDep, target, ui_router
from pgenough_plans.api.ui.errors import LoginRequired, forbidden
from pgenough_plans.api.ui.state import UiState, connection

router = ui_router()


async def action(request: Request, ui: UiState) -> dict[str, str]:
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


async def wrote(ui: UiState, conn: AsyncConn) -> int | None:
    """With read replicas, the primary's position after a write on ``conn`` (committed: the
    pool's connections autocommit)."""
    if ui.replicas is None:
        return None
    return await current_lsn(conn)


def done(ui: UiState, form: dict[str, str], flash: Flash, position: int | None = None) -> Response:
    response = RedirectResponse(target(form.get("next"), "/ui/failures"), status_code=303)
    if position is not None and ui.replicas is not None:
        # Past this age every replica within the bound has the write (the measure errs safe).
        max_lag = max(r.lag.max_lag for r in ui.replicas.members)
        response.set_cookie(
            WROTE_COOKIE,
            ui.auth.wrote_cookie(position),
            max_age=math.ceil(max_lag) + 1,
            path="/ui",
            httponly=True,
            samesite="strict",
        )
    response.set_cookie(
        FLASH_COOKIE,
        ui.auth.flash_cookie(flash),
        max_age=FLASH_MAX_AGE,
        path="/ui",
        httponly=True,
        samesite="strict",
    )
    return response


async def _on_job(
    request: Request,
    ui: UiDep,
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
            position = await wrote(ui, conn)
    except JobNotFound as exc:
        return done(ui, form, Flash("error", str(exc)))
    return done(ui, form, Flash("ok", f"job {job.id} {said} ({job.state})"), position)


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


@router.post("/jobs/retry-dead")
async def retry_dead(request: Request, ui: UiDep) -> Response:
    form = await action(request, ui)
    queue = params.text("queue", form.get("queue", ""), params.FORM)
    async with connection(ui) as conn:
        n = await retry_all_dead(conn, queue or None)
        position = await wrote(ui, conn)
    plural = "job" if n == 1 else "jobs"
    return done(ui, form, Flash("ok", f"{n} dead {plural} will run again now"), position)
