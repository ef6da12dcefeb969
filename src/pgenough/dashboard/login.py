"""The dashboard's login form, login (a session cookie, under the throttle) and logout."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from pgenough.dashboard import params, sessions
from pgenough.dashboard.auth import SESSION_COOKIE, BadForm, cookie_path, read_form
from pgenough.dashboard.errors import DashboardError, base_of, forbidden
from pgenough.dashboard.extension import extension_router
from pgenough.dashboard.state import connection
from pgenough.dashboard.views import PagesDep, UiDep, target

router = extension_router()


@router.get("/login")
async def login_form(request: Request, ui: UiDep, pages: PagesDep, next: str = "") -> Response:
    goal = target(request, next, title=params.FILTER)
    if await sessions.signed_in(ui, request):
        return RedirectResponse(goal, status_code=303)
    return pages.render(request, ui, "login.html", {"next": goal, "error": None})


@router.post("/login")
async def login(request: Request, ui: UiDep, pages: PagesDep) -> Response:
    try:
        form = await read_form(request)
    except BadForm as exc:
        raise params.bad(str(exc), params.FORM) from exc
    goal = target(request, form.get("next"))
    if not ui.auth.csrf_valid(request, form):
        raise forbidden("the login form is stale or came from another site: reload it")
    if not ui.auth.required:
        return RedirectResponse(goal, status_code=303)
    try:
        client = sessions.check_throttle(ui, request)
    except DashboardError as exc:
        refused = pages.render(
            request, ui, "login.html", {"next": goal, "error": exc.message}, status=429
        )
        refused.headers.update(exc.headers)
        return refused
    # No await from the throttle's check to its record: concurrent guesses cannot slip
    # between them.
    if not ui.auth.token_matches(form.get("token", "")):
        ui.throttle.failed(client)
        return pages.render(
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
        path=cookie_path(base_of(request.scope)),
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
    base = base_of(request.scope)
    response = RedirectResponse(f"{base}/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=cookie_path(base))
    return response
