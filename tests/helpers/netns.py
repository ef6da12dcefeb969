"""Hosts of our own: Linux network namespaces joined by veth pairs, for the multi-host tests.

``Network()`` makes a database host and worker hosts (``host(name)``: a namespace with its
loopback up) and point-to-point links between them (``link(a, b)``: a veth pair, a /30 of
its own, each end's neighbour entry written in, so no ARP is needed). ``cut(link)`` takes
the link's end on its first host (the database's) down: from the other host the network
goes silent (carrier lost, its route kept, every packet dropped, no error: a dead switch
port or a pulled cable), while the database's end has no route to it; ``heal(link)`` brings
it back up. ``Host.popen``/``Host.run`` start a program inside a host (``ip netns exec``):
its TCP reaches only its own links and loopback. Unix sockets, files and signals cross
namespaces, so the test process can reach a server in a host through its socket directory.

Names and subnets never collide with another run on the machine (xdist workers, other
suites): each ``Network`` holds a slot, a ``flock`` on ``/tmp/pgenough-netns/slot-N.lock``
for its lifetime (released by the kernel even when the process is killed), and its names
(``pgeN-db``, veths ``peNl0a``/``peNl0b``...) and subnet (``10.213.N.0/24``) derive from the
slot. Namespaces a killed run left behind (their slot's lock free) are removed by the next
``Network`` made.
``close()`` (the context manager ``network()`` calls it, and a finalizer at interpreter exit
if nothing did) kills every process still in the hosts, deletes the namespaces (their veths
go with them) and frees the slot. Every wait is bounded.

Namespaces need root (and iproute2): elsewhere the tests are skipped with the reason, unless
``PGENOUGH_REQUIRE_NETNS=1`` says they must run.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from tests.helpers.requirements import skip_unless

REQUIRE: Final = "PGENOUGH_REQUIRE_NETNS"
STATE_DIR: Final = Path("/tmp/pgenough-netns")
SLOTS: Final = 250
"""Networks at once on one machine; slot N owns 10.213.N.0/24."""
SUBNET: Final = "10.213"
LINKS: Final = 64
"""Links per network: /30s of the slot's /24."""
TIMEOUT: Final = 10.0
"""Seconds any one ``ip`` command may take."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=TIMEOUT)
    if check and result.returncode:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


@functools.cache
def missing() -> str | None:
    """Why no namespaces can be made here, or None when they can (tried once, for real)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "not root: making network namespaces and veth pairs needs root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"pge-probe-{os.getpid()}"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode:
            return f"ip netns add fails here: {made.stderr.strip()}"
        pair = _ip("link", "add", "pgeprobe0", "netns", probe, "type", "veth", "peer", "name",
                   "pgeprobe1", "netns", probe, check=False)  # fmt: skip
        if pair.returncode:
            return f"veth pairs cannot be made here: {pair.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def skip_unless_available() -> None:
    skip_unless(missing(), require=REQUIRE, what="network namespaces")


@dataclass
class Host:
    """One namespace: a machine of its own."""

    name: str
    ns: str
    network: Network = field(repr=False)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this host."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside this host (``ip netns exec`` execs it: same pid)."""
        return subprocess.Popen(self.command(argv), **kwargs)

    def run(self, argv: Sequence[str], timeout: float = 60.0, **kwargs: Any) -> Any:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(argv), timeout=timeout, check=True, **kwargs)

    def pids(self) -> list[int]:
        """The processes running in this host now."""
        result = _ip("netns", "pids", self.ns, check=False)
        return [int(p) for p in result.stdout.split()]


@dataclass
class Link:
    """A veth pair between two hosts: ``a`` (the database's end) and ``b``."""

    a: Host
    b: Host
    a_dev: str
    b_dev: str
    a_addr: str
    b_addr: str
    up: bool = True

    def __str__(self) -> str:
        return f"{self.a.name}({self.a_addr})<->{self.b.name}({self.b_addr})"


class Network:
    """Hosts and links of our own (see the module docstring); ``close()`` removes them all."""

    def __init__(self) -> None:
        self._lock: IO[str] | None = None
        for slot in range(SLOTS):
            try:
                self._lock = _take_slot(slot)
            except BlockingIOError:
                continue
            self.slot = slot
            break
        if self._lock is None:
            raise RuntimeError(f"all {SLOTS} network slots of {STATE_DIR} are taken")
        self.prefix = f"pge{self.slot}-"
        self.hosts: dict[str, Host] = {}
        self.links: list[Link] = []
        self._made: list[str] = []
        """Our namespaces (the finalizer's list: it removes them, then frees the slot)."""
        self._finalizer = weakref.finalize(self, _remove, self.prefix, self._made, self._lock)
        self._reap_leftovers()

    def _reap_leftovers(self) -> None:
        """Namespaces a killed run left: its slot's lock is free (the kernel released it
        with the process), so nobody uses them. This slot's are ours to remove; another's,
        only while holding its lock for the time it takes."""
        for slot in sorted({_slot_of(ns) for ns in _namespaces()} - {None}):
            assert slot is not None
            if slot == self.slot:
                _remove(self.prefix, [], None)
                continue
            try:
                handle = _take_slot(slot)
            except BlockingIOError:
                continue  # in use
            _remove(f"pge{slot}-", [], handle)  # closes it

    def host(self, name: str) -> Host:
        """A new host (namespace) with its loopback up."""
        assert name not in self.hosts and len(self.prefix + name) <= 32, name
        ns = self.prefix + name
        self._made.append(ns)
        _ip("netns", "add", ns)
        host = Host(name, ns, self)
        self.hosts[name] = host
        _ip("-n", ns, "link", "set", "lo", "up")
        return host

    def link(self, a: Host, b: Host) -> Link:
        """A point-to-point link between ``a`` and ``b`` (a /30 of this network's /24)."""
        i = len(self.links)
        assert i < LINKS, "out of links"
        a_dev, b_dev = f"pe{self.slot}l{i}a", f"pe{self.slot}l{i}b"  # <= 15 characters
        a_addr, b_addr = f"{SUBNET}.{self.slot}.{4 * i + 1}", f"{SUBNET}.{self.slot}.{4 * i + 2}"
        _ip("link", "add", a_dev, "netns", a.ns, "type", "veth", "peer", "name", b_dev,
            "netns", b.ns)  # fmt: skip
        link = Link(a, b, a_dev, b_dev, a_addr, b_addr)
        self.links.append(link)
        for host, dev, addr in ((a, a_dev, a_addr), (b, b_dev, b_addr)):
            _ip("-n", host.ns, "addr", "add", f"{addr}/30", "dev", dev)
            _ip("-n", host.ns, "link", "set", dev, "up")
        self._neighbours(link)
        return link

    def _neighbours(self, link: Link) -> None:
        """Each end knows the other's MAC: no ARP, so a cut link drops packets silently
        rather than failing them when an ARP entry runs out."""
        a_mac, b_mac = _mac(link.a.ns, link.a_dev), _mac(link.b.ns, link.b_dev)
        _ip("-n", link.a.ns, "neigh", "replace", link.b_addr, "lladdr", b_mac, "dev",
            link.a_dev, "nud", "permanent")  # fmt: skip
        _ip("-n", link.b.ns, "neigh", "replace", link.a_addr, "lladdr", a_mac, "dev",
            link.b_dev, "nud", "permanent")  # fmt: skip

    def cut(self, link: Link) -> None:
        """Take ``link`` down at its first host's end (see the module docstring)."""
        _ip("-n", link.a.ns, "link", "set", link.a_dev, "down")
        link.up = False

    def heal(self, link: Link) -> None:
        _ip("-n", link.a.ns, "link", "set", link.a_dev, "up")
        self._neighbours(link)  # a device going down forgets its neighbours
        link.up = True

    def close(self) -> None:
        self._finalizer()


def _take_slot(slot: int) -> IO[str]:
    """Slot ``slot``'s lock file, locked until closed (``BlockingIOError`` when another
    process holds it: the kernel releases it when that process ends, however it ends)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    handle = (STATE_DIR / f"slot-{slot}.lock").open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        handle.close()
        raise
    return handle


def _slot_of(ns: str) -> int | None:
    """The slot of one of our namespaces (``pgeN-host``), None for any other."""
    head, dash, _ = ns.partition("-")
    if not dash or not head.startswith("pge") or not head[3:].isdigit():
        return None
    return int(head[3:])


def _namespaces() -> list[str]:
    result = _ip("-j", "netns", "list", check=False)
    try:
        return [entry["name"] for entry in json.loads(result.stdout or "[]")]
    except (ValueError, KeyError, TypeError):
        return []


def _mac(ns: str, dev: str) -> str:
    info = json.loads(_ip("-j", "-n", ns, "link", "show", "dev", dev).stdout)
    return str(info[0]["address"])


def _remove_namespace(ns: str) -> None:
    """Kill what runs in ``ns`` (ours: only our tests start processes there), then delete
    it; its veths are destroyed with it. Bounded: a process that will not die within
    ``TIMEOUT`` is left to the namespace's last reference."""
    deadline = time.monotonic() + TIMEOUT
    sig = signal.SIGTERM
    while time.monotonic() < deadline:
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(0.1)
        if time.monotonic() > deadline - TIMEOUT / 2:
            sig = signal.SIGKILL
    _ip("netns", "del", ns, check=False)


def _remove(prefix: str, namespaces: list[str], lock: IO[str] | None) -> None:
    """Remove ``namespaces`` (and any other of ``prefix``'s), then free the slot."""
    try:
        leftover = [n for n in _namespaces() if n.startswith(prefix) and n not in namespaces]
        for ns in namespaces + leftover:
            _remove_namespace(ns)
    finally:
        if lock is not None:
            lock.close()  # the flock goes with it


@contextlib.contextmanager
def network() -> Iterator[Network]:
    """A ``Network``, removed at the end however the block ends (skips the test where
    namespaces cannot be made)."""
    skip_unless_available()
    net = Network()
    try:
        yield net
    finally:
        net.close()
