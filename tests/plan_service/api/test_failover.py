"""``pgenough-plans api`` (a real process) on a multi-host connection string through a failover
(issue 25): ``/search`` hammered while the primary is stopped as a crash would
(``pg_ctl stop -m immediate``) and its standby promoted.

No 500 at any time; the failures are 503 in the documented envelope (``UNAVAILABLE``, or
``TOO_BUSY`` when the slots are held meanwhile), only between the stop and ``WINDOW`` after
the promotion; ``/health/ready`` says 503 while there is no primary and 200 again after;
afterwards the searches answer from the new primary, and its cache listens there (a page is
cached again, and a change committed on the new primary with its ``plans_changed`` shows at
once). The servers are the test's own: not a ``db`` test.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgenough.core import migrate, publish
from pgenough.core.db import redact, with_database, with_network_timeout, with_statement_timeout
from pgenough_plans.api import MIGRATIONS
from pgenough_plans.api.replica import label_of
from tests.helpers.failover import project_env
from tests.helpers.procs import Proc, wait_for
from tests.helpers.standby import standby_pair
from tests.plan_service.api.helpers import INSERT, Plan, free_port, insert_params

WINDOW = 10.0
"""Seconds after the promotion past which every search must answer 200."""
WAIT = 30.0
PAGE = "/search?starts_at=2021-06-01&ends_at=2021-07-01&limit=50"
"""A first page: cached while the cache's listener is connected."""
PLANS = [
    Plan(f"p{i}", f"2021-06-{1 + i % 28:02d}T10:00:00Z", f"2021-06-{1 + i % 28:02d}T12:00:00Z")
    for i in range(40)
]
LATE = Plan("late", "2021-06-30T10:00:00Z", "2021-06-30T11:00:00Z")
"""Written on the new primary after the failover."""


@dataclass(frozen=True)
class Answer:
    at: float
    path: str
    status: int
    body: Any


def add(url: str, *plans: Plan, notify: bool = False) -> None:
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur:
            cur.executemany(INSERT, insert_params(plans))
        if notify:
            publish(conn, "plans_changed", '{"test": true}')
        conn.commit()


class Hammer:
    """Threads asking ``paths`` in turn as fast as they are answered, and one asking
    ``/health/ready`` every 50 ms; every answer kept."""

    def __init__(self, base: str, paths: list[str], threads: int = 3) -> None:
        self.base = base
        self.paths = paths
        self.answers: list[Answer] = []
        self.ready: list[Answer] = []
        self.stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._search, args=(i,), daemon=True) for i in range(threads)
        ]
        self._threads.append(threading.Thread(target=self._ready, daemon=True))

    def _ask(self, client: httpx.Client, path: str) -> Answer:
        response = client.get(self.base + path)
        try:
            body = response.json()
        except ValueError:
            body = response.text
        return Answer(time.time(), path, response.status_code, body)

    def _search(self, offset: int) -> None:
        with httpx.Client(timeout=10) as client:
            i = offset
            while not self.stopping.is_set():
                self.answers.append(self._ask(client, self.paths[i % len(self.paths)]))
                i += 1

    def _ready(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.stopping.is_set():
                self.ready.append(self._ask(client, "/health/ready"))
                self.stopping.wait(0.05)

    @contextmanager
    def running(self) -> Iterator[Hammer]:
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self.stopping.set()
            for thread in self._threads:
                thread.join(30)

    def failed_since(self, since: float) -> list[Answer]:
        return [a for a in list(self.answers) if a.at > since and a.status != 200]

    def answered_since(self, since: float, status: int, ready: bool = False) -> int:
        answers = self.ready if ready else self.answers
        return sum(1 for a in list(answers) if a.at > since and a.status == status)


@contextmanager
def api(env: dict[str, str]) -> Iterator[tuple[str, Proc]]:
    """``pgenough-plans api`` on a free port, its log readable
    (``tests.plan_service.api.helpers.api_process``
    keeps it to itself): (its base URL once ready, the process). Stopped with SIGTERM."""
    port = free_port()
    proc = Proc.plans(env, "api", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    try:
        proc.expect(lambda line: "Uvicorn running on" in line or "Application startup" in line, 60)

        def ready() -> bool:
            try:
                return httpx.get(base + "/health/ready", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, WAIT, "pgenough-plans api ready")
        yield base, proc
    finally:
        proc.popen.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            proc.kill()


def log_of(proc: Proc) -> str:
    with contextlib.suppress(TimeoutError, EOFError):
        while True:
            proc.expect(lambda _: False, timeout=0.2)
    return "\n".join(proc.lines)


def ids(response: httpx.Response) -> list[str]:
    return [event["id"] for event in response.json()["data"]["events"]]


def metric(base: str, name: str) -> float:
    text = httpx.get(base + "/metrics", timeout=10).text
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


MULTI_HOST = [
    "host=/run/a,/run/b port=5432,5433 user=u password=s3cret dbname=d"
    " target_session_attrs=read-write",
    "postgresql://u:s3cret@h1:5432,h2:5433/d?target_session_attrs=read-write",
    "postgresql://u:s3cret@[::1]:5432,h2/d?target_session_attrs=read-write",
]


@pytest.mark.parametrize("url", MULTI_HOST)
def test_a_multi_host_url_survives_every_rewrite(url: str) -> None:
    """Every place the product rewrites or parses a database URL keeps each host, its port
    and ``target_session_attrs`` (what a failover needs), and shows no password."""
    given = conninfo_to_dict(url)
    rewritten = [
        with_network_timeout(url),
        with_network_timeout(url, server_side=True),
        with_database(url, str(given["dbname"])),
        with_statement_timeout(url, 2.0),
        redact(url),
    ]
    for text in rewritten:
        params = conninfo_to_dict(text)
        for key in ("host", "port", "target_session_attrs", "dbname"):
            assert params[key] == given[key], (key, text)
    assert "s3cret" not in redact(url)
    label = label_of(url)
    assert "s3cret" not in label
    hosts = str(given["host"]).split(",")
    assert len(label.split(",")) == len(hosts)
    # Each host with its port: the default where the URL leaves one out, IPv6 in brackets.
    assert all(re.fullmatch(r"(\[[0-9a-f:]+\]|[^:\[\]]+):\d+", part) for part in label.split(","))


@pytest.mark.slow
def test_search_through_a_failover() -> None:
    with standby_pair(synchronous_commit=True) as pair:
        url = pair.failover_url()
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn, MIGRATIONS)
        add(url, *PLANS)
        env = project_env(
            url,
            PGENOUGH_API_CACHE_TTL="60",
            PGENOUGH_NETWORK_TIMEOUT="5",
            PGENOUGH_LOG_LEVEL="INFO",
        )
        # First pages (cached while the listener is up) and offsets (never cached).
        paths = [PAGE, *(f"{PAGE}&offset={i}" for i in range(1, 20))]
        with api(env) as (base, proc), Hammer(base, paths).running() as hammer:
            wait_for(lambda: hammer.answered_since(0, 200) >= 50, WAIT, "searches answered")
            stopped_at = time.time()
            pair.stop_primary()
            # No primary: readiness says so, and the searches fail (as 503) meanwhile.
            wait_for(
                lambda: hammer.answered_since(stopped_at, 503, ready=True) > 0, WAIT, "not ready"
            )
            wait_for(lambda: bool(hammer.failed_since(stopped_at)), WAIT, "a search refused")
            pair.promote()
            promoted_at = time.time()
            wait_for(
                lambda: hammer.answered_since(promoted_at, 200, ready=True) > 0,
                WINDOW,
                "ready again",
            )
            settled = promoted_at + WINDOW
            wait_for(lambda: time.time() > settled + 1, WINDOW + 5, "the window to pass")
            wait_for(lambda: hammer.answered_since(settled, 200) >= 50, WAIT, "searches after")

            # The new primary answers, and the cache listens there: a page is cached again,
            # and a change committed there, with its message, shows at once.
            hits = metric(base, "pgenough_api_cache_hits_total")
            httpx.get(base + PAGE, timeout=10)
            wait_for(
                lambda: metric(base, "pgenough_api_cache_hits_total") > hits,
                WAIT,
                "a cache hit on the new primary",
            )
            add(url, LATE, notify=True)
            written_at = time.time()
            wait_for(
                lambda: (
                    LATE.id in [e["id"] for e in httpx.get(base + PAGE).json()["data"]["events"]]
                ),
                WAIT,
                "the page with the plan written on the new primary",
            )
            shown_after = time.time() - written_at
            listening = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            with psycopg.connect(pair.standby_url) as conn:
                row = conn.execute(listening, ("pgenough-subscriber",)).fetchone()
            assert row is not None and row[0] >= 1  # the cache's LISTEN, on the new primary

        log = log_of(proc)
        assert proc.popen.returncode == 0, log[-3000:]
        assert "Traceback" not in log and "INTERNAL_ERROR" not in log, log[-3000:]
        errors = [a for a in hammer.answers if a.status != 200]
        not_ready = [a.at for a in hammer.ready if a.status != 200]
        print(
            f"api failover: stop to promoted {promoted_at - stopped_at:.2f} s;"
            f" {len(hammer.answers)} searches, {len(errors)} refused (503), the first"
            f" {min(errors, key=lambda a: a.at).at - stopped_at:.2f} s after the stop, the last"
            f" {max(errors, key=lambda a: a.at).at - promoted_at:+.2f} s from the promotion;"
            f" /health/ready 503 from {min(not_ready) - stopped_at:.2f} s after the stop to"
            f" {max(not_ready) - promoted_at:+.2f} s from the promotion; the late plan shown"
            f" {shown_after:.2f} s after its commit"
        )
        assert all(a.status in (200, 503) for a in hammer.answers + hammer.ready), {
            a.status for a in hammer.answers + hammer.ready
        }
        for a in errors + [a for a in hammer.ready if a.status != 200]:
            assert stopped_at <= a.at <= promoted_at + WINDOW, a
            assert isinstance(a.body, dict) and a.body["data"] is None, a
            assert a.body["error"]["code"] in ("UNAVAILABLE", "TOO_BUSY"), a
            assert isinstance(a.body["error"]["message"], str) and a.body["error"]["message"], a
