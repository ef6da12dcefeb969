"""Workers on other hosts, cut off by taking their link down (``tests/helpers/netns.py``):
the queue's promises where they matter most.

A pool whose sessions the server ended during a cut checks its other connections once one
comes back broken.

Every process here runs on its own host; the server is a real PostgreSQL 15 on the database
host (not the suite's shared server: no ``db`` mark).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.helpers.multihost import Hosts, hosts
from tests.helpers.procs import Proc, wait_for

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Hosts]:
    with hosts({"w1": 2, "w2": 1}) as made:
        yield made


@pytest.fixture
def procs(cluster: Hosts) -> Iterator[list[Proc]]:
    """Processes a test starts: killed, and every link healed, however the test ends."""
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.kill()
    for links in cluster.links.values():
        for link in links:
            if not link.up:
                cluster.net.heal(link)


@pytest.fixture
def dbname(cluster: Hosts) -> str:
    name = f"part_{uuid.uuid4().hex[:10]}"
    cluster.database(name)
    return name


def admin(cluster: Hosts, dbname: str) -> psycopg.Connection[Any]:
    return psycopg.connect(cluster.server.url(cluster.server.primary_port, dbname), autocommit=True)


def rows(cluster: Hosts, dbname: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with admin(cluster, dbname) as conn:
        return conn.execute(query, params or None).fetchall()  # type: ignore[arg-type]


def scalar(cluster: Hosts, dbname: str, query: str, *params: Any) -> Any:
    return rows(cluster, dbname, query, *params)[0][0]


def alive(cluster: Hosts, dbname: str, pids: set[int]) -> set[int]:
    found = rows(
        cluster, dbname, "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", list(pids)
    )
    return {r[0] for r in found}


def test_a_pool_checks_every_connection_once_one_came_back_broken(
    cluster: Hosts, procs: list[Proc], dbname: str, tmp_path: Path
) -> None:
    """A partition the server's side noticed and the client's did not (here: the server's
    keepalive short, the client's long): the server ended the pool's sessions, and their
    sockets on the worker host show nothing until written to. The first statement after the
    heal fails (nothing could know); the pool then takes that broken connection as word
    that the others may be too, and checks each (a round trip) before handing it out:
    no second statement fails."""
    size = 3
    url = cluster.url("w1", dbname) + (
        " keepalives_idle=3600 tcp_user_timeout=0 options='-c tcp_keepalives_idle=1"
        " -c tcp_keepalives_interval=1 -c tcp_keepalives_count=2 -c tcp_user_timeout=2000'"
    )
    env = cluster.env("w1", dbname, DATABASE_URL=url)
    go = tmp_path / "go"
    probe = cluster.start(
        "w1", env, sys.executable, "-m", "tests.helpers.poolprobe", str(size), str(go)
    )
    procs.append(probe)
    pids = {int(p) for p in probe.expect("pids", timeout=30).split()[1:]}
    assert len(pids) == size
    cut = cluster.cut("w1")
    wait_for(lambda: not alive(cluster, dbname, pids), timeout=15, what="the server ending them")
    print(f"the server ended the pool's sessions {time.monotonic() - cut:.1f}s after the cut")
    cluster.heal("w1")
    go.touch()
    results = [
        probe.expect(lambda s: s.startswith(("ok", "failed")), timeout=30) for _ in range(size)
    ]
    assert results[0].startswith("failed"), results
    assert all(r.startswith("ok") for r in results[1:]), results
    assert probe.wait(30) == 0
