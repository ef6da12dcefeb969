"""The dashboard answers only to its own names (against DNS rebinding) and cannot be framed
(``pgenough/dashboard/hosts.py``), on a real uvicorn server, mounted in an application whose
own paths keep their own rules."""

from __future__ import annotations

import re

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from pgenough.core import enqueue, get_job
from pgenough.dashboard import DashboardConfigError
from pgenough.dashboard.hosts import AllowedHosts, host_name
from pgenough.settings import Settings
from tests.dashboard.browser import chromium_page, require_browser
from tests.dashboard.helpers import ui_settings
from tests.dashboard.server import UiServer

pytestmark = pytest.mark.db

FOREIGN = "rebound.example"
PAGES = (
    "/ui/",
    "/ui/jobs/1",
    "/ui/jobs",
    "/ui/failures",
    "/ui/workers",
    "/ui/periodic",
    "/ui/login",
    "/ui/static/ui.css",
)


async def _host_page(request: object) -> PlainTextResponse:
    return PlainTextResponse("the application's own page")


HOST_ROUTES = [Route("/health", _host_page)]


def loopback_settings(database_url: str, **overrides: object) -> Settings:
    """The defaults of a real deployment: no extra names, actions on, no token."""
    overrides.setdefault("ui_allowed_hosts", "")
    return ui_settings(database_url, ui_actions=True, **overrides)


async def test_a_foreign_host_gets_421_and_no_page(
    db: AsyncConnectionPool, database_url: str
) -> None:
    async with db.connection() as conn:
        job = await enqueue(conn, "noop", queue="ops")
    assert job is not None
    with UiServer(loopback_settings(database_url), routes=HOST_ROUTES) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            own = await client.get("/ui/failures")
            assert own.status_code == 200
            csrf = re.search(r'name="csrf" content="([^"]+)"', own.text)
            assert csrf is not None

            foreign = {"host": f"{FOREIGN}:{server.port}"}
            for path in (*PAGES, "/ui/events", "/ui/api/overview", "/ui/api/history"):
                response = await client.get(path, headers=foreign)
                assert response.status_code == 421, path
                assert "PGENOUGH_UI_ALLOWED_HOSTS" in response.text, path
                assert csrf.group(1) not in response.text
            page = await client.get("/ui/", headers=foreign)
            assert page.headers["content-type"].startswith("text/html")
            assert FOREIGN in page.text and "Unknown host" in page.text
            api = await client.get("/ui/api/overview", headers=foreign)
            assert api.json()["error"]["code"] == "MISDIRECTED_REQUEST"

            # The rebound page's POST, with a token it could have read: refused, nothing done.
            response = await client.post(
                f"/ui/jobs/{job}/discard", data={"csrf": csrf.group(1)}, headers=foreign
            )
            assert response.status_code == 421
            async with db.connection() as conn:
                record = await get_job(conn, job)
            assert record is not None and record.state == "ready"

            assert (await client.get("/ui/", headers={"host": FOREIGN})).status_code == 421
            # The application's own paths are its business.
            assert (await client.get("/health", headers=foreign)).status_code == 200

            for host in ("localhost", "LOCALHOST.", "127.0.0.1", "127.0.0.2", "[::1]"):
                for port in ("", f":{server.port}", ":1"):
                    response = await client.get("/ui/", headers={"host": host + port})
                    assert response.status_code == 200, host + port


async def test_allowed_hosts_and_the_bind_address(
    db: AsyncConnectionPool, database_url: str
) -> None:
    cases: list[tuple[dict[str, str], list[str], list[str]]] = [
        ({"ui_allowed_hosts": "dash.example.com, [2001:db8::1]"},
         ["dash.example.com", "Dash.Example.com:8443", "[2001:db8::1]:80", "localhost"],
         [FOREIGN, "example.com", "evil.dash.example.com"]),
        ({"ui_allowed_hosts": "*"}, [FOREIGN, "anything:1"], []),
        ({"dashboard_host": "192.0.2.10"}, ["192.0.2.10:8001", "localhost"], [FOREIGN]),
        # A wildcard bind names no host: loopback only, until the operator lists names.
        ({"dashboard_host": "0.0.0.0"}, ["localhost:8001"], ["0.0.0.0", FOREIGN, "192.0.2.10"]),
    ]  # fmt: skip
    for overrides, allowed, refused in cases:
        with UiServer(loopback_settings(database_url, **overrides)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
                for host in allowed:
                    response = await client.get("/ui/jobs", headers={"host": host})
                    assert response.status_code == 200, (overrides, host)
                for host in refused:
                    response = await client.get("/ui/jobs", headers={"host": host})
                    assert response.status_code == 421, (overrides, host)


async def test_every_dashboard_response_forbids_framing(
    db: AsyncConnectionPool, database_url: str
) -> None:
    with UiServer(loopback_settings(database_url), routes=HOST_ROUTES) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
            responses = [await client.get(p) for p in (*PAGES, "/ui/nowhere")]
            responses.append(await client.get("/ui/", headers={"host": FOREIGN}))
            responses.append(await client.post("/ui/logout", data={}))
            assert {r.status_code for r in responses} == {200, 303, 403, 404, 421}
            for response in responses:
                assert response.headers["x-frame-options"] == "DENY", response.url
                csp = response.headers["content-security-policy"]
                assert csp == "frame-ancestors 'none'", response.url
            own = await client.get("/health")
            assert "x-frame-options" not in own.headers


def test_host_names_are_compared_without_port_case_or_brackets() -> None:
    assert host_name("Example.COM:8000") == "example.com"
    assert host_name("[::1]:8000") == host_name("[::1]") == host_name("::1") == "::1"
    assert host_name("localhost.") == "localhost"
    assert AllowedHosts.parse("", bind="::").names == frozenset()
    assert AllowedHosts.parse("a.example,,b.example:99", bind="10.1.2.3").names == {
        "a.example",
        "b.example",
        "10.1.2.3",
    }
    assert not AllowedHosts.parse("").allows(None)
    for bad in ("a b", "http://a.example", "a/b", "*.example.com"):
        with pytest.raises(DashboardConfigError, match="ui_allowed_hosts"):
            AllowedHosts.parse(bad)


@pytest.mark.browser
async def test_a_rebound_name_gets_no_dashboard_and_no_frame_in_chromium(
    db: AsyncConnectionPool, database_url: str
) -> None:
    require_browser()
    from playwright.async_api import expect

    with UiServer(loopback_settings(database_url)) as server:
        # The attacker's name resolving to this machine, as a DNS rebinding makes it.
        rule = f"--host-resolver-rules=MAP {FOREIGN} 127.0.0.1"
        async with chromium_page(rule) as page:
            page.set_default_timeout(20_000)
            response = await page.goto(f"http://{FOREIGN}:{server.port}/ui/failures")
            assert response is not None and response.status == 421
            await expect(page.locator("h1")).to_have_text("Unknown host")
            await expect(page.locator('meta[name="csrf"]')).to_have_count(0)
            # What the attacker's script could read, same-origin: nothing of the dashboard.
            status = await page.evaluate("fetch('/ui/failures').then(r => r.status)")
            assert status == 421

            # And its page cannot show the real dashboard in a frame (for a click trick).
            await page.set_content(f'<iframe id="f" src="{server.url}/ui/failures"></iframe>')
            frame = await (await page.wait_for_selector("#f")).content_frame()
            assert frame is not None
            await frame.wait_for_load_state()
            assert await frame.locator("nav").count() == 0
