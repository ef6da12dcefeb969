from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.settings import PlanSettings
from pgenough_plans.sim.server import SimServer
from tests.plan_service.api.helpers import api_settings, serving


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(plans=600, seed=5) as server:
        yield server


def ui_settings(database_url: str, **overrides: Any) -> PlanSettings:
    overrides.setdefault("ui_tick", 0.5)
    return api_settings(database_url, **overrides)


@pytest.fixture
async def ui(
    db: AsyncConnectionPool, database_url: str
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The API with the dashboard read-only and no token, called in-process."""
    async with serving(ui_settings(database_url)) as pair:
        yield pair


@pytest.fixture
async def ui_actions(
    db: AsyncConnectionPool, database_url: str
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The dashboard with actions enabled."""
    async with serving(ui_settings(database_url, ui_actions=True)) as pair:
        yield pair
