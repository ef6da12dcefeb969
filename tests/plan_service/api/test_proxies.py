"""Whose ``X-Forwarded-For`` the API believes (``api/proxies.py``): nobody's unless the
operator names the proxies, so a client cannot choose the address the dashboard's login
throttle counts its guesses against. Against the real ``pgenough-plans api``, as a user runs it."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from pgenough.dashboard.throttle import FREE_FAILURES
from pgenough_plans.api import ApiConfigError
from pgenough_plans.api.proxies import TrustedProxies
from tests.plan_service.api.helpers import api_process, api_start_error

TOKEN = "s3cret-token"
GUESSES = 40
OVERVIEW = "/ui/api/overview"  # a Bearer token's check: no form, no CSRF
WRONG = {"authorization": "Bearer guess"}
RIGHT = {"authorization": f"Bearer {TOKEN}"}


def test_addresses_and_networks_are_parsed() -> None:
    proxies = TrustedProxies.parse(" 10.0.0.5, 192.168.0.0/16,,::1 , 10.0.0.5")
    assert proxies.networks == (
        ipaddress.ip_network("10.0.0.5/32"),
        ipaddress.ip_network("192.168.0.0/16"),
        ipaddress.ip_network("::1/128"),
    )
    assert proxies.uvicorn_options() == {
        "proxy_headers": True,
        "forwarded_allow_ips": ["10.0.0.5/32", "192.168.0.0/16", "::1/128"],
    }


def test_nobody_is_trusted_by_default() -> None:
    assert not TrustedProxies.parse("")
    assert TrustedProxies.parse(" , ").uvicorn_options()["proxy_headers"] is False


@pytest.mark.parametrize("entry", ["proxy.example", "*", "10.0.0.1/33", "10.0.0.1/8", "1.2.3"])
def test_anything_but_an_address_or_a_network_is_refused(entry: str) -> None:
    with pytest.raises(ApiConfigError, match=r"api_trusted_proxies: .* is not an IP address"):
        TrustedProxies.parse(f"127.0.0.1,{entry}")


def test_a_bad_proxy_setting_is_one_line_and_exit_2(worker_env: dict[str, str]) -> None:
    env = dict(worker_env, PGENOUGH_API_TRUSTED_PROXIES="10.0.0.1, proxy.example")
    assert api_start_error(env).startswith(
        "error: invalid configuration: api_trusted_proxies: 'proxy.example' is not an IP address"
    )


@contextmanager
def dashboard(worker_env: dict[str, str], trusted: str | None = None) -> Iterator[str]:
    """``pgenough-plans api`` with the dashboard behind a token; its base URL."""
    env = dict(worker_env, PGENOUGH_UI_TOKEN=TOKEN)
    env.pop("FORWARDED_ALLOW_IPS", None)  # uvicorn's own variable: never what decides
    if trusted is not None:
        env["PGENOUGH_API_TRUSTED_PROXIES"] = trusted
    with api_process(env) as base:
        yield base


def client(base: str, address: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections come from ``address`` (any of 127.0.0.0/8 is loopback)."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=base, transport=transport, timeout=20)


def forwarded_for(address: str, headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "x-forwarded-for": address}


@pytest.mark.db
def test_a_fresh_forwarded_address_per_guess_does_not_escape_the_throttle(
    db: object, worker_env: dict[str, str]
) -> None:
    with dashboard(worker_env) as base, client(base) as guesser:
        statuses = [
            guesser.get(OVERVIEW, headers=forwarded_for(f"203.0.113.{n}", WRONG)).status_code
            for n in range(GUESSES)
        ]
    assert statuses[:FREE_FAILURES] == [401] * FREE_FAILURES, statuses
    # Guessing, not forwarding, is what the socket's address is throttled for.
    assert statuses.count(429) >= GUESSES - FREE_FAILURES - 1, statuses


@pytest.mark.db
def test_a_spoofed_forwarded_address_cannot_lock_its_owner_out(
    db: object, worker_env: dict[str, str]
) -> None:
    with (
        dashboard(worker_env) as base,
        client(base) as attacker,
        client(base, "127.0.0.2") as operator,
    ):
        for _ in range(FREE_FAILURES + 2):
            attacker.get(OVERVIEW, headers=forwarded_for("127.0.0.2", WRONG))
        assert attacker.get(OVERVIEW, headers=WRONG).status_code == 429  # its own address
        assert operator.get(OVERVIEW, headers=RIGHT).status_code == 200


@pytest.mark.db
def test_a_named_proxy_is_believed_and_its_clients_are_throttled_apart(
    db: object, worker_env: dict[str, str]
) -> None:
    """The proxy at 127.0.0.2 (inside a named network) speaks for its clients; a peer not
    named (127.0.0.1) is still its own address whatever it forwards."""
    with (
        dashboard(worker_env, trusted="192.0.2.1, 127.0.0.2/31") as base,
        client(base, "127.0.0.2") as proxy,
        client(base) as direct,
    ):
        for _ in range(FREE_FAILURES + 1):
            proxy.get(OVERVIEW, headers=forwarded_for("198.51.100.7", WRONG))
        assert proxy.get(OVERVIEW, headers=forwarded_for("198.51.100.7", RIGHT)).status_code == 429
        assert proxy.get(OVERVIEW, headers=forwarded_for("198.51.100.8", RIGHT)).status_code == 200
        assert proxy.get(OVERVIEW, headers=RIGHT).status_code == 200  # the proxy's own address

        # The untrusted peer: its forwarded addresses are not believed, its own is throttled.
        for n in range(FREE_FAILURES + 1):
            direct.get(OVERVIEW, headers=forwarded_for(f"203.0.113.{n}", WRONG))
        assert direct.get(OVERVIEW, headers=forwarded_for("203.0.113.99", RIGHT)).status_code == 429
