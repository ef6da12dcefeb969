"""Operations endpoints: liveness, readiness (the database answers, and searches are not
shut out) and Prometheus metrics.

Readiness also fails while every search slot has been taken for longer than
``ready_full_after``: an instance whose slots are all held (by slow streams, say) answers
no uncached search, and a load balancer should send searches elsewhere until it does."""

from __future__ import annotations

import asyncio
import json
import logging
import math

import psycopg
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from psycopg_pool import PoolTimeout

from pgenough.core.admin import refresh_queue_metrics
from pgenough_plans.api.deps import ApiDep
from pgenough_plans.api.errors import Unavailable
from pgenough_plans.api.models import ErrorResponse, StatusResponse
from pgenough_plans.api.search import Q

log = logging.getLogger(__name__)
router = APIRouter()

LIVE = b'{"data":{"status":"live"},"error":null}'
READY = b'{"data":{"status":"ready"},"error":null}'


@router.get(
    "/health/live",
    summary="The process is up",
    response_class=JSONResponse,
    responses={200: {"model": StatusResponse, "description": "Always, while the process runs."}},
)
async def live() -> Response:
    return Response(LIVE, media_type="application/json")


@router.get(
    "/health/ready",
    summary="The database answers",
    response_class=JSONResponse,
    responses={
        200: {
            "model": StatusResponse,
            "description": "A SELECT 1 answered in time; with PGENOUGH_API_READ_URL, where"
            " reads go, the least lag, and each replica's (host:port, up, within the bound,"
            " lag).",
        },
        503: {
            "model": ErrorResponse,
            "description": "UNAVAILABLE: the database did not, or every search slot has been"
            " taken for longer than PGENOUGH_API_READY_FULL_AFTER.",
        },
    },
)
async def ready(api: ApiDep) -> Response:
    full_after = api.config.ready_full_after
    full_for = api.bulkhead.full_for()
    if full_after and full_for > full_after:
        raise Unavailable(
            f"every search slot has been taken for {full_for:.1f} s"
            f" (more than PGENOUGH_API_READY_FULL_AFTER, {full_after:g} s)"
        )
    timeout = api.config.ready_timeout
    try:
        async with asyncio.timeout(timeout), api.pool.connection(timeout=timeout) as conn:
            await conn.execute(Q["ready"])
    except (TimeoutError, PoolTimeout, psycopg.OperationalError) as exc:
        raise Unavailable(f"the database did not answer within {timeout:g} s") from exc
    if api.replicas is None:
        return Response(READY, media_type="application/json")
    # Ready either way: past their lag, or away, the replicas' searches go to the primary.
    replicas = api.replicas
    replica = {
        "reading": replicas.reading,
        "lag_seconds": _seconds(replicas.lag),
        "replicas": [
            {
                "replica": lag.label,
                "up": lag.up,
                "within": lag.within,
                "lag_seconds": _seconds(lag.lag),
            }
            for lag in replicas.measures
        ],
    }
    body = {"data": {"status": "ready", "replica": replica}, "error": None}
    return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")


def _seconds(lag: float) -> float | None:
    return None if math.isinf(lag) else lag


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "Prometheus text exposition format.",
        }
    },
)
async def metrics(api: ApiDep) -> Response:
    await _refresh_queue_gauges(api)
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


async def _refresh_queue_gauges(api: ApiDep) -> None:
    """Queue depth as of this scrape: the API is what Prometheus scrapes, and workers only
    refresh the gauges in their own process."""
    timeout = api.config.ready_timeout
    try:
        async with asyncio.timeout(timeout), api.pool.connection(timeout=timeout) as conn:
            await refresh_queue_metrics(conn)
    except (TimeoutError, PoolTimeout, psycopg.Error) as exc:
        # A role that may only read plans cannot read the jobs, and a database that does not
        # answer must not cost the scrape its other metrics: keep the last values.
        log.debug("queue gauges not refreshed: %s", exc)
