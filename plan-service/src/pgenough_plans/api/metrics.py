"""The API's Prometheus metrics (prometheus-client's default registry, beside the core's) and
the middleware that times every request by its route."""

from __future__ import annotations

import time
from typing import Final

from prometheus_client import Counter, Gauge, Histogram
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_DURATION = Histogram(
    "pgenough_api_request_duration_seconds",
    "Time to answer a request, by route template, method and status.",
    ["route", "method", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
BULKHEAD_REJECTIONS = Counter(
    "pgenough_api_bulkhead_rejections", "Searches refused with 503 because the bulkhead was full."
)
SEARCHES_IN_FLIGHT = Gauge("pgenough_api_searches_in_flight", "Searches running in PostgreSQL.")
STREAMS_IN_FLIGHT = Gauge(
    "pgenough_api_streams_in_flight",
    "Searches without limit streaming past their first page (each holds a search slot).",
)
STREAMS_REFUSED = Counter(
    "pgenough_api_streams_refused",
    "Searches without limit refused with 503 because api_max_concurrent_streams already streamed.",
)
SEARCH_TIMEOUTS = Counter(
    "pgenough_api_search_timeouts", "Searches cancelled by their statement timeout (503)."
)
STREAMS_CUT = Counter(
    "pgenough_api_streams_cut",
    "Searches without limit whose streamed body was cut (the client got a truncated "
    "transfer), by reason (stall, timeout, statement_timeout, deadline: a replica that stopped"
    " answering, database).",
    ["reason"],
)
CACHE_HITS = Counter("pgenough_api_cache_hits", "First-page searches answered from the cache.")
CACHE_MISSES = Counter(
    "pgenough_api_cache_misses", "First-page searches that had to ask PostgreSQL."
)
CACHE_INVALIDATIONS = Counter(
    "pgenough_api_cache_invalidations",
    "Times the cache was emptied, by reason (plans_changed, gap, listener).",
    ["reason"],
)

REPLICA_LAG = Gauge(
    "pgenough_api_replica_lag_seconds",
    "How far each read replica (PGENOUGH_API_READ_URL) is behind the primary, at most, as of"
    " its last probe, by replica (host:port); +Inf while it does not answer.",
    ["replica"],
)
REPLICA_READS = Counter(
    "pgenough_api_replica_reads",
    "Reads that asked PostgreSQL, with read replicas, by reader (search, dashboard), where they"
    " read (replica, primary) and which replica (host:port; empty for the primary).",
    ["reader", "target", "replica"],
)
REPLICA_FALLBACKS = Counter(
    "pgenough_api_replica_fallbacks",
    "Reads that went to the primary because no read replica would do, by reader (search,"
    " dashboard) and reason (lag: past PGENOUGH_API_MAX_REPLICA_LAG; unreachable;"
    " behind_write: none had replayed the session's own write yet).",
    ["reader", "reason"],
)


# The methods some route of the app answers (a test keeps this in step with the routes); any
# other, registered (PUT, PATCH, WebDAV's) or invented, is counted as OTHER_METHOD, so
# clients cannot add series to /metrics by sending methods the API has nothing for.
METHODS: Final = frozenset({"GET", "HEAD", "POST"})
OTHER_METHOD: Final = "other"
UNMATCHED: Final = "unmatched"
MOUNTED: Final = "/{path}"
"""Appended to a mount's path (static files) for its label: one series per mount."""


def route_template(scope: Scope, path: str, root_path: str) -> str:
    """The label of the route that answered: the template FastAPI's routes leave in
    ``scope["route"]``, under the paths of the mounts the request went through (routing
    grows ``root_path`` by each: the dashboard's ``/ui/jobs/{job_id:int}``); a mount's path
    when no route of it answered (static files: ``/ui/static/{path}``); else the app's plain
    Starlette route (``/openapi.json``) the path matches; else ``unmatched``."""
    grown: str = scope.get("root_path", "")
    mounted = grown[len(root_path) :] if grown.startswith(root_path) else ""
    template = getattr(scope.get("route"), "path", None)
    if template:
        return mounted + str(template)
    if mounted:
        return mounted + MOUNTED
    # Matched again on the path as it arrived.
    probe: Scope = {"type": "http", "path": path, "root_path": root_path, "method": scope["method"]}
    for candidate in getattr(scope.get("app"), "routes", ()):
        if isinstance(candidate, Route) and candidate.matches(probe)[0] is not Match.NONE:
            return candidate.path
    return UNMATCHED


class RequestMetrics:
    """Times each request into ``REQUEST_DURATION``; the route is the matched path template
    (``/search``, ``/openapi.json``, ``/ui/static/{path}``), or ``unmatched`` for any path no
    route has, and a method outside ``METHODS`` is ``other``, so the label set stays small
    whatever clients send."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        path, root_path = scope["path"], scope.get("root_path", "")

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            template = route_template(scope, path, root_path)
            method = scope["method"] if scope["method"] in METHODS else OTHER_METHOD
            REQUEST_DURATION.labels(template, method, str(status)).observe(
                time.perf_counter() - start
            )
