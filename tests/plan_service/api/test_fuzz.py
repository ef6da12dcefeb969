"""Fuzzing against the app's own OpenAPI document (schemathesis, on a real uvicorn server):
no 5xx, every status, content type and body as documented."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from pgenough_plans.api import prepare_database
from pgenough_plans.settings import PlanSettings
from tests.plan_service.api.helpers import INSERT, PROVIDER, ServerThread, api_app, api_settings

pytestmark = pytest.mark.db

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api_url(database_url: str) -> Iterator[str]:
    """The API with the cache on, over plans spread across the years (some never online,
    some with long decimals), so that generated ranges find events."""
    asyncio.run(prepare_database(database_url, migrate_schema=True))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("TRUNCATE plans.plans")
        with conn.cursor() as cur:
            cur.executemany(
                INSERT,
                [
                    {
                        "provider": PROVIDER,
                        "base": f"b{n % 7}",
                        "plan": f"p{n}",
                        "title": f'Plan {n} — «ünïcödé» "quoted"',
                        "starts": f"{1990 + n % 60}-{1 + n % 12:02d}-01 {n % 24:02d}:00:00+00",
                        "ends": f"{1990 + n % 60}-{1 + n % 12:02d}-02 {n % 24:02d}:30:15+00",
                        "min": f"{n % 50}.{n % 100:02d}",
                        "max": f"{n % 50 + 10}.123456789",
                        "online": n % 5 != 0,
                    }
                    for n in range(300)
                ],
            )
    app = api_app(api_settings(database_url, api_cache_ttl=5.0))
    with ServerThread(app) as server:
        yield server.url


# The document the app serves at /openapi.json (building it needs no database).
schema = schemathesis.openapi.from_dict(api_app(PlanSettings(database_url="unused")).openapi())


# serial: schemathesis gives its operations one node id, which xdist would report as one test.
@pytest.mark.serial
@schema.parametrize()
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
def test_responses_match_the_schema(case: schemathesis.Case[Any], api_url: str) -> None:
    case.call_and_validate(base_url=api_url, checks=CHECKS)


def test_the_fuzzed_document_is_the_served_one(api_url: str) -> None:
    served = httpx.get(api_url + "/openapi.json", timeout=10).json()
    assert served == api_app(PlanSettings(database_url="unused")).openapi()
