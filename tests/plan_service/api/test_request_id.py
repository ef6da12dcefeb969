"""Each request has an id: the client's X-Request-ID when sane, else a new one; it is echoed
in the response and carried by every log line written while the request is handled."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue
from tests.plan_service.api.helpers import api_settings, serving

pytestmark = pytest.mark.db
log = logging.getLogger("pgenough_plans.api.test")


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
async def app_client(
    db: AsyncConnectionPool, database_url: str
) -> AsyncIterator[tuple[httpx.AsyncClient, Records]]:
    from pgenough.logs import ContextFilter

    handler = Records()
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("pgenough_plans.api")
    logger.addHandler(handler)
    async with serving(api_settings(database_url)) as (app, client):

        async def logs_a_line() -> dict[str, str]:
            log.warning("handling")
            return {}

        async def fails() -> None:
            raise RuntimeError("bug")

        app.add_api_route("/_test/log", logs_a_line)
        app.add_api_route("/_test/fail", fails)
        yield client, handler
    logger.removeHandler(handler)


def context_of(record: logging.LogRecord) -> dict[str, object]:
    context: dict[str, object] = getattr(record, "pgenough_context", {})
    return context


async def test_a_sane_client_id_is_echoed_and_logged(
    app_client: tuple[httpx.AsyncClient, Records],
) -> None:
    client, handler = app_client
    resp = await client.get("/_test/log", headers={"X-Request-ID": "trace-42.a_b"})
    assert resp.status_code == 200
    assert resp.headers["x-request-id"] == "trace-42.a_b"
    (line,) = [r for r in handler.records if r.getMessage() == "handling"]
    assert context_of(line)["request_id"] == "trace-42.a_b"


async def test_an_insane_client_id_is_replaced(
    app_client: tuple[httpx.AsyncClient, Records],
) -> None:
    client, handler = app_client
    resp = await client.get("/_test/log", headers={"X-Request-ID": "x" * 65})
    rid = resp.headers["x-request-id"]
    assert rid != "x" * 65 and 0 < len(rid) <= 64
    assert context_of(handler.records[-1])["request_id"] == rid
    other = await client.get("/health/live")
    assert other.headers["x-request-id"] not in ("", rid)


async def test_a_failing_request_is_logged_under_its_id(
    app_client: tuple[httpx.AsyncClient, Records],
) -> None:
    client, handler = app_client
    resp = await client.get("/_test/fail", headers={"X-Request-ID": "fail-1"})
    assert resp.status_code == 500
    assert "fail-1" in resp.json()["error"]["message"]
    (line,) = [r for r in handler.records if r.exc_info]
    assert context_of(line)["request_id"] == "fail-1"


async def test_metrics_refresh_the_queue_gauges_when_scraped(
    app_client: tuple[httpx.AsyncClient, Records], db: AsyncConnectionPool
) -> None:
    client, _ = app_client
    async with db.connection() as conn:
        await enqueue(conn, "noop", queue="scraped")
    body = (await client.get("/metrics")).text
    assert 'pgenough_queue_depth{queue="scraped",state="ready"} 1.0' in body
    assert REGISTRY.get_sample_value("pgenough_db_pool_max", {"pool": "pgenough-api"})


@pytest.mark.db
async def test_error_answers_stay_on_the_event_loop(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starlette runs a plain-function exception handler in a worker thread; ours are
    coroutines, so no error answer (404, 405, 400, the dashboard's) takes a thread hand-off."""
    import starlette._exception_handler as handling

    threaded: list[object] = []
    original = handling.run_in_threadpool

    async def counted(func: Any, *args: Any, **kwargs: Any) -> Any:
        threaded.append(func)
        return await original(func, *args, **kwargs)

    monkeypatch.setattr(handling, "run_in_threadpool", counted)
    async with serving(api_settings(database_url)) as (_, client):
        answers = [
            await client.get("/nope"),
            await client.post("/search"),
            await client.get("/search", params={"limit": "0"}),
            await client.get("/ui/runs/x", headers={"accept": "application/json"}),
        ]
    assert [a.status_code for a in answers][:3] == [404, 405, 400], answers
    assert answers[3].status_code >= 400, answers[3]
    assert all(a.json()["error"]["code"] for a in answers), [a.text for a in answers]
    assert threaded == []
