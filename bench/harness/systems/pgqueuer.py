"""PgQueuer (asyncpg): its schema, its bulk enqueue, and a drain in its drain mode."""

from __future__ import annotations

import asyncio
import time
from multiprocessing.synchronize import Barrier
from typing import Any

from bench.harness.systems.base import BARRIER_TIMEOUT, KIND, DrainSpec
from psycopg.conninfo import conninfo_to_dict


def asyncpg_params(url: str) -> dict[str, Any]:
    """asyncpg takes no key=value conninfo: translate the parts it needs."""
    params = conninfo_to_dict(url)
    out: dict[str, Any] = {"database": params.get("dbname"), "user": params.get("user")}
    for key in ("host", "port", "password"):
        if params.get(key):
            out[key] = params[key]
    return out


def setup_pgqueuer(url: str) -> None:
    async def go() -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(**asyncpg_params(url))
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    asyncio.run(go())


def enqueue_pgqueuer(url: str, n: int) -> float:
    async def go() -> float:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(**asyncpg_params(url))
        try:
            queries = Queries(AsyncpgDriver(conn))
            payloads: list[bytes | None] = [str(i).encode() for i in range(n)]
            start = time.perf_counter()
            ids = await queries.enqueue([KIND] * n, payloads, [0] * n)
            elapsed = time.perf_counter() - start
        finally:
            await conn.close()
        assert len(ids) == n
        return elapsed

    return asyncio.run(go())


async def drain_pgqueuer(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    import asyncpg
    from pgqueuer import PgQueuer
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job as PgqJob
    from pgqueuer.types import QueueExecutionMode

    conn = await asyncpg.connect(**asyncpg_params(spec.url))
    done = 0
    try:
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint(KIND)
        async def noop(job: PgqJob) -> None:
            nonlocal done
            done += 1

        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        await pgq.run(batch_size=spec.batch, mode=QueueExecutionMode.drain)
        return time.time(), done
    finally:
        await conn.close()
