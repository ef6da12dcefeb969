"""What routes depend on, declared once as typed aliases (``ApiDep``, ``PoolDep``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request
from psycopg_pool import AsyncConnectionPool

from pgenough.api.bulkhead import Bulkhead
from pgenough.api.cache import ResponseCache
from pgenough.api.config import ApiConfig


@dataclass(frozen=True)
class ApiState:
    """Everything the app holds while it runs; made by the lifespan, kept on ``app.state``."""

    config: ApiConfig
    pool: AsyncConnectionPool
    cache: ResponseCache
    bulkhead: Bulkhead


def get_api(request: Request) -> ApiState:
    return cast(ApiState, request.app.state.api)


def get_pool(request: Request) -> AsyncConnectionPool:
    return get_api(request).pool


ApiDep = Annotated[ApiState, Depends(get_api)]
PoolDep = Annotated[AsyncConnectionPool, Depends(get_pool)]
