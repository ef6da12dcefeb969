"""``GET /search``: parse, answer from the cache or PostgreSQL, send the bytes as they are."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from pgenough.api.deps import ApiDep
from pgenough.api.models import ErrorResponse, SearchResponse
from pgenough.api.search import DEFAULT_LIMIT, MAX_LIMIT, MAX_OFFSET, parse_query, run_search

router = APIRouter()

_INSTANT_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "string", "format": "date-time"}, {"type": "string", "format": "date"}]
}
PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "starts_at",
        "in": "query",
        "required": False,
        "schema": _INSTANT_SCHEMA,
        "description": "Events that start at or after this instant. ISO-8601 date-time; "
        "without an offset it is UTC. A plain date (YYYY-MM-DD) is midnight UTC.",
    },
    {
        "name": "ends_at",
        "in": "query",
        "required": False,
        "schema": _INSTANT_SCHEMA,
        "description": "Events that end at or before this instant (an event without an end "
        "matches only when ends_at is absent). ISO-8601 date-time; without an offset it is UTC. "
        "A plain date (YYYY-MM-DD) is midnight UTC at its start.",
    },
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
        "description": "Events per page.",
    },
    {
        "name": "offset",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        "description": "Events to skip (pages after the first are never cached).",
    },
]
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": ErrorResponse,
        "description": "INVALID_REQUEST: a bad date, bound, limit "
        "or offset, or an unknown or repeated parameter.",
    },
    500: {"model": ErrorResponse, "description": "INTERNAL_ERROR, with a request id to quote."},
    503: {
        "model": ErrorResponse,
        "description": "TOO_BUSY (too many searches at once, or the "
        "search timed out) or UNAVAILABLE (no database); retry after Retry-After seconds.",
    },
}


def json_bytes(body: bytes) -> Response:
    return Response(body, media_type="application/json")


@router.get(
    "/search",
    summary="Events in a time range",
    response_class=JSONResponse,
    responses={200: {"model": SearchResponse, "description": "One page of events."}, **_ERRORS},
    openapi_extra={"parameters": PARAMETERS},
)
async def search(request: Request, api: ApiDep) -> Response:
    """Ever-online plans that start at or after `starts_at` and end at or before `ends_at`
    (a plan without an end only when `ends_at` is absent), ordered by start, then id. Read
    from PostgreSQL only, never from a provider."""
    query = parse_query(request.query_params.multi_items())
    key = query.cache_key
    if key is not None:
        cached = api.cache.get(key)
        if cached is not None:
            return json_bytes(cached)
    generation = api.cache.generation
    async with api.bulkhead.slot():
        body = await run_search(
            api.pool,
            query,
            pool_timeout=api.config.pool_timeout,
            search_timeout=api.config.search_timeout,
            delay=api.config.search_delay,
        )
    if key is not None:
        api.cache.put(key, body, generation)
    return json_bytes(body)
