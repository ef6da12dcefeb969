"""The login throttle's arithmetic on a fake clock (``pgenough/dashboard/throttle.py``); its
use over HTTP is in test_sessions.py."""

from __future__ import annotations

from pgenough.dashboard.throttle import (
    FORGET_AFTER,
    FREE_FAILURES,
    LoginThrottle,
    backoff,
    client_key,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_after_the_free_failures_up_to_the_cap() -> None:
    waits = [backoff(n, 60.0) for n in range(FREE_FAILURES + 8)]
    assert waits[:FREE_FAILURES] == [0.0] * FREE_FAILURES
    assert waits[FREE_FAILURES:] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert backoff(10**9, 60.0) == 60.0  # no giant power


def test_a_client_waits_out_its_backoff_then_is_forgotten() -> None:
    clock = Clock()
    throttle = LoginThrottle(60.0, clock=clock)
    for _ in range(FREE_FAILURES):
        assert throttle.retry_after("a") is None
        throttle.failed("a")
    assert throttle.retry_after("a") == 1
    assert throttle.retry_after("b") is None  # per client
    clock.now += 1.0
    assert throttle.retry_after("a") is None
    throttle.failed("a")
    assert throttle.wait("a") == 2.0
    clock.now += 0.5
    assert throttle.retry_after("a") == 2  # rounded up: Retry-After is whole seconds
    for _ in range(20):  # however long the attack, never more than the cap
        clock.now += throttle.wait("a")
        throttle.failed("a")
    assert throttle.wait("a") == 60.0
    clock.now += FORGET_AFTER + 1
    throttle.failed("a")  # after a long pause, a fresh start
    assert throttle.retry_after("a") is None
    throttle.succeeded("a")
    assert len(throttle) == 0


def test_the_throttle_holds_a_bounded_number_of_clients() -> None:
    clock = Clock()
    throttle = LoginThrottle(60.0, clock=clock, max_clients=100)
    for n in range(1000):
        clock.now += 0.001
        throttle.failed(f"client-{n}")
    assert len(throttle) == 100
    clock.now += FORGET_AFTER + 1
    throttle.failed("late")
    assert len(throttle) == 1  # the idle ones are forgotten


def test_clients_are_addresses_and_ipv6_networks() -> None:
    assert client_key("203.0.113.7") == "203.0.113.7"
    assert (
        client_key("2001:db8:1:2:3:4:5:6") == client_key("2001:db8:1:2::9") == "2001:db8:1:2::/64"
    )
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:203.0.113.7") == "203.0.113.7"
    assert client_key(None) == client_key("") == "unknown"
