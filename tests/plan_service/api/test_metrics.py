"""The request histogram's labels (``api/metrics.py``): every route by its template, the
OpenAPI document and the static files included; a method of its own only for the methods
some route answers, ``other`` for every other one, registered or not."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import pytest
from prometheus_client import REGISTRY
from starlette.routing import Mount

from pgenough_plans.api import metrics
from tests.plan_service.api.helpers import api_app, api_settings, serving

SAMPLE = "pgenough_api_request_duration_seconds_count"


def routed_methods(routes: Iterable[Any]) -> set[str]:
    """The methods the app's routes answer, through FastAPI's included routers."""
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Mount) and hasattr(route.app, "routes"):
            methods |= routed_methods(route.app.routes)  # a mounted app: the dashboard
        elif isinstance(route, Mount):
            methods |= {"GET", "HEAD"}  # static files
        elif hasattr(route, "original_router"):
            methods |= routed_methods(route.original_router.routes)
        else:
            methods |= set(route.methods or ())
    return methods


def test_the_methods_with_a_label_are_those_the_api_routes() -> None:
    # Built, not started: every route, the dashboard's actions included, none served.
    app = api_app(api_settings("postgresql://unused", ui_actions=True, ui_token="t"))
    assert routed_methods(app.routes) == metrics.METHODS


def count(route: str, method: str, status: int) -> float:
    labels = {"route": route, "method": method, "status": str(status)}
    return REGISTRY.get_sample_value(SAMPLE, labels) or 0.0


@pytest.mark.db
async def test_every_route_is_its_template_and_unrouted_methods_are_other(
    db: object, database_url: str
) -> None:
    requests = [
        ("GET", "/openapi.json", "/openapi.json", "GET", 200),
        ("HEAD", "/openapi.json", "/openapi.json", "HEAD", 200),
        ("GET", "/docs", "/docs", "GET", 200),
        ("GET", "/docs/assets/swagger-ui.css", "/docs/assets/{path}", "GET", 200),
        ("GET", "/ui/static/ui.css", "/ui/static/{path}", "GET", 200),
        ("GET", "/ui/static/missing.css", "/ui/static/{path}", "GET", 404),
        ("GET", "/ui/jobs", "/ui/jobs", "GET", 200),
        ("GET", "/ui/jobs/999999999", "/ui/jobs/{job_id:int}", "GET", 404),
        ("GET", "/ui/nowhere", "/ui/{rest:path}", "GET", 404),
        ("GET", "/ui", "/ui", "GET", 307),
        ("PATCH", "/search", "/search", "other", 405),
        ("PUT", "/search", "/search", "other", 405),
        ("DELETE", "/openapi.json", "/openapi.json", "other", 405),
        ("GET", "/nope", metrics.UNMATCHED, "GET", 404),
    ]
    labels = Counter((route, label, status) for _, _, route, label, status in requests)
    async with serving(api_settings(database_url)) as (_, client):
        before = {key: count(*key) for key in labels}
        for method, path, *_ in requests:
            await client.request(method, path)
        grown = {key: count(*key) - before[key] for key in labels}
    assert grown == dict(labels), grown
