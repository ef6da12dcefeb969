"""An application's extension (tests/dashboard/shop): its navigation entry, its pages
rendered with the dashboard's base template and macros at the mount, its overview section
(drawn on the page, in the overview's JSON, live), its static files, its NOTIFY channel, its
links from jobs, and its errors shown as the dashboard's pages; names checked."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from pgenough.core import enqueue, publish
from pgenough.dashboard import DashboardConfigError, Extension, Link, Section
from tests.dashboard import shop
from tests.dashboard.helpers import TOKEN, dashboard_of, html, serving, text, ui_settings
from tests.dashboard.server import UiServer, sse

pytestmark = pytest.mark.db

PREFIX = "/queue"


async def orders(db: AsyncConnectionPool) -> list[int]:
    async with db.connection() as conn:
        ids = [
            await enqueue(conn, "ship", {"order": n, "customer": who}, queue="shop")
            for n, who in ((1, "ann"), (2, "bob"))
        ]
    return [i for i in ids if i is not None]


async def test_an_extensions_pages_use_the_dashboards_layout_at_the_mount(
    db: AsyncConnectionPool, database_url: str
) -> None:
    ann, bob = await orders(db)
    settings = ui_settings(database_url, ui_actions=True)
    async with serving(settings, PREFIX, [shop.extension()]) as (_, client):
        page = html(await client.get(f"{PREFIX}/orders", params={"customer": "ann"}))
        # The dashboard's navigation, the extension's entry after its own, marked active.
        nav = re.findall(r"<nav>(.*?)</nav>", page, re.DOTALL)[0]
        assert re.findall(r'href="([^"]+)"', nav) == [
            f"{PREFIX}/",
            f"{PREFIX}/jobs",
            f"{PREFIX}/failures",
            f"{PREFIX}/workers",
            f"{PREFIX}/periodic",
            f"{PREFIX}/orders",
        ]
        assert f'<a href="{PREFIX}/orders" class="active">Orders</a>' in page
        assert f'href="{PREFIX}/static/ui.css"' in page and "actions enabled" in page
        # The macros: a jobs table with the job's link to its order, and its actions.
        assert f'href="{PREFIX}/jobs/{ann}"' in page and f"/jobs/{bob}" not in page
        assert f'<a href="{PREFIX}/orders/1">order 1</a>' in page
        assert f'action="{PREFIX}/jobs/{ann}/discard"' in page
        detail = html(await client.get(f"{PREFIX}/orders/2"))
        assert f'id="the-job" href="{PREFIX}/jobs/{bob}"' in detail
        # The dashboard's own job pages link to the order too.
        job = html(await client.get(f"{PREFIX}/jobs/{ann}"))
        assert "belongs to" in job and f'href="{PREFIX}/orders/1"' in job
        listed = html(await client.get(f"{PREFIX}/jobs"))
        assert f'<a href="{PREFIX}/orders/2">order 2</a>' in listed
        # Its errors are the dashboard's pages.
        assert "there is no order 7" in html(await client.get(f"{PREFIX}/orders/7"), 404)
        bug = html(await client.get(f"{PREFIX}/orders-broken"), 500)
        assert "Something went wrong" in bug and "a bug" not in bug
        bad = html(await client.get(f"{PREFIX}/orders", params={"customer": "\x00"}), 400)
        assert "customer must not contain a NUL character" in bad
        # Its static files, under the mount.
        script = await client.get(f"{PREFIX}/ext/shop/orders.js")
        assert script.status_code == 200 and "pgenoughDashboard.section" in script.text


async def test_an_extensions_section_is_on_the_overview_and_in_its_json(
    db: AsyncConnectionPool, database_url: str
) -> None:
    await orders(db)
    async with serving(ui_settings(database_url), PREFIX, [shop.extension()]) as (_, client):
        page = html(await client.get(f"{PREFIX}/"))
        assert '<span id="open-orders">2</span> open orders' in page
        assert "in the last 3600 s" in text(page)
        # Its renderer after the dashboard's script, which it registers with.
        scripts = re.findall(r'<script src="([^"]+)"', page)
        assert scripts == [f"{PREFIX}/static/live.js", f"{PREFIX}/ext/shop/orders.js"]
        body = (await client.get(f"{PREFIX}/api/overview")).json()
        assert body["data"]["sections"] == {"orders": {"open": 2, "note": "in the last 3600 s"}}


async def test_an_extensions_pages_need_the_login(database_url: str, db: object) -> None:
    settings = ui_settings(database_url, ui_token=TOKEN)
    async with serving(settings, PREFIX, [shop.extension()]) as (_, client):
        response = await client.get(f"{PREFIX}/orders")
        assert response.status_code == 303
        assert response.headers["location"] == f"{PREFIX}/login?next={PREFIX}/orders"
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert (await client.get(f"{PREFIX}/orders", headers=bearer)).status_code == 200


async def test_an_extensions_channel_refreshes_the_live_overview(
    db: AsyncConnectionPool, database_url: str
) -> None:
    # A long tick: the refresh comes from the extension's channel, not the clock.
    settings = ui_settings(database_url, ui_tick=60.0)
    with UiServer(settings, PREFIX, [shop.extension()]) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=20) as client,
            client.stream("GET", f"{PREFIX}/events") as stream,
        ):
            events = sse(stream)
            _, first = await anext(events)
            assert first["sections"]["orders"]["open"] == 0
            async with db.connection() as conn, conn.transaction():
                # Scheduled for later: the queue's own channel hears of it only when due.
                await conn.execute(
                    "INSERT INTO pgenough.jobs (queue, kind, payload, run_at)"
                    " VALUES ('shop', 'ship', '{\"order\": 3}', now() + interval '1 hour')"
                )
                await publish(conn, shop.CHANNEL, "3")
            async with asyncio.timeout(20):
                async for name, data in events:
                    if name == "overview" and data["sections"]["orders"]["open"] == 1:
                        break


def test_extensions_are_checked_when_built(database_url: str, tmp_path: Path) -> None:
    for bad in ("", "Shop", "shop/x", "1shop", "x" * 41):
        with pytest.raises(DashboardConfigError, match="extension's name"):
            Extension(bad)
    with pytest.raises(DashboardConfigError, match="is not a directory"):
        Extension("shop", templates=tmp_path / "missing")
    section = Section("s", "s.html", shop.orders_section, "s.js")
    with pytest.raises(DashboardConfigError, match="need a templates directory"):
        Extension("shop", overview=[section])
    with pytest.raises(DashboardConfigError, match="needs a static directory"):
        Extension("shop", templates=tmp_path, overview=[section])
    with pytest.raises(DashboardConfigError, match="starts with one /"):
        Link("Orders", "orders")
    with pytest.raises(DashboardConfigError, match="must be unique"):
        dashboard_of(ui_settings(database_url), [shop.extension(), shop.extension()])
