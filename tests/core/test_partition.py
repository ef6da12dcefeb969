"""Workers on other hosts, cut off by taking their link down (``tests/helpers/netns.py``):
the queue's promises where they matter most.

A worker host cut off mid-batch, its handler inside its transaction: its leases expire, a
worker on another host finishes the jobs, and once the partition heals the old worker's late
completions are refused by the lease check (``complete``/``complete_many`` are guarded by
the claim's attempt), each job's effect committed exactly once, for a batch task and for a
``pass_context`` task, whether the partition outlasts the network timeout (the server ends
the cut-off session: ``PGENOUGH_NETWORK_TIMEOUT``'s server side) or not (the session lives
on, and the refusal happens in it). A partition of the listener alone: idle workers still
take new jobs by polling, and the listener reconnects once the link is back; a listener whose
ping goes unanswered says so. And a pool whose sessions the server ended during a cut checks
its other connections once one comes back broken.

Every process here is a real ``pgenough worker run`` on its own host; the server is a real
PostgreSQL 15 on the database host (not the suite's shared server: no ``db`` mark).
"""

from __future__ import annotations

import re
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgenough.core.worker._executor import RESCAN_INTERVAL
from pgenough.core.worker._listener import LISTENER_APPLICATION_PREFIX
from tests.helpers import partitionapp
from tests.helpers.multihost import Hosts, cleaned_up, hosts
from tests.helpers.procs import WORKER_STARTED, Proc, wait_for

pytestmark = [pytest.mark.slow]

SPEC = "tests.helpers.partitionapp:app"
LEASE = 3.0
NETWORK_TIMEOUT = 5.0
"""The cut-off worker's PGENOUGH_NETWORK_TIMEOUT when the partition is to outlast it."""
LONG_NETWORK_TIMEOUT = 30.0
"""... and when the partition (about the lease and a bit) is to be shorter than it."""
JOBS = 6
REFUSED = re.compile(
    r"job (?P<one>\d+) lost its claim before (completing|its failure was recorded)"
    r"|\d+ job\(s\) of a batch lost their claims before completing \((?P<many>[\d, ]+)\)"
)
"""The cut-off worker's line for a completion (or a failure) the lease check refused."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Hosts]:
    with hosts({"w1": 2, "w2": 1}) as made:
        yield made


@pytest.fixture
def procs(cluster: Hosts) -> Iterator[list[Proc]]:
    with cleaned_up(cluster) as started:
        yield started


@pytest.fixture
def dbname(cluster: Hosts) -> str:
    name = f"part_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(cluster.database(name), autocommit=True) as conn:
        conn.execute(partitionapp.EFFECTS)
    return name


def admin(cluster: Hosts, dbname: str) -> psycopg.Connection[Any]:
    return psycopg.connect(cluster.server.url(cluster.server.primary_port, dbname), autocommit=True)


def rows(cluster: Hosts, dbname: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with admin(cluster, dbname) as conn:
        return conn.execute(query, params or None).fetchall()  # type: ignore[arg-type]


def scalar(cluster: Hosts, dbname: str, query: str, *params: Any) -> Any:
    return rows(cluster, dbname, query, *params)[0][0]


def start_worker(
    cluster: Hosts, procs: list[Proc], host: str, env: dict[str, str], *args: str
) -> tuple[Proc, str]:
    """``pgenough worker run`` on ``host``, once started: (process, worker name)."""
    proc = cluster.pgenough(host, env, "worker", "run", SPEC, *args)
    procs.append(proc)
    match = WORKER_STARTED.search(proc.expect(lambda s: bool(WORKER_STARTED.search(s)), timeout=60))
    assert match is not None
    return proc, match.group(1)


def stop(proc: Proc) -> int:
    proc.popen.send_signal(signal.SIGTERM)
    return proc.wait(30)


def worker_env(cluster: Hosts, host: str, dbname: str, **extra: str) -> dict[str, str]:
    settings = {
        "PGENOUGH_WORKER_LEASE": str(LEASE),
        "PGENOUGH_RESCUE_INTERVAL": "1",
        "PGENOUGH_WORKER_POLL_INTERVAL": "0.5",
        "PGENOUGH_NETWORK_TIMEOUT": str(NETWORK_TIMEOUT),
        "PARTITION_HOST": host,
    }
    return cluster.env(host, dbname, **{**settings, **extra})


def open_transactions(cluster: Hosts, dbname: str, worker: str) -> set[int]:
    """Backends of ``worker`` idle inside a transaction that has written (its xid set)."""
    found = rows(
        cluster,
        dbname,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND state = 'idle in transaction' AND backend_xid IS NOT NULL",
        worker,
    )
    return {r[0] for r in found}


def alive(cluster: Hosts, dbname: str, pids: set[int]) -> set[int]:
    found = rows(
        cluster, dbname, "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", list(pids)
    )
    return {r[0] for r in found}


def refused_ids(lines: list[str]) -> set[int]:
    ids: set[int] = set()
    for line in lines:
        if m := REFUSED.search(line):
            if m["one"]:
                ids.add(int(m["one"]))
            else:
                ids |= {int(i) for i in m["many"].split(", ")}
    return ids


@pytest.mark.parametrize("task", ["batch", "each"])
@pytest.mark.parametrize(
    "network_timeout",
    [NETWORK_TIMEOUT, LONG_NETWORK_TIMEOUT],
    ids=["outlasting-the-network-timeout", "shorter-than-the-network-timeout"],
)
def test_a_worker_cut_off_mid_batch_has_its_late_completions_refused(
    cluster: Hosts,
    procs: list[Proc],
    dbname: str,
    tmp_path: Path,
    task: str,
    network_timeout: float,
) -> None:
    """w1 claims every job and holds its transaction open (effects written, not completed);
    its link goes down. Its leases expire, w2 finishes the jobs. With the partition longer
    than w1's network timeout the server ends w1's sessions (their transactions roll back)
    within about that timeout, not the kernel's two hours; shorter, they live on. Either
    way, once healed, w1's late completion is refused by the lease check, with a line
    naming each job, and every job's effect is committed exactly once."""
    fn = partitionapp.batch if task == "batch" else partitionapp.each
    with admin(cluster, dbname) as conn:
        fn.enqueue_many(conn, [{"n": n} for n in range(JOBS)])
    ids = {r[0] for r in rows(cluster, dbname, "SELECT id FROM pgenough.jobs")}
    queue = f"--queue={fn.queue}=10"
    env = worker_env(
        cluster,
        "w1",
        dbname,
        PARTITION_HOLD=str(tmp_path),
        PGENOUGH_NETWORK_TIMEOUT=str(network_timeout),
    )
    old, old_name = start_worker(cluster, procs, "w1", env, queue)
    for _ in range(1 if task == "batch" else JOBS):
        old.expect(lambda s: "holding" in s, timeout=30)
    held = scalar(
        cluster,
        dbname,
        "SELECT count(*) FROM pgenough.jobs WHERE state = 'running' AND worker = %s",
        old_name,
    )
    assert held == JOBS
    sessions = open_transactions(cluster, dbname, old_name)
    assert len(sessions) == (1 if task == "batch" else JOBS)

    cut = cluster.cut("w1")
    new, _ = start_worker(cluster, procs, "w2", worker_env(cluster, "w2", dbname), queue)
    wait_for(
        lambda: scalar(cluster, dbname, "SELECT count(*) FROM pgenough.jobs") == 0,
        timeout=30,
        what="w2 finishing the jobs",
    )
    finished = time.monotonic() - cut
    if network_timeout == NETWORK_TIMEOUT:
        wait_for(
            lambda: not alive(cluster, dbname, sessions),
            timeout=network_timeout + 10,
            what="the server ending the cut-off sessions",
        )
        ended = time.monotonic() - cut
        # The server's tcp_keepalives_*/tcp_user_timeout from PGENOUGH_NETWORK_TIMEOUT: its
        # kernel's own keepalive would wait 2 hours and 11 minutes.
        assert ended < network_timeout + 5
        print(f"w2 finished after {finished:.1f}s; server ended w1's sessions after {ended:.1f}s")
    else:
        assert alive(cluster, dbname, sessions) == sessions  # still open, still in transaction
        print(f"w2 finished after {finished:.1f}s; w1's sessions alive")
    healed = cluster.heal("w1")
    (tmp_path / "release").touch()

    # Every one of its jobs refused to w1, by the lease check, with a line naming it.
    def all_refused() -> bool:
        return refused_ids(old.lines) >= ids

    while not all_refused():
        old.expect(lambda s: bool(REFUSED.search(s)), timeout=30)
    print(f"w1's completions refused {time.monotonic() - healed:.1f}s after the heal")
    assert refused_ids(old.lines) == ids
    effects = rows(
        cluster,
        dbname,
        "SELECT n, count(*), min(host), max(host) FROM partition_effects GROUP BY n",
    )
    assert sorted(effects) == [(n, 1, "w2", "w2") for n in range(JOBS)]
    assert scalar(cluster, dbname, "SELECT count(*) FROM pgenough.jobs") == 0
    assert stop(old) == 0, old.stderr
    assert stop(new) == 0, new.stderr
    for proc in (old, new):
        assert not [line for line in proc.lines if "Traceback" in line], proc.stderr


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


def listener_addresses(cluster: Hosts, dbname: str, worker: str) -> list[str]:
    """Where ``worker``'s listening sessions come from (their client addresses)."""
    found = rows(
        cluster,
        dbname,
        "SELECT host(client_addr) FROM pg_stat_activity WHERE application_name = %s",
        f"{LISTENER_APPLICATION_PREFIX}{worker}",
    )
    return [r[0] for r in found]


def test_a_partition_of_the_listener_alone(cluster: Hosts, procs: list[Proc], dbname: str) -> None:
    """w1's worker claims over its first link and listens over its second
    (``PGENOUGH_DIRECT_DATABASE_URL``), which is cut. The listener notices within the
    network timeout and says so; the worker, idle, takes new jobs all the same by polling;
    the server ends the listening session; once the link is back the listener reconnects,
    says so, listens from w1's second address again, and a notification wakes the worker
    at once again (each job taken well within the poll interval, as before the cut)."""
    poll = 3.0
    timeout = 4.0
    env = worker_env(
        cluster,
        "w1",
        dbname,
        PGENOUGH_WORKER_POLL_INTERVAL=str(poll),
        PGENOUGH_NETWORK_TIMEOUT=str(timeout),
        PGENOUGH_DIRECT_DATABASE_URL=cluster.url("w1", dbname, link=1),
    )
    worker, name = start_worker(cluster, procs, "w1", env, f"--queue={partitionapp.EACH_QUEUE}=4")
    listening_on = cluster.address("w1", link=1)
    wait_for(
        lambda: listener_addresses(cluster, dbname, name) == [listening_on],
        timeout=30,
        what="the listener on w1's second link",
    )
    count = 0

    def taken() -> float:
        """Seconds from the commit of one new job to the commit of its effect, enqueued
        once the worker is idle: past the rescan that follows a claim (``RESCAN_INTERVAL``),
        waiting for a notification or its next poll, ``poll`` seconds after its last claim."""
        nonlocal count
        n, count = count, count + 1
        time.sleep(RESCAN_INTERVAL + 0.2)
        with admin(cluster, dbname) as conn:
            partitionapp.each.enqueue(conn, n=n)
        began = time.monotonic()
        wait_for(
            lambda: bool(rows(cluster, dbname, "SELECT 1 FROM partition_effects WHERE n = %s", n)),
            timeout=poll + 10,
            what=f"job {n} done",
        )
        return time.monotonic() - began

    before = [taken() for _ in range(3)]
    cut = cluster.cut("w1", link=1)
    worker.expect(lambda s: "listener lost" in s, timeout=timeout + 10)
    lost = time.monotonic() - cut
    wait_for(
        lambda: not listener_addresses(cluster, dbname, name),
        timeout=timeout + 10,
        what="the server ending the listening session",
    )
    ended = time.monotonic() - cut
    during = [taken() for _ in range(2)]
    healed = cluster.heal("w1", link=1)
    worker.expect(lambda s: "subscriber reconnected" in s, timeout=30)
    back = time.monotonic() - healed
    wait_for(
        lambda: listener_addresses(cluster, dbname, name) == [listening_on],
        timeout=10,
        what="the listener back on w1's second link",
    )
    after = [taken() for _ in range(3)]
    print(
        f"listener lost {lost:.1f}s after the cut, its session ended {ended:.1f}s after it,"
        f" back {back:.1f}s after the heal; jobs taken in {max(before):.2f}s before,"
        f" {min(during):.2f}-{max(during):.2f}s during (poll {poll:g}s), {max(after):.2f}s after"
    )
    assert lost < timeout + 6
    # Cut off, polls took them, within a poll interval; the second (the first one's claim
    # set the clock) about a poll interval after the last claim.
    assert max(during) < poll + 3
    assert during[1] > poll - RESCAN_INTERVAL - 1
    # Notifications took them, before the cut and after the heal.
    assert max(before) < 1.5
    assert max(after) < 1.5
    effects = rows(cluster, dbname, "SELECT n, count(*) FROM partition_effects GROUP BY n")
    assert sorted(effects) == [(n, 1) for n in range(count)]
    assert stop(worker) == 0, worker.stderr
    assert not [line for line in worker.lines if "Traceback" in line], worker.stderr


def test_a_listener_whose_ping_goes_unanswered_says_so(
    cluster: Hosts, procs: list[Proc], dbname: str
) -> None:
    """With the defaults' proportions (a listener pings after 5 poll intervals of silence,
    10 s, sooner than the network timeout of 20 s), a cut listener is found lost by its
    ping within two ping intervals: the line says so, not a bare "TimeoutError:"; it
    reconnects once healed."""
    poll = 0.4  # pings after 2 s of silence
    env = worker_env(
        cluster,
        "w2",
        dbname,
        PGENOUGH_WORKER_POLL_INTERVAL=str(poll),
        PGENOUGH_NETWORK_TIMEOUT="20",
    )
    worker, name = start_worker(cluster, procs, "w2", env, f"--queue={partitionapp.EACH_QUEUE}=1")
    wait_for(
        lambda: listener_addresses(cluster, dbname, name) == [cluster.address("w2")],
        timeout=30,
        what="the listener",
    )
    cut = cluster.cut("w2")
    lost = worker.expect(lambda s: "listener lost" in s, timeout=20)
    after = time.monotonic() - cut
    print(f"listener lost {after:.1f}s after the cut: {lost}")
    assert f"listener lost (TimeoutError: no answer to a ping within {5 * poll:g} s)" in lost
    # Two ping intervals (silence, then the ping's wait): not 10 s more of psycopg trying
    # to cancel the ping on the server over the cut link.
    assert after < 2 * 5 * poll + 5
    cluster.heal("w2")
    worker.expect(lambda s: "subscriber reconnected" in s, timeout=30)
    assert stop(worker) == 0, worker.stderr
    assert not [line for line in worker.lines if "Traceback" in line], worker.stderr
