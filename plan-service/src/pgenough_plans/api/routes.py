"""``GET /search`` (and ``HEAD``): parse, then answer (``pgenough_plans.api.answer``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from pgenough_plans.api import answer
from pgenough_plans.api.deps import ApiDep
from pgenough_plans.api.models import ErrorResponse, SearchResponse
from pgenough_plans.api.search import (
    INSTANT_PATTERN,
    MAX_LIMIT,
    MAX_OFFSET,
    STREAM_PAGE,
    parse_query,
)

router = APIRouter()

_INSTANT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": INSTANT_PATTERN,
    "examples": ["2021-06-30T20:00:00Z", "2021-06-30T22:00:00.123456789+02:00", "2021-06-30"],
}
_INSTANT_FORMS = (
    "An RFC 3339 date-time, with any number of fractional digits (read to the microsecond:"
    " digits beyond are truncated; a leap second :60 is the next second); also accepted,"
    " though RFC 3339 has none of them: a space for T, no seconds, no offset (UTC), an offset"
    " as +0200 or +02 (a space before it is read as +, as an unencoded + arrives), and a plain"
    " date YYYY-MM-DD (midnight UTC at its start). The pattern is exactly this syntax; the"
    " date and time must also exist."
)
PARAMETERS: list[dict[str, Any]] = [
    {
        "name": "starts_at",
        "in": "query",
        "required": False,
        "schema": _INSTANT_SCHEMA,
        "description": f"Events that start at or after this instant. {_INSTANT_FORMS}",
    },
    {
        "name": "ends_at",
        "in": "query",
        "required": False,
        "schema": _INSTANT_SCHEMA,
        "description": "Events that end at or before this instant (an event without an end "
        f"matches only when ends_at is absent). {_INSTANT_FORMS}",
    },
    {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
        "description": 'Events per page; the response has a Link header (rel="next") when '
        "more follow. Absent: every matching event, in one response (streamed from "
        f"PostgreSQL {STREAM_PAGE} at a time). Digits 0-9 only.",
    },
    {
        "name": "offset",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        "description": "Events to skip, for compatibility: PostgreSQL reads and drops every "
        "skipped event, so a deep offset costs in proportion to it; the after cursor does not. "
        "Digits 0-9 only. Not with after.",
    },
    {
        "name": "after",
        "in": "query",
        "required": False,
        "schema": {"type": "string"},
        "description": "Opaque cursor from the previous page's Link header: the page after its "
        "last event, at the cost of the first page however deep, never before starts_at. "
        "Signed with this deployment's secret: refused (400) when edited, made up, made by "
        "another deployment or an older version, or given with other starts_at/ends_at than "
        "it was made for.",
    },
]
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": ErrorResponse,
        "description": "INVALID_REQUEST: a bad date, bound, limit, offset or cursor, or a "
        "repeated parameter (parameters /search does not take are ignored).",
    },
    500: {"model": ErrorResponse, "description": "INTERNAL_ERROR, with a request id to quote."},
    503: {
        "model": ErrorResponse,
        "description": "TOO_BUSY (too many searches at once, or the "
        "search timed out) or UNAVAILABLE (no database); retry after Retry-After seconds.",
    },
}
_OK: dict[str, Any] = {
    "model": SearchResponse,
    "description": "The matching events: all of them without limit, else one page.",
    "headers": {
        "Link": {
            "description": 'With limit, when more events follow: <URL>; rel="next", a URL '
            "relative to this one, with an after cursor.",
            "schema": {"type": "string"},
        }
    },
}


@router.get(
    "/search",
    summary="Events in a time range",
    response_class=JSONResponse,
    responses={200: _OK, **_ERRORS},
    openapi_extra={"parameters": PARAMETERS},
)
async def search(request: Request, api: ApiDep) -> Response:
    """Ever-online plans that start at or after `starts_at` and end at or before `ends_at`
    (a plan without an end only when `ends_at` is absent), ordered by start, then id. Read
    from PostgreSQL only, never from a provider. `HEAD /search` answers as GET does, without
    the body."""
    query = parse_query(request.query_params.multi_items(), api.cursor_key)
    return await answer.search(api, query, head=request.method == "HEAD")


router.add_api_route("/search", search, methods=["HEAD"], include_in_schema=False)
# Answered as /search, not redirected: Starlette's redirect would be built from the Host
# header, which any client sets.
router.add_api_route("/search/", search, methods=["GET", "HEAD"], include_in_schema=False)
