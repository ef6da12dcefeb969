"""A database host and worker hosts of our own (``tests/helpers/netns.py``), for the partition
tests: a real PostgreSQL 15 server (``tests/helpers/standby.py``'s, alone) in the database
host, listening on its end of every link; worker hosts each with their own links to it.

``hosts(links={"w1": 2, "w2": 1})`` makes them and removes them at the end however the
block ends. The test process reaches the server through its unix socket directory
(``Hosts.admin_url``, ``Hosts.database(name)``: a fresh migrated database); a process in a
worker host gets only ``Hosts.url(host, dbname, link)``: TCP over that host's link.
``Hosts.pgenough(host, env, *args)`` runs the ``pgenough`` command in a host (``start``, any
program), its output (the log) line by line for ``Proc.expect``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pgenough.core import migrate
from pgenough.core.db import create_database, with_database
from pgenough_plans.ingest.store import MIGRATIONS as PLANS_MIGRATIONS
from tests.helpers import netns, standby
from tests.helpers.procs import ROOT, Proc

PGENOUGH = str(Path(sys.executable).with_name("pgenough"))
PLANS = str(Path(sys.executable).with_name("pgenough-plans"))


def skip_unless_available() -> None:
    netns.skip_unless_available()
    standby.skip_unless_available()


@dataclass
class Hosts:
    net: netns.Network
    server: standby.StandbyPair
    db: netns.Host
    workers: dict[str, netns.Host]
    links: dict[str, list[netns.Link]]
    """Each worker host's links to the database host, in order."""

    @property
    def admin_url(self) -> str:
        return self.server.primary_url

    def url(self, host: str, dbname: str, link: int = 0) -> str:
        """The server over TCP, as worker host ``host`` reaches it over its ``link``."""
        return self.server.tcp_url(self.links[host][link].a_addr, dbname)

    def address(self, host: str, link: int = 0) -> str:
        """Worker host ``host``'s own address on its ``link`` (its sessions' client_addr)."""
        return self.links[host][link].b_addr

    def database(self, name: str) -> str:
        """A new database ``name`` migrated for the plan service; its admin URL (socket)."""
        create_database(self.admin_url, name)
        url = with_database(self.admin_url, name)
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn, [PLANS_MIGRATIONS])
        return url

    def env(self, host: str, dbname: str, **extra: str) -> dict[str, str]:
        """A worker host's environment: its ``DATABASE_URL``, the project on the path."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PGENOUGH_", "PG"))}
        env.pop("DATABASE_URL", None)
        env["DATABASE_URL"] = self.url(host, dbname)
        env["PYTHONPATH"] = str(ROOT)
        env["PGENOUGH_LOG_LEVEL"] = "INFO"
        env.update(extra)
        return env

    def start(self, host: str, env: dict[str, str], *argv: str) -> Proc:
        """``argv`` in worker host ``host``, its stdout and stderr the lines to expect."""
        proc = Proc.__new__(Proc)
        proc._start(self.workers[host].command(argv), env, merge_stderr=True)
        return proc

    def pgenough(self, host: str, env: dict[str, str], *args: str) -> Proc:
        """``pgenough *args`` in worker host ``host``, its log among the lines to expect."""
        return self.start(host, env, PGENOUGH, *args)

    def plans(self, host: str, env: dict[str, str], *args: str) -> Proc:
        """``pgenough-plans *args`` in worker host ``host``."""
        return self.start(host, env, PLANS, *args)

    def cut(self, host: str, link: int = 0) -> float:
        """Cut ``host``'s ``link``; when (``time.monotonic()``)."""
        self.net.cut(self.links[host][link])
        return time.monotonic()

    def heal(self, host: str, link: int = 0) -> float:
        self.net.heal(self.links[host][link])
        return time.monotonic()


@contextlib.contextmanager
def hosts(links: dict[str, int] | None = None) -> Iterator[Hosts]:
    """A database host running PostgreSQL and worker hosts with ``links[host]`` links each
    (default: ``w1`` with two, ``w2`` with one), removed at the end however it ends."""
    skip_unless_available()
    links = links or {"w1": 2, "w2": 1}
    with netns.network() as net:
        db = net.host("db")
        workers = {name: net.host(name) for name in links}
        made = {name: [net.link(db, workers[name]) for _ in range(n)] for name, n in links.items()}
        addresses: Sequence[str] = [link.a_addr for ls in made.values() for link in ls]
        with standby.standby_pair(standbys=0, listen=addresses, netns=db.ns) as server:
            yield Hosts(net, server, db, workers, made)


@contextlib.contextmanager
def cleaned_up(cluster: Hosts) -> Iterator[list[Proc]]:
    """The processes a test starts on ``cluster``: killed, and every link healed, however the
    test ends."""
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.kill()
        for links in cluster.links.values():
            for link in links:
                if not link.up:
                    cluster.net.heal(link)
