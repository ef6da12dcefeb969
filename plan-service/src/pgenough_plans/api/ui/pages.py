"""The plan service's pages of the dashboard: the runs (filtered by status and provider,
keyset-paged) and a run's detail, read through ``plans.inspect`` with the dashboard's reader
and rendered with its base template and macros (``pgenough.dashboard.View``)."""

from __future__ import annotations

from fastapi.responses import Response

from pgenough.dashboard import (
    ViewDep,
    bad_request,
    extension_router,
    id_param,
    not_found,
    path_id,
    text_param,
)
from pgenough_plans.ingest import inspect
from pgenough_plans.ingest.runs import RunStatus

RUNS_PAGE = 50
"""Runs a page lists."""

router = extension_router()


@router.get("/runs")
async def runs(view: ViewDep, status: str = "", provider: str = "", before: str = "") -> Response:
    status = text_param("status", status).upper()
    provider = text_param("provider", provider)
    before_id = id_param("before", before, "a run id")
    if status and RunStatus.lookup(status) is None:
        raise bad_request(f"status must be one of {RunStatus.choices()}")
    limit = RUNS_PAGE
    async with view.read() as conn:
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
    return view.render(
        "plans/runs.html",
        {
            "runs": shown,
            "older": older,
            "status": status,
            "provider": provider,
            "before": "" if before_id is None else str(before_id),
            "statuses": list(RunStatus),
            "providers": providers,
        },
        nav="runs",
    )


@router.get("/runs/{run_id:int}")
async def run(view: ViewDep, run_id: int) -> Response:
    path_id("the run id", run_id, "a run id")
    async with view.read() as conn:
        detail = await inspect.get_run(conn, run_id)
    if detail is None:
        raise not_found(f"there is no run {run_id}")
    return view.render("plans/run.html", {"run": detail, "RunStatus": RunStatus}, nav="runs")
