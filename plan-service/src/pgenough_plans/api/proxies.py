"""Whose word the API takes for who the client is: the reverse proxies an operator names.

The client address (what the dashboard's login throttle keys on, what the access log shows)
is the socket's peer, unless that peer is one of ``api_trusted_proxies``: then, and only
then, uvicorn reads ``X-Forwarded-For`` (the nearest address in it that is not itself a
trusted proxy) and ``X-Forwarded-Proto`` (which makes the dashboard's cookie ``Secure``).
With no trusted proxies (the default) both headers are ignored, whoever sends them, so a
client cannot pick the address it is throttled as; uvicorn's own default, trusting
``127.0.0.1`` or its ``FORWARDED_ALLOW_IPS`` variable, is never used.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Final

from pgenough_plans.api.errors import ApiConfigError

SETTING: Final = "PGENOUGH_API_TRUSTED_PROXIES"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class TrustedProxies:
    networks: tuple[Network, ...] = ()
    """Peers whose ``X-Forwarded-*`` headers are believed; empty: nobody's."""

    @classmethod
    def parse(cls, spec: str) -> TrustedProxies:
        """From ``api_trusted_proxies``: IP addresses and CIDR networks, comma-separated;
        ``ApiConfigError`` for an entry that is neither (a host name, a network with host
        bits set)."""
        networks: list[Network] = []
        for entry in spec.split(","):
            entry = entry.strip()
            if not entry:
                continue
            try:
                network = ipaddress.ip_network(entry)
            except ValueError as exc:
                raise ApiConfigError(
                    f"api_trusted_proxies: {entry!r} is not an IP address or a CIDR network"
                    f" ({exc}); name each proxy by address, comma-separated"
                ) from None
            if network not in networks:
                networks.append(network)
        return cls(tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.networks)

    def uvicorn_options(self) -> dict[str, Any]:
        """``uvicorn.Config``'s proxy options: its proxy headers middleware only when there is
        someone to trust, and then with exactly these networks."""
        if not self.networks:
            return {"proxy_headers": False, "forwarded_allow_ips": []}
        return {
            "proxy_headers": True,
            "forwarded_allow_ips": [str(network) for network in self.networks],
        }
