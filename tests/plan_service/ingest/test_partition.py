"""The fetch worker on a host of its own (``tests/helpers/netns.py``), cut off from the
database mid-stream while its provider (the simulator, on the worker host's own loopback)
goes on serving.

The run ends FAILED with its reason, the provider's advisory lock is released on the server
while the partition lasts (``PGENOUGH_NETWORK_TIMEOUT``'s server side: not the kernel's two
hours), and once the link is back the next interval fetches the provider again. A real
PostgreSQL 15 on the database host, not the suite's shared server: no ``db`` mark.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgenough.core.locks import lock_key
from pgenough_plans.ingest.fetch import lock_name
from tests.helpers.multihost import Hosts, cleaned_up, hosts
from tests.helpers.procs import Proc, wait_for

pytestmark = [pytest.mark.slow]

PROVIDER = "sim"
NETWORK_TIMEOUT = 4.0
INTERVAL = 3.0
PLANS = 4000
"""About 36 chunks of 64 KiB: at ``SLOW`` seconds before each, a stream of some 14 s, cut
within its first second, and its next heartbeat (5 s after its first) fails within the
network timeout after that: mid-stream."""
SLOW = 0.4
BANNER = re.compile(r"provider simulator: (http://\S+)/planList")
ORPHANED = "fetch worker died or lost its database connection (its provider lock was free)"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Hosts]:
    with hosts({"w1": 1}) as made:
        yield made


@pytest.fixture
def procs(cluster: Hosts) -> Iterator[list[Proc]]:
    with cleaned_up(cluster) as started:
        yield started


def query(cluster: Hosts, dbname: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    url = cluster.server.url(cluster.server.primary_port, dbname)
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params or None).fetchall()  # type: ignore[arg-type]


def lock_holders(cluster: Hosts, dbname: str) -> list[int]:
    """Backends holding the provider's advisory lock, as the server sees them."""
    key = lock_key(lock_name(PROVIDER)) & 0xFFFFFFFFFFFFFFFF
    found = query(
        cluster,
        dbname,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND classid = %s AND objid = %s AND objsubid = 1",
        key >> 32,
        key & 0xFFFFFFFF,
    )
    return [r[0] for r in found]


def runs(cluster: Hosts, dbname: str) -> list[tuple[int, str, str | None, str | None, int]]:
    """(id, status, reason, phase, bytes) of every run, oldest first."""
    found = query(
        cluster,
        dbname,
        "SELECT id, status::text, reason, phase, bytes FROM plans.runs ORDER BY id",
    )
    return [(r[0], r[1], r[2], r[3], r[4]) for r in found]


def test_the_fetch_worker_cut_off_mid_stream(cluster: Hosts, procs: list[Proc]) -> None:
    """The link of the fetch worker's host goes down while it streams a slow snapshot.
    Within the network timeout the server ends its session, releasing the provider's lock
    (checked in pg_locks while the link is still down); the worker finds its connection
    gone, says the run FAILED and that it could not record it. Once the link is back, the
    next interval's fetch takes the lock, fails the old run as orphaned (its reason: what it
    was doing), and fetches the provider again: STAGED. Nothing RUNNING, no staging left."""
    dbname = f"fetch_{uuid.uuid4().hex[:10]}"
    cluster.database(dbname)
    env = cluster.env("w1", dbname, PGENOUGH_NETWORK_TIMEOUT=str(NETWORK_TIMEOUT))
    sim = cluster.plans("w1", env, "provider-sim", "--port", "0", "--plans", str(PLANS))
    procs.append(sim)
    match = BANNER.search(sim.expect(lambda s: bool(BANNER.search(s)), timeout=30))
    assert match is not None
    url = match.group(1)
    # The first snapshot is served slowly, those after it at full speed.
    faults = json.dumps({"faults": [f"slow:{SLOW}"]})
    cluster.workers["w1"].run(
        [sys.executable, "-c", "import httpx, sys;"
         f" httpx.post('{url}/_control/faults', content=sys.argv[1]).raise_for_status()",
         faults],
    )  # fmt: skip
    fetch = cluster.plans(
        "w1", env, "worker", "fetch", "--provider", f"{PROVIDER}={url}/planList",
        "--interval", str(INTERVAL),
    )  # fmt: skip
    procs.append(fetch)
    fetch.expect(lambda s: f"fetching {PROVIDER}" in s, timeout=60)

    def streaming() -> bool:
        found = runs(cluster, dbname)
        phase = (found[-1][3] or "") if found else ""
        return phase.startswith("streaming") and found[-1][1] == "RUNNING"

    wait_for(streaming, timeout=30, what="the run streaming")
    first = runs(cluster, dbname)[-1][0]
    holders = lock_holders(cluster, dbname)
    assert len(holders) == 1

    cut = cluster.cut("w1")
    wait_for(lambda: not lock_holders(cluster, dbname), timeout=NETWORK_TIMEOUT + 10,
             what="the server releasing the provider's lock")  # fmt: skip
    released = time.monotonic() - cut
    failed = fetch.expect(lambda s: f"run {first} ({PROVIDER}) FAILED" in s, timeout=30)
    noticed = time.monotonic() - cut
    assert "database connection lost while streaming" in failed, failed
    # What cut it off, not the echo of a report on the closed connection afterwards.
    assert "the connection is closed" not in failed, failed
    assert any("could not be marked FAILED" in line for line in fetch.lines), fetch.lines
    # Still cut off: the run is RUNNING on the server, its lock already free.
    assert not cluster.links["w1"][0].up
    assert runs(cluster, dbname)[-1][:2] == (first, "RUNNING")
    assert not lock_holders(cluster, dbname)

    healed = cluster.heal("w1")
    fetch.expect(lambda s: f"run {first} of {PROVIDER} FAILED" in s, timeout=INTERVAL + 30)
    fetch.expect(lambda s: f"({PROVIDER}) STAGED" in s, timeout=60)
    again = time.monotonic() - healed
    print(
        f"lock released {released:.1f}s after the cut, the worker noticed after {noticed:.1f}s;"
        f" fetched again {again:.1f}s after the heal"
    )
    assert released < NETWORK_TIMEOUT + 5  # the kernel's own keepalive: 2 h 11 min
    fetch.popen.send_signal(signal.SIGTERM)
    assert fetch.wait(30) == 0, fetch.stderr
    assert not [line for line in fetch.lines if "Traceback" in line], fetch.stderr
    found = runs(cluster, dbname)
    assert found[0][0] == first and found[0][1] == "FAILED"
    assert found[0][2] is not None and found[0][2].startswith(f"{ORPHANED} while streaming")
    assert found[1][1] == "STAGED"
    # Later intervals' runs (until the stop) are STAGED, or FAILED by the stop: none RUNNING,
    # and no staging table but a STAGED run's.
    assert {r[1] for r in found[2:]} <= {"STAGED", "FAILED"}
    staging = query(
        cluster,
        dbname,
        "SELECT tablename FROM pg_tables WHERE schemaname = 'plans'"
        " AND tablename LIKE 'staging\\_%'",
    )
    assert sorted(staging) == sorted((f"staging_{r[0]}",) for r in found if r[1] == "STAGED")
    assert not lock_holders(cluster, dbname)
