"""The API's Prometheus metrics (prometheus-client's default registry, beside the core's) and
the middleware that times every request by its route."""

from __future__ import annotations

import time
from typing import Final

from prometheus_client import Counter, Gauge, Histogram
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
    "transfer), by reason (stall, timeout, statement_timeout, database).",
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


# RFC 9110's methods; any other name a client invents is counted as OTHER_METHOD, so
# clients cannot add series to /metrics by making method names up.
METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
OTHER_METHOD: Final = "other"
UNMATCHED: Final = "unmatched"


class RequestMetrics:
    """Times each request into ``REQUEST_DURATION``; the route is the matched path template
    (``/search``), or ``unmatched`` for any path no route has, and a method outside
    ``METHODS`` is ``other``, so the label set stays small whatever clients send."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            method = scope["method"] if scope["method"] in METHODS else OTHER_METHOD
            REQUEST_DURATION.labels(template, method, str(status)).observe(
                time.perf_counter() - start
            )
