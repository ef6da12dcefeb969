"""What the failover tests and ``bench/failover.py`` share: a producer that enqueues at a steady
rate through the multi-host URL and records what it saw acknowledged, the workers' record of
their completions (``tests/helpers/failoverapp.py``), and the figures of one failover.

Acknowledged, lost and in doubt:

* an enqueue is *acknowledged* when its COMMIT returned; *in doubt* when the connection broke
  during the COMMIT (it may or may not have committed: neither acknowledged nor lost); *failed*
  when anything before the COMMIT did (it did not commit);
* a completion likewise (the worker's task writes ``done`` or ``doubt``);
* after the failover, on the new primary: an acknowledged enqueue is *lost* when its number
  is neither done (``failover_effects``) nor waiting (``pgenough.jobs``); an acknowledged
  completion is *lost* when its effect is not there, or is another run's (its job ran again).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg

from pgenough.core.db import with_network_timeout
from tests.helpers import failoverapp

OK: Final = "ok"
FAILED: Final = "failed"
DOUBT: Final = "doubt"


@dataclass(frozen=True)
class Attempt:
    n: int
    at: float
    """``time.time()`` when the attempt ended."""
    outcome: str
    """``OK``, ``FAILED`` or ``DOUBT``."""
    error: str = ""
    took: float = 0.0
    """Seconds from the enqueue's start to its COMMIT's answer."""


class Producer(threading.Thread):
    """Enqueues ``failover.effect(n)``, n = 1, 2, ..., ``rate`` times a second on one
    connection to ``url``, reconnecting after any failure (no catching up after an outage:
    the rate stays steady). ``attempts`` records each one's outcome."""

    def __init__(
        self, url: str, rate: float, *, hold: float = 0.0, network_timeout: float = 5.0
    ) -> None:
        super().__init__(name="failover-producer", daemon=True)
        self.hold = hold
        """Seconds each job holds its transaction open (``failoverapp.effect``)."""
        self.url = with_network_timeout(url, network_timeout)
        self.interval = 1.0 / rate
        self.attempts: list[Attempt] = []
        self.stopping = threading.Event()
        self._ok = threading.Condition()

    def run(self) -> None:
        task = failoverapp.effect
        conn: psycopg.Connection[Any] | None = None
        n = 0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            if next_at > now:
                self.stopping.wait(next_at - now)  # the pace, not a synchronisation
            next_at = max(next_at + self.interval, time.monotonic() - self.interval)
            n += 1
            began = time.monotonic()
            try:
                if conn is None:
                    conn = psycopg.connect(self.url)
                task.enqueue(conn, n=n, hold=self.hold)
            except psycopg.Error as exc:
                self._record(Attempt(n, time.time(), FAILED, str(exc).splitlines()[0]))
                _close(conn)
                conn = None
                continue
            try:
                conn.commit()
            except psycopg.Error as exc:
                self._record(Attempt(n, time.time(), DOUBT, str(exc).splitlines()[0]))
                _close(conn)
                conn = None
                continue
            self._record(Attempt(n, time.time(), OK, took=time.monotonic() - began))
        _close(conn)

    def _record(self, attempt: Attempt) -> None:
        with self._ok:
            self.attempts.append(attempt)
            self._ok.notify_all()

    def wait_ok_after(self, since: float, count: int = 1, timeout: float = 30.0) -> float:
        """Until ``count`` enqueues were acknowledged after ``since`` (``time.time()``); the
        first one's time."""
        deadline = time.monotonic() + timeout
        with self._ok:
            while True:
                oks = [a.at for a in self.attempts if a.outcome == OK and a.at > since]
                if len(oks) >= count:
                    return oks[0]
                left = deadline - time.monotonic()
                if left <= 0 or not self.is_alive():
                    raise TimeoutError(f"{count} enqueue(s) acknowledged: not within {timeout:g} s")
                self._ok.wait(min(left, 0.5))

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert not self.is_alive(), "the producer did not stop"

    def of(self, outcome: str) -> set[int]:
        return {a.n for a in self.attempts if a.outcome == outcome}


def _close(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error):
            conn.close()


@dataclass(frozen=True)
class Completion:
    n: int
    token: str
    at: float


def read_acks(paths: Iterable[Path]) -> tuple[list[Completion], list[Completion]]:
    """(acknowledged completions, completions in doubt) the workers wrote."""
    done: list[Completion] = []
    doubt: list[Completion] = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue  # a line the worker was writing when it stopped
            outcome, n, token, at = parts
            (done if outcome == "done" else doubt).append(Completion(int(n), token, float(at)))
    return done, doubt


@dataclass
class Figures:
    """One failover, measured; times are ``time.time()``."""

    mode: str
    """``async`` or ``sync``."""
    stopped_at: float
    promoted_at: float
    acknowledged: int = 0
    enqueues_lost: list[int] = field(default_factory=list)
    enqueues_in_doubt: int = 0
    completions: int = 0
    completions_lost: list[int] = field(default_factory=list)
    completions_in_doubt: int = 0
    duplicates: int = 0
    """Effects committed more than once on the new primary (must be 0)."""
    undone: list[int] = field(default_factory=list)
    """Numbers still waiting on the new primary once the workers drained (must be none)."""
    lost_after_promotion: list[int] = field(default_factory=list)
    """Enqueues acknowledged by the new primary that are neither done nor waiting: never a
    replication loss (must be none)."""
    loss_window_ms: float = 0.0
    """From the newest acknowledged enqueue the new primary has to the newest acknowledged
    before the stop: the commits of that span were acknowledged but not replicated."""
    unavailable_ms: float = 0.0
    """Enqueues: from the first failed attempt to the first acknowledged one after it."""
    resumed_ms: float = 0.0
    """Enqueues: from the promotion to the first acknowledged after it."""
    workers_resumed_ms: float = 0.0
    """Completions: from the promotion to the first acknowledged after it."""

    def line(self) -> str:
        return (
            f"failover ({self.mode}): {self.acknowledged} enqueues acknowledged,"
            f" {len(self.enqueues_lost)} lost, {self.enqueues_in_doubt} in doubt;"
            f" {self.completions} completions acknowledged, {len(self.completions_lost)} lost"
            f" (ran again), {self.completions_in_doubt} in doubt; loss window"
            f" {self.loss_window_ms:.0f} ms; unavailable {self.unavailable_ms:.0f} ms"
            f" (stop to promoted {1000 * (self.promoted_at - self.stopped_at):.0f} ms);"
            f" enqueues {self.resumed_ms:.0f} ms and completions {self.workers_resumed_ms:.0f}"
            f" ms after the promotion; duplicates {self.duplicates}"
        )


def measure(
    mode: str,
    producer: Producer,
    ack_files: Iterable[Path],
    new_primary_url: str,
    stopped_at: float,
    promoted_at: float,
) -> Figures:
    """The figures of a failover, once the producer has stopped and the workers drained."""
    with psycopg.connect(new_primary_url) as conn:
        effects: dict[int, list[str]] = {}
        for n, token in conn.execute("SELECT n, token FROM failover_effects"):
            effects.setdefault(int(n), []).append(str(token))
        waiting = {
            int(n)
            for (n,) in conn.execute(
                "SELECT (payload ->> 'n')::bigint FROM pgenough.jobs WHERE queue = %s",
                (failoverapp.QUEUE,),
            )
            if n is not None
        }
    figures = Figures(mode, stopped_at, promoted_at)
    acked = producer.of(OK)
    figures.acknowledged = len(acked)
    figures.enqueues_lost = sorted(acked - set(effects) - waiting)
    acked_at = {a.n: a.at for a in producer.attempts if a.outcome == OK}
    figures.lost_after_promotion = [n for n in figures.enqueues_lost if acked_at[n] > promoted_at]
    figures.enqueues_in_doubt = len(producer.of(DOUBT))
    done, doubt = read_acks(ack_files)
    figures.completions = len(done)
    figures.completions_in_doubt = len(doubt)
    figures.completions_lost = sorted(c.n for c in done if c.token not in effects.get(c.n, ()))
    figures.duplicates = sum(len(tokens) - 1 for tokens in effects.values())
    figures.undone = sorted(waiting)
    ok_times = {a.n: a.at for a in producer.attempts if a.outcome == OK}
    before = [n for n, at in ok_times.items() if at <= stopped_at]
    if before:
        newest_kept = max((ok_times[n] for n in before if n in effects or n in waiting), default=0)
        newest = max(ok_times[n] for n in before)
        figures.loss_window_ms = 1000 * max(0.0, newest - newest_kept) if newest_kept else 0.0
    first_failed = min(
        (a.at for a in producer.attempts if a.outcome != OK and a.at >= stopped_at),
        default=None,
    )
    if first_failed is not None:
        after = [a.at for a in producer.attempts if a.outcome == OK and a.at > first_failed]
        if after:
            figures.unavailable_ms = 1000 * (min(after) - first_failed)
    oks_after = [at for at in ok_times.values() if at > promoted_at]
    if oks_after:
        figures.resumed_ms = 1000 * (min(oks_after) - promoted_at)
    completed_after = [c.at for c in done if c.at > promoted_at]
    if completed_after:
        figures.workers_resumed_ms = 1000 * (min(completed_after) - promoted_at)
    return figures


def summary(values: list[float]) -> str:
    """``median / max`` of ``values``."""
    if not values:
        return "-"
    return f"{statistics.median(values):.0f} / {max(values):.0f}"


def project_env(database_url: str, **settings: str) -> dict[str, str]:
    """The environment of a ``pgenough`` process of the failover runs: the multi-host URL,
    the project on the path, and ``settings`` (``PGENOUGH_*``)."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    env.update(settings)
    return env
