"""A pgenough pool on a worker host, used once a partition has healed
(tests/core/test_partition.py).

    python -m tests.helpers.poolprobe SIZE GO_FILE     (DATABASE_URL in the environment)

Opens ``open_pool(DATABASE_URL)`` with SIZE connections and prints ``pids P1 P2 ...`` (their
server backends); once GO_FILE exists (at most a minute later), takes a connection from the
pool SIZE times, one after the other, runs a statement on each and prints ``ok PID`` or
``failed ERROR``, then exits.
"""

from __future__ import annotations

import asyncio
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path

import psycopg

from pgenough.core import open_pool
from pgenough.core.errors import first_line
from tests.helpers.procs import wait_for_file


def say(*parts: object) -> None:
    print(*parts, flush=True)


async def main(size: int, go: Path) -> None:
    pool = await open_pool(os.environ["DATABASE_URL"], min_size=size, max_size=size)
    async with AsyncExitStack() as stack:  # every connection out at once: all made, all seen
        conns = [await stack.enter_async_context(pool.connection()) for _ in range(size)]
        say("pids", *(c.info.backend_pid for c in conns))
    await asyncio.to_thread(wait_for_file, go, 60.0)
    for _ in range(size):
        try:
            async with pool.connection(timeout=10) as conn:
                cur = await conn.execute("SELECT pg_backend_pid()")
                row = await cur.fetchone()
            say("ok", row[0] if row else None)
        except psycopg.Error as exc:
            say("failed", first_line(exc))
    await pool.close()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), Path(sys.argv[2])))
