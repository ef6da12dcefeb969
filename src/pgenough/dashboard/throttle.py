"""How often a client may guess the dashboard's token: exponential backoff per client address.

A client's first ``FREE_FAILURES`` wrong tokens in a row (at the login form or as a Bearer
header) cost nothing, for the operator who mistypes; each further one doubles the wait before
that address may try again, from 1 s up to ``max_backoff`` (60 s by default). Meanwhile its
attempts are answered 429 with ``Retry-After`` and not even compared, so a guess waiting out
its backoff learns nothing. A right token clears the address; one that stops failing for
``FORGET_AFTER`` is forgotten.

Why per address and capped: a throttle shared by all clients would let an attacker lock the
real operator out for as long as the attack lasts. Keyed by address, an attacker slows down
only itself (an IPv6 client counts as its /64, which one host usually holds whole), and a
client that stops guessing is free again within ``max_backoff``. Under a sustained attack one
address gets one guess per ``max_backoff``, 1,440 a day at the default: a long random token
stays out of reach. The state is per process (each replica throttles on its own) and
bounded (``MAX_CLIENTS`` addresses; the longest-idle one is forgotten first). The address is
the connection's peer, as the server hands it over: ``pgenough dashboard`` believes no
``X-Forwarded-For``; a host application's server believes the proxies its operator names
(the plan service's ``api_trusted_proxies``); so a client can neither pick a fresh address
per guess nor name someone else's. Behind a proxy not named, everyone behind it shares one
backoff, which an attacker can keep at ``max_backoff`` but never longer.

Pure: the clock is an argument.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

FREE_FAILURES: Final = 3
FIRST_BACKOFF: Final = 1.0
FORGET_AFTER: Final = 15 * 60.0
MAX_CLIENTS: Final = 10_000
IPV6_PREFIX: Final = 64
_MAX_DOUBLINGS: Final = 30  # 2**30 s is past any cap; keeps the power small


def client_key(host: str | None) -> str:
    """Whose attempts count together: an IPv4 address, an IPv6 /64, or the host as given."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/{IPV6_PREFIX}", strict=False))
    return str(address)


def backoff(failures: int, max_backoff: float) -> float:
    """Seconds a client with ``failures`` wrong tokens in a row waits before its next try."""
    if failures < FREE_FAILURES:
        return 0.0
    doublings = min(failures - FREE_FAILURES, _MAX_DOUBLINGS)
    return min(FIRST_BACKOFF * float(2**doublings), max_backoff)


@dataclass
class _Record:
    failures: int
    last: float


class LoginThrottle:
    def __init__(
        self,
        max_backoff: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.max_backoff = max_backoff
        self._clock = clock
        self._max_clients = max_clients
        # Ordered by last failure, oldest first: what is forgotten first.
        self._clients: OrderedDict[str, _Record] = OrderedDict()

    def wait(self, client: str) -> float:
        """Seconds until ``client`` may try a token; 0: now."""
        record = self._clients.get(client)
        if record is None:
            return 0.0
        return max(0.0, record.last + backoff(record.failures, self.max_backoff) - self._clock())

    def retry_after(self, client: str) -> int | None:
        """The ``Retry-After`` for a client that must wait; None when it may try now."""
        wait = self.wait(client)
        return math.ceil(wait) if wait > 0 else None

    def failed(self, client: str) -> None:
        now = self._clock()
        record = self._clients.pop(client, None)
        if record is None or now - record.last > FORGET_AFTER:
            record = _Record(0, now)
        record.failures += 1
        record.last = now
        self._clients[client] = record
        self._forget(now)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)

    def _forget(self, now: float) -> None:
        while self._clients:
            oldest = next(iter(self._clients.values()))
            if now - oldest.last <= FORGET_AFTER and len(self._clients) <= self._max_clients:
                return
            self._clients.popitem(last=False)

    def __len__(self) -> int:
        return len(self._clients)
