"""Bad input to the dashboard is a 400 page naming the parameter, never a 500: ids beyond
PostgreSQL's bigint or in another script's digits, text with NUL characters or too long, in
query strings, paths and forms (``pgenough/dashboard/params.py``). Over real HTTP, on
uvicorn."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.dashboard.params import BIGINT_MAX, MAX_TEXT
from tests.dashboard.helpers import TOKEN, ui_settings
from tests.dashboard.server import UiServer

pytestmark = pytest.mark.db

TOO_BIG = "99999999999999999999"
SUPERSCRIPT_TWO = "\u00b2"  # str.isdigit() says yes, int() says no


@pytest.fixture
async def client(db: AsyncConnectionPool, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the dashboard (actions on, no token) on a real server."""
    with UiServer(ui_settings(database_url, ui_actions=True)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as c:
            yield c


def refused(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 400, (response.request.url, response.text[:300])
    assert response.headers["content-type"].startswith("text/html")
    assert "Traceback" not in response.text
    for word in words:
        assert word in response.text, (response.request.url, word)


BAD_IDS = [TOO_BIG, str(BIGINT_MAX + 1), SUPERSCRIPT_TWO, "-1", "\x00"]
BAD_TEXTS = ["\x00", "a\x00b", "x" * (MAX_TEXT + 1)]
FILTERS = {
    "/ui/jobs": ("queue", "state", "task", "text"),
    "/ui/failures": ("queue", "state", "task", "text"),
}


@pytest.mark.parametrize("path", FILTERS)
async def test_bad_ids_in_filters_are_400_pages_naming_the_parameter(
    client: httpx.AsyncClient, path: str
) -> None:
    for value in BAD_IDS:
        refused(await client.get(path, params={"before": value}), "before must be a", "Bad filter")


@pytest.mark.parametrize(
    ("path", "param"), [(path, param) for path, names in FILTERS.items() for param in names]
)
async def test_bad_text_in_filters_is_a_400_page_naming_the_parameter(
    client: httpx.AsyncClient, path: str, param: str
) -> None:
    for value in BAD_TEXTS:
        refused(await client.get(path, params={param: value}), f"{param} must", "Bad filter")


async def test_the_largest_id_is_a_valid_filter(client: httpx.AsyncClient) -> None:
    for path in FILTERS:
        response = await client.get(path, params={"before": str(BIGINT_MAX)})
        assert response.status_code == 200, path
    assert (await client.get(f"/ui/jobs/{BIGINT_MAX}")).status_code == 404


async def test_a_failures_state_is_a_failing_one(client: httpx.AsyncClient) -> None:
    refused(await client.get("/ui/failures", params={"state": "cancelled"}), "state must be dead")


async def test_ids_in_paths_beyond_bigint_are_400(client: httpx.AsyncClient) -> None:
    refused(await client.get(f"/ui/jobs/{TOO_BIG}"), "the job id must be a job id")
    csrf = (await client.get("/ui/failures")).text.split('name="csrf" content="')[1][:64]
    for action in ("retry", "discard"):
        response = await client.post(f"/ui/jobs/{TOO_BIG}/{action}", data={"csrf": csrf})
        refused(response, "the job id must be a job id")


async def test_bad_form_fields_are_400(client: httpx.AsyncClient) -> None:
    csrf = (await client.get("/ui/failures")).text.split('name="csrf" content="')[1][:64]
    for action in ("retry-dead", "discard-dead"):
        for field in ("queue", "task", "text"):
            response = await client.post(f"/ui/jobs/{action}", data={"csrf": csrf, field: "\x00"})
            refused(response, f"{field} must not contain a NUL character", "Bad form")
    for action in ("retry", "discard"):
        for value in BAD_IDS:
            response = await client.post(f"/ui/jobs/{action}", data={"csrf": csrf, "ids": value})
            refused(response, "ids must be a job id", "Bad form")
        many = "&".join(["ids=1"] * 1001)
        response = await client.post(
            f"/ui/jobs/{action}",
            content=f"csrf={csrf}&{many}",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        refused(response, "Bad form")
    response = await client.post("/ui/jobs/retry-dead", data={"csrf": csrf, "next": "/ui\x00"})
    refused(response, "next must not contain a NUL character")


async def test_bad_login_parameters_are_400(db: AsyncConnectionPool, database_url: str) -> None:
    with UiServer(ui_settings(database_url, ui_token=TOKEN)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            refused(await client.get("/ui/login", params={"next": "/ui\x00"}), "next must")
            form = (await client.get("/ui/login")).text
            csrf = form.split('name="csrf" value="')[1][:64]
            response = await client.post(
                "/ui/login", data={"csrf": csrf, "token": TOKEN, "next": "/ui" + "x" * 3000}
            )
            refused(response, "next must be at most")
