"""The API's Prometheus metrics (prometheus-client's default registry, beside the core's) and
the middleware that times every request by its route."""

from __future__ import annotations

import time

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
SEARCH_TIMEOUTS = Counter(
    "pgenough_api_search_timeouts", "Searches cancelled by their statement timeout (503)."
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


class RequestMetrics:
    """Times each request into ``REQUEST_DURATION``; the route is the matched path template
    (``/search``), or ``unmatched`` for 404s, so the label set stays small."""

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
            template = getattr(route, "path", None) or "unmatched"
            REQUEST_DURATION.labels(template, scope["method"], str(status)).observe(
                time.perf_counter() - start
            )
