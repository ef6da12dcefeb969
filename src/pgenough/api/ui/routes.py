"""The dashboard's pages, its JSON and event stream, and its three actions.

Pages read through ``plans.inspect`` and the core's job reads (``list_jobs``, ``get_job``) on
the dashboard's own pool; actions change state only through inspect's repairs, then redirect
(303) back with a flash message. Every route first checks the login (``Authed``, through
``sessions``); actions also check that they are enabled and the CSRF token.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any, Final, cast

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates

from pgenough.api.ui import params, sessions
from pgenough.api.ui.auth import (
    FLASH_COOKIE,
    FLASH_MAX_AGE,
    SESSION_COOKIE,
    BadForm,
    Flash,
    read_form,
    safe_next,
)
from pgenough.api.ui.errors import LoginRequired, UiError, UiRoute, forbidden, not_found
from pgenough.api.ui.live import FeedFull
from pgenough.api.ui.state import UiState, connection
from pgenough.core import (
    JOB_STATES,
    JobNotFound,
    get_job,
    list_jobs,
    parse_job_state,
    queue_stats,
    repair,
)
from pgenough.jsonable import as_json
from pgenough.plans import inspect
from pgenough.plans.defaults import RUN_STATUSES

KEEPALIVE: Final = 15.0
RECONNECT_MS: Final = 2000
FAILED_JOBS_SHOWN: Final = 200
FAILED_RUNS_SHOWN: Final = 50


async def get_ui(request: Request) -> UiState:
    return cast(UiState, request.app.state.ui)


async def require_login(request: Request) -> UiState:
    ui = cast(UiState, request.app.state.ui)
    if not await sessions.signed_in(ui, request):
        raise LoginRequired
    return ui


def target(raw: str | None, default: str = "/ui", title: str = params.FORM) -> str:
    """Where a ``next`` parameter may send the browser (a dashboard path), checked."""
    return safe_next(params.text("next", raw or "", title, params.MAX_NEXT), default)


UiDep = Annotated[UiState, Depends(get_ui)]
Authed = Annotated[UiState, Depends(require_login)]


def build_router(templates: Jinja2Templates) -> APIRouter:
    router = APIRouter(prefix="/ui", include_in_schema=False, route_class=UiRoute)

    def page(
        request: Request, ui: UiState, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        flash = ui.auth.read_flash(request)
        response = templates.TemplateResponse(
            request,
            name,
            {
                "csrf": ui.auth.csrf_token(request),
                "actions": ui.config.actions,
                "login": ui.auth.required,
                "flash": flash,
                "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                **context,
            },
            status_code=status,
        )
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path="/ui")
        return response

    @router.get("", name="ui_overview")
    @router.get("/")
    async def overview(request: Request, ui: Authed) -> Response:
        async with connection(ui) as conn:
            view = await inspect.overview(conn)
        return page(
            request,
            ui,
            "overview.html",
            {"view": view, "data": as_json(view), "nav": "overview"},
        )

    @router.get("/api/overview")
    async def overview_json(ui: Authed) -> Response:
        async with connection(ui) as conn:
            view = await inspect.overview(conn)
        body = json.dumps({"data": as_json(view), "error": None})
        return Response(body, media_type="application/json")

    @router.get("/runs")
    async def runs(
        request: Request,
        ui: Authed,
        status: str = "",
        provider: str = "",
        before: str = "",
    ) -> Response:
        status = params.text("status", status).upper()
        provider = params.text("provider", provider)
        before_id = params.optional_id("before", before, "a run id")
        if status and status not in RUN_STATUSES:
            raise params.bad(f"status must be one of {', '.join(RUN_STATUSES)}")
        limit = ui.config.runs_page
        async with connection(ui) as conn:
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
        return page(
            request,
            ui,
            "runs.html",
            {
                "runs": shown,
                "older": older,
                "status": status,
                "provider": provider,
                "before": "" if before_id is None else str(before_id),
                "statuses": RUN_STATUSES,
                "providers": providers,
                "nav": "runs",
            },
        )

    @router.get("/runs/{run_id:int}")
    async def run(request: Request, ui: Authed, run_id: int) -> Response:
        params.checked_id("the run id", run_id, "a run id")
        async with connection(ui) as conn:
            detail = await inspect.get_run(conn, run_id)
        if detail is None:
            raise not_found(f"there is no run {run_id}")
        return page(request, ui, "run.html", {"run": detail, "nav": "runs"})

    @router.get("/failures")
    async def failures(request: Request, ui: Authed) -> Response:
        async with connection(ui) as conn:
            jobs = await inspect.failed_jobs(conn, limit=FAILED_JOBS_SHOWN)
            runs = await inspect.list_runs(conn, status="FAILED", limit=FAILED_RUNS_SHOWN)
        dead = sum(1 for j in jobs if j.state == "dead")
        return page(
            request,
            ui,
            "failures.html",
            {"jobs": jobs, "runs": runs, "dead": dead, "nav": "failures"},
        )

    @router.get("/jobs")
    async def jobs(
        request: Request,
        ui: Authed,
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
        async with connection(ui) as conn:
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
        return page(
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
        )

    @router.get("/jobs/{job_id:int}")
    async def job(request: Request, ui: Authed, job_id: int) -> Response:
        params.checked_id("the job id", job_id, "a job id")
        async with connection(ui) as conn:
            record = await get_job(conn, job_id)
        if record is None:
            raise not_found(
                f"there is no job {job_id}: completed jobs are deleted; it may have finished"
            )
        return page(
            request,
            ui,
            "job.html",
            {"job": record, "now": datetime.now(UTC), "nav": "jobs"},
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

    async def action(request: Request, ui: UiState) -> dict[str, str]:
        """The form of a permitted, genuine action; else 401, 403 or 400."""
        if not await sessions.signed_in(ui, request):
            raise LoginRequired
        if not ui.config.actions:
            raise forbidden(
                "the dashboard is read-only: set PGENOUGH_UI_ACTIONS=1 to allow actions"
            )
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

    def done(ui: UiState, form: dict[str, str], flash: Flash) -> Response:
        response = RedirectResponse(target(form.get("next"), "/ui/failures"), status_code=303)
        response.set_cookie(
            FLASH_COOKIE,
            ui.auth.flash_cookie(flash),
            max_age=FLASH_MAX_AGE,
            path="/ui",
            httponly=True,
            samesite="strict",
        )
        return response

    @router.post("/jobs/{job_id:int}/retry")
    async def retry(request: Request, ui: UiDep, job_id: int) -> Response:
        form = await action(request, ui)
        params.checked_id("the job id", job_id, "a job id")
        try:
            async with connection(ui) as conn:
                job = await repair.retry(conn, job_id)
        except JobNotFound as exc:
            return done(ui, form, Flash("error", str(exc)))
        return done(ui, form, Flash("ok", f"job {job.id} will run again now ({job.state})"))

    @router.post("/jobs/{job_id:int}/discard")
    async def discard(request: Request, ui: UiDep, job_id: int) -> Response:
        form = await action(request, ui)
        params.checked_id("the job id", job_id, "a job id")
        try:
            async with connection(ui) as conn:
                job = await repair.discard(conn, job_id)
        except JobNotFound as exc:
            return done(ui, form, Flash("error", str(exc)))
        return done(ui, form, Flash("ok", f"job {job.id} discarded ({job.state})"))

    @router.post("/jobs/retry-dead")
    async def retry_dead(request: Request, ui: UiDep) -> Response:
        form = await action(request, ui)
        queue = params.text("queue", form.get("queue", ""), params.FORM)
        async with connection(ui) as conn:
            n = await repair.retry_all_dead(conn, queue or None)
        plural = "job" if n == 1 else "jobs"
        return done(ui, form, Flash("ok", f"{n} dead {plural} will run again now"))

    @router.get("/login")
    async def login_form(request: Request, ui: UiDep, next: str = "/ui") -> Response:
        goal = target(next, title=params.FILTER)
        if await sessions.signed_in(ui, request):
            return RedirectResponse(goal, status_code=303)
        return page(request, ui, "login.html", {"next": goal, "error": None})

    @router.post("/login")
    async def login(request: Request, ui: UiDep) -> Response:
        try:
            form = await read_form(request)
        except BadForm as exc:
            raise params.bad(str(exc), params.FORM) from exc
        goal = target(form.get("next"))
        if not ui.auth.csrf_valid(request, form):
            raise forbidden("the login form is stale or came from another site: reload it")
        if not ui.auth.required:
            return RedirectResponse(goal, status_code=303)
        try:
            client = sessions.check_throttle(ui, request)
        except UiError as exc:
            refused = page(
                request, ui, "login.html", {"next": goal, "error": exc.message}, status=429
            )
            refused.headers.update(exc.headers)
            return refused
        # No await from the throttle's check to its record: concurrent guesses cannot slip
        # between them.
        if not ui.auth.token_matches(form.get("token", "")):
            ui.throttle.failed(client)
            return page(
                request,
                ui,
                "login.html",
                {"next": goal, "error": "That is not the dashboard's token."},
                status=401,
            )
        ui.throttle.succeeded(client)
        response = RedirectResponse(goal, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            ui.auth.new_session(),
            max_age=int(ui.config.session_max_age),
            path="/ui",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @router.post("/logout")
    async def logout(request: Request, ui: UiDep) -> Response:
        try:
            form = await read_form(request)
        except BadForm as exc:
            raise params.bad(str(exc), params.FORM) from exc
        if not ui.auth.csrf_valid(request, form):
            raise forbidden("the form is stale or came from another site: reload the page")
        session = ui.auth.session(request.cookies.get(SESSION_COOKIE))
        if session is not None:
            async with connection(ui) as conn:
                await sessions.revoke(conn, session)
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/ui")
        return response

    @router.get("/{rest:path}")
    async def unknown(rest: str) -> Response:
        raise not_found(f"the dashboard has no page /ui/{rest}")

    return router
