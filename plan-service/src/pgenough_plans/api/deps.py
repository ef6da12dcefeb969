"""What routes depend on, declared once as typed aliases (``ApiDep``, ``PoolDep``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, cast

from fastapi import Depends, Request
from psycopg_pool import AsyncConnectionPool

from pgenough_plans.api.bulkhead import Bulkhead
from pgenough_plans.api.cache import ResponseCache
from pgenough_plans.api.config import ApiConfig
from pgenough_plans.api.replica import Replicas

if TYPE_CHECKING:
    from pgenough_plans.api.answer import Answer


@dataclass(frozen=True)
class ApiState:
    """Everything the app holds while it runs; made by the lifespan, kept on ``app.state``."""

    config: ApiConfig
    pool: AsyncConnectionPool
    cache: ResponseCache[Answer]
    bulkhead: Bulkhead
    cursor_key: bytes = field(repr=False)
    """What signs and checks ``/search`` cursors (``api_cursor_secret``, or the database's)."""
    replicas: Replicas | None = None
    """The read replicas ``/search`` reads while they are within their lag (``api_read_url``)."""


# Async on purpose: FastAPI runs plain ``def`` dependencies in its thread pool, a thread
# switch per request that cost /search more than half its throughput on cache hits.
async def get_api(request: Request) -> ApiState:
    return cast(ApiState, request.app.state.api)


async def get_pool(request: Request) -> AsyncConnectionPool:
    return cast(ApiState, request.app.state.api).pool


ApiDep = Annotated[ApiState, Depends(get_api)]
PoolDep = Annotated[AsyncConnectionPool, Depends(get_pool)]
