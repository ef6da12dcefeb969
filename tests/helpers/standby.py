"""A real PostgreSQL primary and hot standbys (streaming replication) for the replica tests.

``StandbyPair`` runs ``initdb`` for a primary in a temporary directory (``wal_level=replica``,
trust authentication for local and replication connections, unix sockets in the directory,
free ports), starts it, clones it with ``pg_basebackup -R -X stream`` once per standby
(``standbys``, 1 by default) and starts each clone as a hot standby of the primary. It can
pause and resume a standby's replay, stop and start a standby, freeze one (``frozen``: every
process of it stopped with SIGSTOP, its sockets left open, as a hung VM or disk leaves them)
(each method takes the standby's index, the first by default), and always stops them all in
``close``.

``standbys=0`` is a lone server. ``listen`` gives it TCP addresses to listen on besides its
socket directory (every client of those addresses trusted: the multi-host tests' links), and
``netns`` a network namespace to run in (``tests/helpers/netns.py``: the servers' TCP is that
namespace's, their unix sockets reach every test process all the same); ``tcp_url(address)``
is the primary's URL over one of them.

For failover (``tests/*/test_failover.py``, ``bench/failover.py``): ``synchronous_commit``
turns the setting back on (a commit waits for its WAL to be written; the pair turns it off for
speed), ``synchronous=True`` also names the standbys in ``synchronous_standby_names`` (``*``:
a commit is acknowledged once a standby has flushed its WAL), in ``postgresql.conf`` before
the standbys are cloned, so that they inherit it as a real standby does. ``stop_primary``
stops the primary as a crash would (``pg_ctl stop -m immediate``), ``promote`` makes a standby
the primary, and ``failover_url`` is the multi-host connection string
(``target_session_attrs=read-write``) that follows whichever of them accepts writes.

A promoted standby keeps the configuration it was cloned with: if that names a synchronous
standby and none is connected to it, every commit on it waits forever (``wait_event``
``SyncRep`` in ``pg_stat_activity``). ``promote`` therefore empties
``synchronous_standby_names`` on the standby first (``ALTER SYSTEM``, then a reload), as an
operator (or a failover manager such as Patroni) must, until a new standby is attached;
``promote(keep_synchronous=True)`` leaves it for a test that shows the hang, and
``clear_synchronous`` ends it.

``pg_ctl`` refuses to run as root: as root the servers run as the ``postgres`` system user
(``runuser``), their directory handed to that user. Without the PostgreSQL 15 binaries the
tests that need a pair are skipped, unless ``PGENOUGH_REQUIRE_STANDBY=1`` says they must run.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

import psycopg

from pgenough_plans.api import replica
from tests.helpers.requirements import skip_unless
from tests.plan_service.api.helpers import free_port

BIN: Final = Path("/usr/lib/postgresql/15/bin")
REQUIRE: Final = "PGENOUGH_REQUIRE_STANDBY"
SERVER_USER: Final = "postgres"
"""The unprivileged system user the servers run as when the tests run as root."""
TIMEOUT: Final = 60.0


def missing() -> str | None:
    """Why no pair can be started here, or None when one can."""
    for tool in ("initdb", "pg_ctl", "pg_basebackup"):
        if not (BIN / tool).is_file():
            return f"{BIN / tool} not found (install postgresql-15)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            return f"running as root and there is no {SERVER_USER!r} user to run PostgreSQL as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


def skip_unless_available() -> None:
    skip_unless(missing(), require=REQUIRE, what="standby pair")


def wait_for(condition: object, what: str, timeout: float = TIMEOUT) -> None:
    """Poll ``condition`` (a callable returning a truthy value) until it holds or time is up."""
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(0.02)


class StandbyPair:
    def __init__(
        self,
        standbys: int = 1,
        *,
        listen: Sequence[str] = (),
        netns: str | None = None,
        synchronous_commit: bool = False,
        synchronous: bool = False,
    ) -> None:
        assert standbys >= 0
        assert standbys or not synchronous, "a synchronous standby needs a standby"
        self.listen = tuple(listen)
        self.netns = netns
        self.synchronous = synchronous
        """The standbys are synchronous (``synchronous_standby_names = '*'``)."""
        self.synchronous_commit = synchronous_commit or synchronous
        self.root = Path(tempfile.mkdtemp(prefix="pgenough-standby-"))
        self.as_user = os.geteuid() == 0
        if self.as_user:
            # The server user must reach its directories (mkdtemp makes them 0700, root's).
            self.root.chmod(0o755)
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.primary_dir = self.root / "primary"
        self.standby_dirs = [
            self.root / ("standby" if i == 0 else f"standby{i}") for i in range(standbys)
        ]
        self.primary_port = free_port()
        self.standby_ports = [free_port() for _ in range(standbys)]
        self.started: list[Path] = []

    def url(self, port: int, dbname: str = "postgres") -> str:
        return f"host={self.root} port={port} user=postgres dbname={dbname}"

    @property
    def primary_url(self) -> str:
        return self.url(self.primary_port)

    def tcp_url(self, address: str, dbname: str = "postgres") -> str:
        """The primary over TCP at ``address`` (one of ``listen``)."""
        assert address in self.listen, address
        return f"host={address} port={self.primary_port} user=postgres dbname={dbname}"

    @property
    def standby_dir(self) -> Path:
        return self.standby_dirs[0]

    @property
    def standby_port(self) -> int:
        return self.standby_ports[0]

    @property
    def standby_url(self) -> str:
        return self.url(self.standby_port)

    @property
    def standby_urls(self) -> list[str]:
        return [self.url(port) for port in self.standby_ports]

    def standby_label(self, i: int = 0) -> str:
        """How the API names standby ``i`` (``pgenough_plans.api.replica.label_of``)."""
        return replica.label_of(self.url(self.standby_ports[i]))

    def _run(self, *args: str) -> None:
        command = [str(BIN / args[0]), *args[1:]]
        if self.as_user:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        if self.netns is not None:
            command = ["ip", "netns", "exec", self.netns, *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
        if result.returncode:
            raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stderr.strip()}")

    def _options(self, port: int) -> str:
        listen = ",".join(self.listen) or "''"
        return f"-c port={port} -c unix_socket_directories={self.root} -c listen_addresses={listen}"

    def _start(self, data: Path, port: int) -> None:
        log = self.root / f"{data.name}.log"
        self._run("pg_ctl", "-D", str(data), "-l", str(log), "-o", self._options(port), "-w",
                  "-t", str(int(TIMEOUT)), "start")  # fmt: skip
        if data not in self.started:
            self.started.append(data)

    def _stop(self, data: Path) -> None:
        self._run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        self.started.remove(data)

    def start(self) -> None:
        self._run("initdb", "-D", str(self.primary_dir), "-U", "postgres", "-A", "trust",
                  "--no-sync", "-E", "UTF8")  # fmt: skip
        with (self.primary_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                f"wal_level = replica\nmax_wal_senders = {2 * len(self.standby_dirs) + 4}\n"
                "hot_standby = on\nfsync = off\n"
                f"synchronous_commit = {'on' if self.synchronous_commit else 'off'}\n"
                f"{self._synchronous_conf()}full_page_writes = off\n"
                # Replay may be paused for a while by a test: keep the WAL it still needs.
                "wal_keep_size = '256MB'\n"
            )
        with (self.primary_dir / "pg_hba.conf").open("a") as hba:
            hba.write("local replication all trust\n")
            if self.listen:
                hba.write("host all all 0.0.0.0/0 trust\n")
        self._start(self.primary_dir, self.primary_port)
        for i, data in enumerate(self.standby_dirs):
            self._run("pg_basebackup", "-D", str(data), "-R", "-X", "stream",
                      "-d", self.url(self.primary_port), "--no-sync")  # fmt: skip
            self.start_standby(i)

    def running(self, i: int) -> bool:
        return self.standby_dirs[i] in self.started

    def start_standby(self, i: int = 0) -> None:
        self._start(self.standby_dirs[i], self.standby_ports[i])
        wait_for(lambda: self._standby_answers(i), f"standby {i} accepts connections")

    def stop_standby(self, i: int = 0) -> None:
        self._stop(self.standby_dirs[i])

    def _processes(self, data: Path) -> list[int]:
        """The server's postmaster and every process it forked."""
        postmaster = int((data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
        ).stdout.split()
        return [postmaster, *map(int, children)]

    @contextmanager
    def frozen(self, i: int = 0) -> Iterator[None]:
        """Standby ``i`` stopped (SIGSTOP, the postmaster first so that it forks no more) for
        the block, its connections open; continued (SIGCONT) however the block ends."""
        pids = self._processes(self.standby_dirs[i])
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            yield
        finally:
            for pid in reversed(pids):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def _standby_url(self, i: int) -> str:
        return self.url(self.standby_ports[i])

    def _standby_answers(self, i: int) -> bool:
        try:
            with psycopg.connect(self._standby_url(i), connect_timeout=2) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                return bool(row and row[0])
        except psycopg.OperationalError:
            return False

    def _on_standby(self, statement: str, i: int) -> None:
        with psycopg.connect(self._standby_url(i), autocommit=True) as conn:
            conn.execute(statement)  # type: ignore[arg-type]

    def pause_replay(self, i: int = 0) -> None:
        self._on_standby("SELECT pg_wal_replay_pause()", i)

        def paused() -> bool:
            with psycopg.connect(self._standby_url(i)) as conn:
                row = conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()
                return bool(row and row[0] == "paused")

        wait_for(paused, f"standby {i}'s replay pauses")

    def resume_replay(self, i: int | None = None) -> None:
        """Resume standby ``i``'s replay; None: every running standby's."""
        for n in range(len(self.standby_dirs)) if i is None else [i]:
            if self.running(n):
                self._on_standby("SELECT pg_wal_replay_resume()", n)

    def wait_replayed(self, timeout: float = TIMEOUT, i: int | None = None) -> None:
        """Until standby ``i`` (None: every running one) has replayed everything the primary
        has inserted so far (the product's own measure, ``pgenough_plans.api.replica``)."""
        for n in range(len(self.standby_dirs)) if i is None else [i]:
            if self.running(n):
                self._wait_replayed(n, timeout)

    def _wait_replayed(self, i: int, timeout: float) -> None:
        with psycopg.connect(self.primary_url) as conn:
            row = conn.execute(replica.Q["primary_lsn"]).fetchone()
        assert row is not None
        target = row[0]

        def replayed() -> bool:
            with psycopg.connect(self._standby_url(i)) as conn:
                done = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()
                return bool(done and done[0])

        wait_for(replayed, f"standby {i} replays up to {target}", timeout)

    # -- failover ---------------------------------------------------------------------------

    def _synchronous_conf(self) -> str:
        return "synchronous_standby_names = '*'\n" if self.synchronous else ""

    def failover_url(self, dbname: str = "postgres") -> str:
        """The primary, then each standby, in one multi-host connection string: libpq tries
        them in turn and keeps the first that accepts writes (``target_session_attrs``)."""
        hosts = ",".join([str(self.root)] * (1 + len(self.standby_ports)))
        ports = ",".join(str(port) for port in [self.primary_port, *self.standby_ports])
        return (
            f"host={hosts} port={ports} user=postgres dbname={dbname}"
            " target_session_attrs=read-write"
        )

    @property
    def primary_running(self) -> bool:
        return self.primary_dir in self.started

    def wait_synchronous(self, timeout: float = TIMEOUT) -> None:
        """Until a standby streams to the primary as its synchronous standby."""

        def synchronous() -> bool:
            with psycopg.connect(self.primary_url) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
                ).fetchone()
                return bool(row and row[0])

        wait_for(synchronous, "a synchronous standby streams", timeout)

    def stop_primary(self) -> None:
        """Stop the primary as a crash would (``pg_ctl stop -m immediate``): its sessions cut
        at once, no shutdown checkpoint, and the WAL no standby has received yet lost to
        them."""
        self._run("pg_ctl", "-D", str(self.primary_dir), "-m", "immediate", "-w", "stop")
        self.started.remove(self.primary_dir)

    def kill_primary(self) -> None:
        """What ``stop_primary`` does, with no process started in between: SIGQUIT to the
        primary's postmaster (the signal ``pg_ctl stop -m immediate`` sends) now, then wait
        until it is gone; for a bench that must time the crash to the millisecond."""
        pid_file = self.primary_dir / "postmaster.pid"
        os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)
        # As pg_ctl does: the postmaster removes its pid file last (the process may linger
        # as a zombie until whoever adopted it reaps it).
        wait_for(lambda: not pid_file.exists(), "the primary's postmaster exits")
        self.started.remove(self.primary_dir)

    def promote(self, i: int = 0, *, keep_synchronous: bool = False) -> None:
        """Make standby ``i`` the primary, and return once it accepts writes. First empty its
        ``synchronous_standby_names`` (inherited from the old primary), unless
        ``keep_synchronous``: then every commit on it waits (see ``clear_synchronous``)."""
        if not keep_synchronous:
            self.clear_synchronous(i)
        self._run("pg_ctl", "-D", str(self.standby_dirs[i]), "-w", "-t", str(int(TIMEOUT)),
                  "promote")  # fmt: skip
        wait_for(lambda: self._accepts_writes(i), f"standby {i} accepts writes")

    def clear_synchronous(self, i: int = 0) -> None:
        """``synchronous_standby_names = ''`` on standby ``i`` (``ALTER SYSTEM``, which a hot
        standby allows, and a reload): its commits no longer wait for a standby, and those
        waiting already (a promoted node still naming one) complete."""
        url = self._standby_url(i)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = ''")
            conn.execute("SELECT pg_reload_conf()")

        def cleared() -> bool:  # the reload reaches new sessions a moment later
            with psycopg.connect(url) as conn:
                row = conn.execute("SHOW synchronous_standby_names").fetchone()
                return bool(row is not None and row[0] == "")

        wait_for(cleared, f"standby {i}'s synchronous_standby_names emptied")

    def _accepts_writes(self, i: int) -> bool:
        try:
            with psycopg.connect(self._standby_url(i), connect_timeout=2) as conn:
                row = conn.execute("SELECT NOT pg_is_in_recovery()").fetchone()
                return bool(row and row[0])
        except psycopg.OperationalError:
            return False

    def close(self) -> None:
        errors = []
        for data in reversed(list(self.started)):  # the standbys first
            try:
                self._stop(data)
            except Exception as exc:  # stop the other one all the same
                errors.append(exc)
        shutil.rmtree(self.root, ignore_errors=True)
        if errors:
            raise errors[0]


@contextmanager
def standby_pair(
    standbys: int = 1,
    *,
    listen: Sequence[str] = (),
    netns: str | None = None,
    synchronous_commit: bool = False,
    synchronous: bool = False,
) -> Iterator[StandbyPair]:
    """A running primary and ``standbys`` standbys, all stopped at the end however it ends
    (``synchronous_commit``, ``synchronous``: see ``StandbyPair``)."""
    skip_unless_available()
    pair = StandbyPair(
        standbys,
        listen=listen,
        netns=netns,
        synchronous_commit=synchronous_commit,
        synchronous=synchronous,
    )
    try:
        pair.start()
        yield pair
    finally:
        pair.close()
