"""Reads from streaming replicas (``PGENOUGH_API_READ_URL``: one or several): where a read
goes, and how far behind each replica may be.

``/search`` and the dashboard's read-only pages read here (each through its own pools, one per
replica, sharing one lag measure per replica); everything else (writes, the cache's LISTEN,
readiness, the pressure publisher, the dashboard's actions, login and sessions) stays on the
primary.

**Lag** is measured per replica in time, but not as ``now() -
pg_last_xact_replay_timestamp()``: on an idle primary that grows without bound though the
replica has everything. Instead ``watch`` samples the primary's WAL position every
``PROBE_INTERVAL`` and each replica keeps the samples of the last ``max_lag`` (and a little
more); a replica that has replayed ``lsn`` holds everything the primary had written at the
latest sample at or below ``lsn``, so its lag is at most the time since that sample. Idle,
that is the newest sample: at most ``PROBE_INTERVAL``. The measure errs on the safe side by up
to ``PROBE_INTERVAL``; a replica behind every kept sample, or not answering, is infinitely
behind.

**Which replica**: the next, in turn (round-robin), of those that answered their last probe
within ``max_lag``; one found past the bound or away when a read asks it is passed over for
the next. None left: the read goes to the primary (counted in
``pgenough_api_replica_fallbacks_total``): slower, never staler than the bound. A read
already running on a replica when it goes away fails (503 UNAVAILABLE for a search); the next
ones read another replica or the primary until it answers again.

**A replica that stops answering** (frozen, its sockets still open: a stopped process, a
stalled disk or VM) cannot time a query out itself, and TCP keepalives get their answers from
its kernel. So a read on a replica has a deadline on the API's side (``deadline``: the
statement timeout plus ``READ_MARGIN``): past it the connection's socket is shut, which ends
the wait at once (the pool discards the connection; the server, once it runs again, sees the
client gone), the replica is marked away until a probe reaches it again, and the read is
retried elsewhere (``ReplicaStalled``). Probes work the same way, so a frozen replica is passed
over within ``PROBE_TIMEOUT``.

**Read-your-writes**: a read may name a position (``at_least``: the primary's WAL position
right after a write it must see); a replica that has not replayed it is passed over.

**The cache** (``pgenough_plans.api.cache``) gets its invalidations from the primary's listener;
after each it reads the primary's LSN (``fence``), and a page read on a replica is cached
only when that replica had replayed that LSN before the page's query began: the position
``read_connection`` returns is the one of the replica the read went to.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pgenough.core import open_pool
from pgenough.core.db import named_queries
from pgenough.core.errors import first_line
from pgenough_plans.api import metrics

log = logging.getLogger(__name__)

Q: Final = named_queries("pgenough_plans.api", "replica")
PROBE_INTERVAL: Final = 0.25
"""Seconds between two samples of the primary's LSN and each replica's replay: the lag's
resolution, and at most how long a replica that went away is still tried."""
PROBE_TIMEOUT: Final = PROBE_INTERVAL * 4
"""Seconds a probe may take before its replica counts as away."""
READ_MARGIN: Final = 1.0
"""Seconds a read on a replica may run past its statement timeout before the API gives up on
it (``deadline``): the server's own timeout fires first on a replica that runs."""
LAG_HISTORY: Final = 600.0
"""Seconds of the primary's positions kept (more when the lag bound is longer): a replica that
answers is reported with its lag up to this far behind, and with at least this beyond."""
PRIMARY: Final = "primary"
REPLICA: Final = "replica"
SEARCH: Final = "search"
DASHBOARD: Final = "dashboard"
"""The readers (the ``reader`` label of the read metrics)."""
POOL_MIN_SIZE: Final = 2
DEFAULT_PORT: Final = "5432"
"""libpq's port where a URL names none (in a label)."""


class ReplicaStalled(psycopg.OperationalError):
    """A read on a replica passed its deadline: its connection was cut, the replica passed
    over until a probe reaches it again."""


class ReadUrlError(ValueError):
    """``PGENOUGH_API_READ_URL`` is neither one connection string nor a JSON list of them."""


def parse_read_urls(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """The replicas a read-URL setting names: None or empty, none; a list (TOML, or the
    environment's JSON list ``["postgresql://a/db", "host=b dbname=db"]``), each; any other
    text, one URL or conninfo string (neither commas nor spaces can separate URLs: both occur
    in conninfo strings and multi-host URLs)."""
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return ()
        if not text.startswith("["):
            return (text,)
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ReadUrlError(f"a read URL list must be a JSON list of strings: {exc}") from None
        if not isinstance(value, list):
            raise ReadUrlError("a read URL list must be a JSON list of strings")
    urls = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ReadUrlError(f"each read URL must be a non-empty string, not {item!r}")
        urls.append(item.strip())
    return tuple(urls)


def label_of(url: str) -> str:
    """How metrics and pages name the replica at ``url``: its ``host:port`` (every host of a
    multi-host string, each with its port or the default one, an IPv6 address in brackets),
    never its password; ``ReadUrlError`` when it does not parse."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise ReadUrlError(f"a read URL does not parse: {first_line(exc)}") from None
    hosts = str(params.get("host") or params.get("hostaddr") or "localhost").split(",")
    ports = str(params.get("port") or DEFAULT_PORT).split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    # libpq's URI form leaves an empty port for a host given without one (the default).
    return ",".join(
        f"{_host_label(h)}:{p or DEFAULT_PORT}" for h, p in zip(hosts, ports, strict=False)
    )


def _host_label(host: str) -> str:
    if not host:
        return "localhost"
    return f"[{host}]" if ":" in host and not host.startswith("/") else host


def as_user_of(url: str, other: str) -> str:
    """``url`` connecting as ``other``'s user, with its password (a replica has the primary's
    roles): the dashboard's role (``PGENOUGH_UI_DATABASE_URL``) on the API's replicas."""
    who = {k: v for k, v in conninfo_to_dict(other).items() if k in ("user", "password")}
    return make_conninfo(url, **who) if who else url


def labels_of(urls: Sequence[str]) -> tuple[str, ...]:
    """``label_of`` each URL, made unique by the list's index where two are alike."""
    labels = [label_of(url) for url in urls]
    return tuple(
        f"{label}#{i}" if labels.count(label) > 1 else label for i, label in enumerate(labels)
    )


def lsn(text: str) -> int:
    """A ``pg_lsn`` (``16/B374D848``) as an int that orders as ``pg_lsn`` does."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass
class Lag:
    """What is known of one replica's lag: the primary's sampled positions, and the replica's
    last answer (shared by every pool on that replica)."""

    max_lag: float
    label: str = REPLICA
    clock: Callable[[], float] = time.monotonic
    url: str = field(default="", repr=False)
    """The replica's connection string as configured (it may hold a password)."""
    up: bool = False
    """The last probe (or read) reached the replica."""
    lag: float = math.inf
    """Seconds behind the primary as of the last probe; infinite when unknown."""
    replayed: int | None = None
    """The position the replica had replayed at its last answer (None: unknown, or it is no
    standby)."""
    _samples: deque[tuple[float, int]] = field(default_factory=deque)
    """(when, the primary's LSN then), oldest first."""

    def sample_primary(self, position: int) -> None:
        now = self.clock()
        if self._samples and self._samples[-1][1] == position:
            # The same position again (an idle primary): only when it was last seen matters,
            # so an idle hour keeps one sample, not 14,400.
            self._samples[-1] = (now, position)
        else:
            self._samples.append((now, position))
        # Keep one sample older than the history, so that a replica behind it is known to be.
        keep_after = now - max(self.max_lag + 2 * PROBE_INTERVAL, LAG_HISTORY)
        while len(self._samples) > 1 and self._samples[1][0] < keep_after:
            self._samples.popleft()

    def lag_at(self, replayed: int) -> float:
        """How far behind a replica that has replayed ``replayed`` may be, in seconds: behind
        every kept sample, the oldest one's age (it is at least that far behind); infinite
        only before the first sample."""
        now = self.clock()
        for when, position in reversed(self._samples):
            if position <= replayed:
                return max(0.0, now - when)
        return max(0.0, now - self._samples[0][0]) if self._samples else math.inf

    def observe(self, replayed: int | None) -> float:
        """The replica answered, at ``replayed`` (None: it is no standby, it has all)."""
        self.up = True
        self.replayed = replayed
        self.lag = 0.0 if replayed is None else self.lag_at(replayed)
        metrics.REPLICA_LAG.labels(self.label).set(self.lag)
        return self.lag

    def lost(self, reason: str) -> None:
        if self.up:
            log.warning("read replica %s unreachable (%s): reads go elsewhere", self.label, reason)
        self.up = False
        self.lag = math.inf
        self.replayed = None
        metrics.REPLICA_LAG.labels(self.label).set(math.inf)

    @property
    def within(self) -> bool:
        """Up, and within the bound as of the last probe."""
        return self.up and self.lag <= self.max_lag

    def has(self, position: int | None) -> bool:
        """Had replayed ``position`` (None: nothing asked) at its last answer."""
        return position is None or self.replayed is None or self.replayed >= position


@dataclass(frozen=True)
class Replica:
    """One replica as one reader reads it: its pool, and the lag measure every reader of the
    replica shares."""

    pool: AsyncConnectionPool
    lag: Lag

    @property
    def label(self) -> str:
        return self.lag.label


@dataclass
class Replicas:
    """The replicas one reader (``SEARCH``, ``DASHBOARD``) reads, in turn."""

    members: tuple[Replica, ...]
    reader: str = SEARCH
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def measures(self) -> tuple[Lag, ...]:
        return tuple(r.lag for r in self.members)

    def candidates(self, at_least: int | None = None) -> list[Replica]:
        """Those within the bound (and past ``at_least``) as of their last probe, starting
        with the next in turn."""
        found = [r for r in self.members if r.lag.within and r.lag.has(at_least)]
        if len(found) > 1:
            start = next(self._turn) % len(found)
            found = found[start:] + found[:start]
        return found

    @property
    def reading(self) -> str:
        """Where the next read goes: ``REPLICA`` while one is within the bound."""
        return REPLICA if any(lag.within for lag in self.measures) else PRIMARY

    @property
    def lag(self) -> float:
        """The least lag of any replica (infinite when none answers)."""
        return min((lag.lag for lag in self.measures), default=math.inf)

    def sharing(self, pools: Sequence[AsyncConnectionPool], reader: str) -> Replicas:
        """The same replicas (and lag measures) read through ``pools``, one per member."""
        members = tuple(Replica(pool, r.lag) for pool, r in zip(pools, self.members, strict=True))
        return Replicas(members, reader)


async def _position(conn: psycopg.AsyncConnection[Any], name: str) -> int | None:
    cur = await conn.execute(Q[name])
    row = await cur.fetchone()
    return None if row is None or row[0] is None else lsn(row[0])


async def current_lsn(conn: psycopg.AsyncConnection[Any]) -> int:
    """The primary's WAL position on ``conn`` (past every commit before it, the caller's own
    included)."""
    position = await _position(conn, "primary_lsn")
    assert position is not None  # pg_current_wal_insert_lsn() is never NULL on a primary
    return position


async def primary_lsn(primary: AsyncConnectionPool, timeout: float = PROBE_TIMEOUT) -> int:
    """The primary's current WAL position (the cache's fence after an invalidation)."""
    async with asyncio.timeout(timeout), primary.connection(timeout=timeout) as conn:
        return await current_lsn(conn)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "timeout"


def _shut(conn: psycopg.AsyncConnection[Any]) -> None:
    """End any wait on ``conn`` now: its socket shut both ways (the waiting query fails with
    an OperationalError, the pool discards the connection). Not a close, which would pull the
    descriptor from under the event loop's wait on it."""
    with (
        contextlib.suppress(OSError, psycopg.OperationalError),
        socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock,
    ):
        sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def deadline(
    conn: psycopg.AsyncConnection[Any], seconds: float, replica: Lag | None
) -> Iterator[None]:
    """What the block runs on ``conn``, a connection to ``replica``, ends within ``seconds``:
    past them the connection is cut, the replica marked away and ``ReplicaStalled`` raised.
    On the primary (``replica`` None) nothing is added: its statement timeout applies.

    Not ``asyncio.timeout``: a cancelled query makes psycopg send a cancel request and wait
    for the server, seconds more on a server that does not answer."""
    if replica is None:
        yield
        return
    fired = False

    def cut() -> None:
        nonlocal fired
        fired = True
        _shut(conn)

    handle = asyncio.get_running_loop().call_later(seconds, cut)
    try:
        yield
    except psycopg.OperationalError as exc:
        if not fired:
            raise
        replica.lost(f"no answer within {seconds:g} s")
        raise ReplicaStalled(
            f"read replica {replica.label} did not answer within {seconds:g} s"
        ) from exc
    finally:
        handle.cancel()
    if fired:  # cut as the block ended: a connection no one may use again
        replica.lost(f"no answer within {seconds:g} s")
        conn.pgconn.finish()


async def _probe(replica: Replica) -> None:
    try:
        async with replica.pool.connection(timeout=PROBE_TIMEOUT) as conn:
            with deadline(conn, PROBE_TIMEOUT, replica.lag):
                replayed = await _position(conn, "replayed_lsn")
            replica.lag.observe(replayed)
    except (TimeoutError, PoolTimeout, psycopg.Error) as exc:
        replica.lag.lost(_reason(exc))


async def watch(replicas: Replicas, primary: AsyncConnectionPool, started: asyncio.Event) -> None:
    """Sample the primary's LSN and every replica's replay every ``PROBE_INTERVAL`` (the
    replicas at once, so one that hangs delays no other), until cancelled; ``started`` is set
    after the first round."""
    while True:
        try:
            position = await primary_lsn(primary)
        except (TimeoutError, PoolTimeout, psycopg.Error) as exc:
            # No new sample: the kept ones age, and the measured lag grows, as it should.
            log.debug("primary LSN not sampled: %s", exc)
        else:
            for lag in replicas.measures:
                lag.sample_primary(position)
        await asyncio.gather(*(_probe(r) for r in replicas.members))
        started.set()
        await asyncio.sleep(PROBE_INTERVAL)  # the probe's period, not a wait for an event


@dataclass(frozen=True)
class Read:
    """Where a read went: its connection, the position the replica had replayed before it
    (None: the primary, which has everything committed), and the replica (None: the
    primary)."""

    conn: psycopg.AsyncConnection[Any]
    replayed: int | None = None
    replica: Lag | None = None

    @property
    def source(self) -> str:
        """``primary``, or ``replica host:port``, for pages and headers."""
        return PRIMARY if self.replica is None else f"{REPLICA} {self.replica.label}"


async def read_connection(
    replicas: Replicas | None,
    primary: AsyncConnectionPool,
    stack: AsyncExitStack,
    timeout: float,
    *,
    at_least: int | None = None,
) -> Read:
    """A connection for a read, held by ``stack``: on the next replica within the bound that
    has replayed ``at_least`` (when given), else on the primary. A replica that does not
    answer within ``timeout`` (for a connection, then for its position) is passed over."""
    if replicas is None:
        return Read(await stack.enter_async_context(primary.connection(timeout=timeout)))
    reader = replicas.reader
    reason = "lag" if any(lag.up for lag in replicas.measures) else "unreachable"
    if at_least is not None and any(lag.within for lag in replicas.measures):
        reason = "behind_write"
    for replica in replicas.candidates(at_least):
        inner = AsyncExitStack()
        try:
            conn = await inner.enter_async_context(replica.pool.connection(timeout=timeout))
            with deadline(conn, timeout, replica.lag):
                replayed = await _position(conn, "replayed_lsn")
        except (PoolTimeout, psycopg.OperationalError) as exc:
            await inner.aclose()
            replica.lag.lost(_reason(exc))
            reason = "unreachable"
            continue
        if replica.lag.observe(replayed) > replica.lag.max_lag:
            await inner.aclose()
            reason = "lag"
            continue
        if at_least is not None and replayed is not None and replayed < at_least:
            await inner.aclose()
            reason = "behind_write"
            continue
        stack.push_async_exit(inner)
        metrics.REPLICA_READS.labels(reader, REPLICA, replica.label).inc()
        return Read(conn, replayed, replica.lag)
    metrics.REPLICA_FALLBACKS.labels(reader, reason).inc()
    metrics.REPLICA_READS.labels(reader, PRIMARY, "").inc()
    return Read(await stack.enter_async_context(primary.connection(timeout=timeout)))


async def open_replicas(
    urls: Sequence[str],
    max_lag: float,
    *,
    max_size: int,
    statement_timeout: float,
    reader: str = SEARCH,
    timeout: float = 30.0,
    user_of: str | None = None,
    sharing: Replicas | None = None,
) -> Replicas | None:
    """A pool on each of ``urls`` (None without any), not waited for: the API starts,
    reading the primary, while a replica is away. ``sharing``: the same replicas' lag
    measures, already watched (the dashboard's pools share the API's). ``user_of``: a
    connection string whose user and password the pools connect as (the dashboard's role)."""
    if not urls:
        return None
    pools: list[AsyncConnectionPool] = []
    try:
        for i, url in enumerate(urls):
            pools.append(
                await open_pool(
                    url if user_of is None else as_user_of(url, user_of),
                    min_size=min(POOL_MIN_SIZE, max_size),
                    max_size=max_size,
                    name=f"pgenough-{'api' if reader == SEARCH else 'ui'}-read-{i}",
                    timeout=timeout,
                    statement_timeout=statement_timeout,
                    wait=False,
                )
            )
    except BaseException:
        await asyncio.gather(*(pool.close() for pool in pools))
        raise
    if sharing is not None:
        return sharing.sharing(pools, reader)
    return Replicas(
        tuple(
            Replica(pool, Lag(max_lag, label, url=url))
            for pool, label, url in zip(pools, labels_of(urls), urls, strict=True)
        ),
        reader,
    )


async def close_replicas(replicas: Replicas) -> None:
    await asyncio.gather(*(r.pool.close() for r in replicas.members))
