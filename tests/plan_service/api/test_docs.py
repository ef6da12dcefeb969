"""/docs and /redoc work on a machine without internet (``api/docs.py``): Chromium on a real
uvicorn server, with every request to anywhere but the server aborted, still shows the
operations, and the pages never even try to reach elsewhere."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from pgenough_plans.api.docs import ASSETS
from tests.dashboard.browser import chromium_page, require_browser
from tests.plan_service.api.helpers import ServerThread, api_app, api_settings

pytestmark = [pytest.mark.browser, pytest.mark.db]

WAIT_MS = 20_000


@pytest.fixture
def server(db: object, database_url: str) -> AsyncIterator[ServerThread]:
    with ServerThread(api_app(api_settings(database_url))) as s:
        yield s


@pytest.fixture
async def offline(server: ServerThread) -> AsyncIterator[tuple[object, list[str]]]:
    """A page whose requests outside ``server`` are aborted, and the list of those it made
    or that the page's Content-Security-Policy refused."""
    require_browser()
    from playwright.async_api import ConsoleMessage, Route

    elsewhere: list[str] = []
    errors: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            elsewhere.append(message.text)

    async def only_the_server(route: Route) -> None:
        if route.request.url.startswith(server.url + "/"):
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort("internetdisconnected")

    async with chromium_page() as page:
        page.set_default_timeout(WAIT_MS)
        page.on("console", console)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.route("**/*", only_the_server)
        yield page, elsewhere
    assert errors == [], f"JavaScript errors on the page: {errors}"


async def test_swagger_ui_lists_the_operations_offline(
    server: ServerThread, offline: tuple[object, list[str]]
) -> None:
    from playwright.async_api import Page, expect

    page, elsewhere = offline
    assert isinstance(page, Page)
    await page.goto(f"{server.url}/docs")
    search = page.locator(".opblock", has=page.locator('[data-path="/search"]'))
    await expect(search).to_be_visible()
    await expect(search).to_contain_text("Events in a time range")
    await expect(page.locator(".opblock")).to_have_count(4)  # search, live, ready, metrics
    await search.locator(".opblock-summary").click()  # the operation opens: parameters shown
    await expect(search.locator(".parameters")).to_contain_text("starts_at")
    assert elsewhere == []


async def test_redoc_shows_the_operations_offline(
    server: ServerThread, offline: tuple[object, list[str]]
) -> None:
    from playwright.async_api import Page, expect

    page, elsewhere = offline
    assert isinstance(page, Page)
    await page.goto(f"{server.url}/redoc")
    await expect(page.locator("h2", has_text="Events in a time range")).to_be_visible()
    await expect(page.get_by_text("/search").first).to_be_attached()
    await expect(page.get_by_role("link", name="API docs by Redocly")).to_be_visible()
    # The one thing ReDoc reaches for elsewhere, its logo, is refused before any request.
    assert all("cdn.redoc.ly/redoc/logo-mini.svg" in e for e in elsewhere), elsewhere


async def test_the_docs_assets_are_served(server: ServerThread) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        html = (await client.get("/docs")).text
        assert f"{ASSETS}/swagger-ui-bundle.js" in html and "cdn." not in html
        assert "cdn." not in (await client.get("/redoc")).text
        for name, kind in (
            ("swagger-ui-bundle.js", "javascript"),
            ("swagger-ui.css", "text/css"),
            ("redoc.standalone.js", "javascript"),
            ("favicon.png", "image/png"),
        ):
            response = await client.get(f"{ASSETS}/{name}")
            assert response.status_code == 200, name
            assert kind in response.headers["content-type"], name
        assert (await client.get("/docs/oauth2-redirect")).status_code == 200
