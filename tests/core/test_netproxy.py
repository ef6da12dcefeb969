"""The impaired link of the tests and benchmarks (tests/helpers/netproxy.py): what it does to
a PostgreSQL connection, and what it counts."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

from pgenough.core.db import with_network_timeout
from tests.helpers.netproxy import BLACKHOLE_SUPPORTED, Faults, Proxy
from tests.helpers.procs import ROOT

pytestmark = pytest.mark.db


async def connect(url: str, network_timeout: float = 0) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(
        with_network_timeout(url, network_timeout), autocommit=True
    )


async def timed(conn: psycopg.AsyncConnection[Any], query: str) -> float:
    start = time.perf_counter()
    await (await conn.execute(query)).fetchall()
    return time.perf_counter() - start


async def test_round_trips_and_bytes_are_counted(database_url: str) -> None:
    link = Proxy(database_url)
    async with link.running():
        assert link.url is not None
        async with await connect(link.url) as conn:
            before = link.stats
            for _ in range(20):
                await conn.execute("SELECT 1", prepare=False)  # preparing is one more
            # One round trip however many rows come back, and however many messages.
            await (await conn.execute("SELECT generate_series(1, 5000)")).fetchall()
            spent = link.stats.minus(before)
    assert spent.round_trips == 21
    assert spent.bytes_up > 20 * len("SELECT 1") and spent.bytes_down > 5000 * 4
    assert link.stats.connections == 1 and link.stats.closed == 1


async def test_latency_each_way_in_order_and_per_connection(database_url: str) -> None:
    one_way = 0.025
    link = Proxy(database_url, delay=one_way)
    async with link.running():
        assert link.url is not None
        conns = [await connect(link.url) for _ in range(8)]
        try:
            rtt = min([await timed(conns[0], "SELECT 1") for _ in range(3)])
            # (A chunk may go out a fraction of a millisecond early: the proxy corrects its
            # loop's timers by how late they were seen to wake.)
            assert 2 * one_way - 0.002 <= rtt < 2 * one_way + 0.2
            # A large answer in many chunks: intact (the protocol would fail on a byte out
            # of order) and streamed, not one delay per chunk.
            start = time.perf_counter()
            cur = await conns[0].execute(
                "SELECT sum(x), count(*) FROM generate_series(1, 300000) x"
            )
            assert await cur.fetchone() == (45000150000, 300000)
            assert time.perf_counter() - start < 2 * one_way + 1.0
            # Eight connections waiting at once: their delays overlap (one queue per
            # connection and direction), they do not add up (8 x 50 ms).
            start = time.perf_counter()
            await asyncio.gather(*(timed(c, "SELECT 1") for c in conns))
            assert time.perf_counter() - start < 2 * one_way + 0.2
        finally:
            for conn in conns:
                await conn.close()


@pytest.mark.skipif(not BLACKHOLE_SUPPORTED, reason="stalls are black holes on Linux only")
async def test_a_stall_is_a_pause_below_the_network_timeout_and_a_dead_link_above(
    database_url: str,
) -> None:
    network_timeout = 2.0
    link = Proxy(database_url, delay=0.005)
    async with link.running():
        assert link.url is not None
        async with await connect(link.url, network_timeout) as conn:
            link.stall_link(0.6)
            assert await timed(conn, "SELECT 1") >= 0.5  # held, then delivered
            link.stall_link(20.0)
            start = time.perf_counter()
            with pytest.raises(psycopg.OperationalError, match="timed out"):
                await conn.execute("SELECT 1")
            # The client's own TCP timers gave up, long before the stall's end.
            assert time.perf_counter() - start < network_timeout + 3
            assert link.link_stalled()
    assert [c.ended_by for c in link.connections] == ["cut"]


@pytest.mark.skipif(not BLACKHOLE_SUPPORTED, reason="stalls are black holes on Linux only")
async def test_after_a_stall_the_proxy_finds_a_peer_that_gave_up(database_url: str) -> None:
    """An idle client whose keepalives went unanswered: once the stall ends, the proxy's
    probes meet the client's reset and the proxy ends the session on the server too."""
    link = Proxy(database_url)
    async with link.running():
        assert link.url is not None
        async with await connect(link.url, 1.0) as conn:
            pid = conn.info.backend_pid
            link.stall_link(4.0)
            await asyncio.sleep(6.5)
            assert link.connections[0].ended_by in ("client", "server")
            async with await connect(database_url) as admin:
                for _ in range(50):  # the backend exits as it reads the end of its client
                    cur = await admin.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
                    )
                    if await cur.fetchone() == (0,):
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError(f"backend {pid} outlived its client")
            with pytest.raises(psycopg.OperationalError):
                await conn.execute("SELECT 1")


async def test_a_held_stall_keeps_the_connection(database_url: str) -> None:
    """``blackhole=False``: bytes held, TCP acknowledged: no timer of the peers runs out."""
    link = Proxy(database_url, blackhole=False)
    async with link.running():
        assert link.url is not None
        async with await connect(link.url, 1.0) as conn:
            link.stall_link(3.0)
            assert await timed(conn, "SELECT 1") >= 2.9


async def test_a_reset_fails_the_statement_and_the_next_connection_works(
    database_url: str,
) -> None:
    link = Proxy(database_url)
    async with link.running():
        assert link.url is not None
        async with await connect(link.url) as conn:
            link.reset_all()
            with pytest.raises(psycopg.OperationalError):
                await conn.execute("SELECT 1")
        async with await connect(link.url) as conn:
            assert await timed(conn, "SELECT 1") < 1
    assert link.stats.resets == 1
    assert [c.ended_by for c in link.connections] == ["reset", "cut"]


async def test_random_faults_follow_their_seed(database_url: str) -> None:
    """The same seed draws the same faults (when, which, how long) from the same start."""
    faults = Faults(stall_rate=30, stall_s=(0.01, 0.02), reset_rate=10, seed=7)

    async def run() -> list[tuple[str, float]]:
        link = Proxy(database_url)
        async with link.running():
            assert link.url is not None
            async with await connect(link.url):  # one idle connection to hit
                link.inject(faults)
                await asyncio.sleep(0.5)
                link.calm()
        return [(e.kind, round(e.seconds, 6)) for e in link.events]

    first, second = await run(), await run()
    same = min(len(first), len(second))
    assert same >= 3
    assert first[: same - 1] == second[: same - 1]
    assert all(0.01 <= s <= 0.02 for kind, s in first if kind == "stall")


def test_as_its_own_process(database_url: str) -> None:
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers.netproxy",
            "--target",
            database_url,
            "--rtt-ms",
            "10",
            "--control",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdin is not None and proxy.stdout is not None
    try:
        listening = proxy.stdout.readline().split()
        assert listening[0] == "listening", listening
        port = listening[1].rpartition(":")[2]
        url = psycopg.conninfo.make_conninfo(database_url, host="127.0.0.1", port=port)
        with psycopg.connect(url, autocommit=True) as conn:
            start = time.perf_counter()
            for _ in range(5):
                conn.execute("SELECT 1")
            assert time.perf_counter() - start >= 5 * (0.010 - 0.002)
            proxy.stdin.write("stats\n")
            proxy.stdin.flush()
            word, counters = proxy.stdout.readline().split(" ", 1)
        assert word == "stats" and json.loads(counters)["round_trips"] >= 5
        proxy.stdin.close()  # the end of its input stops it
        word, _, counters = proxy.stdout.read().strip().partition(" ")
        assert proxy.wait(10) == 0
    finally:
        proxy.kill()
    assert word == "counters" and json.loads(counters)["connections"] == 1
