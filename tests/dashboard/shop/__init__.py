"""A small application's extension of the dashboard, as docs/dashboard.md describes one: a
page of orders (``/orders``) in the navigation, an overview section with its live renderer,
a NOTIFY channel that refreshes the overview, and a link from each order's job to its order.
The orders are the jobs' payloads: the extension needs no table of its own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fastapi.responses import Response

from pgenough.core import JobRecord
from pgenough.core.admin import list_jobs
from pgenough.core.db import AsyncConn
from pgenough.dashboard import (
    Extension,
    Link,
    Section,
    ViewDep,
    extension_router,
    not_found,
    path_id,
    text_param,
)

HERE: Final = Path(__file__).resolve().parent
CHANNEL: Final = "shop_orders"

router = extension_router()


@dataclass(frozen=True)
class Orders:
    open: int
    note: str


async def orders_section(conn: AsyncConn, window: float) -> Orders:
    jobs = await list_jobs(conn, kind="ship", limit=1000)
    return Orders(len(jobs), f"in the last {window:g} s")


@router.get("/orders")
async def orders(view: ViewDep, customer: str = "") -> Response:
    customer = text_param("customer", customer)
    async with view.read() as conn:
        jobs = await list_jobs(conn, kind="ship", text=customer or None)
    return view.render("shop/orders.html", {"jobs": jobs, "customer": customer}, nav="orders")


@router.get("/orders/{order:int}")
async def order(view: ViewDep, order: int) -> Response:
    path_id("the order", order, "an order number")
    async with view.read() as conn:
        jobs = await list_jobs(conn, kind="ship", text=f'"order": {order}')
    if not jobs:
        raise not_found(f"there is no order {order}")
    return view.render("shop/order.html", {"order": order, "job": jobs[0]}, nav="orders")


@router.get("/orders-broken")
async def broken(view: ViewDep) -> Response:
    raise RuntimeError("a bug in the extension")


def order_of(job: JobRecord) -> Link | None:
    if job.kind != "ship" or not isinstance(job.payload, dict):
        return None
    return Link(f"order {job.payload['order']}", f"/orders/{job.payload['order']}", "orders")


def extension() -> Extension:
    return Extension(
        "shop",
        nav=[Link("Orders", "/orders", "orders")],
        router=router,
        templates=HERE / "templates",
        static=HERE / "static",
        overview=[Section("orders", "orders_section.html", orders_section, "orders.js")],
        channels=[CHANNEL],
        job_link=order_of,
    )
