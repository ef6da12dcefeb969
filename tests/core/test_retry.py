"""The one reconnect policy (``core/retry.py``): delays that grow with jitter and start over
after a success, one warning line per failure, no sleep before the first attempt, and waits
that end at once on cancel or stop. No database, no clock: huge delays prove there was no
sleep (the test would time out), and events, not sleeps, tell when a wait began."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from pgenough.core.retry import Backoff, Reconnect

log = logging.getLogger("tests.reconnect")
PROMPT = 2.0
"""Seconds within which something that must happen at once happens (a loaded CI machine)."""


def policy(backoff: Backoff, stop: asyncio.Event | None = None) -> Reconnect:
    return Reconnect("test loop: connect", backoff, logger=log, rng=random.Random(7), stop=stop)


def test_delays_grow_with_jitter_within_bounds_up_to_the_cap() -> None:
    backoff = Backoff(base=0.1, cap=1.0)
    reconnect = policy(backoff)
    delays = [reconnect.failed(OSError("refused")) for _ in range(8)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == len(delays)  # jittered: no two alike
    assert reconnect.failures == 8


def test_a_success_starts_the_delays_over() -> None:
    reconnect = policy(Backoff(base=1.0, cap=60.0))
    for _ in range(5):
        reconnect.failed("down")
    reconnect.succeeded()
    assert reconnect.failures == 0
    assert 0.5 <= reconnect.failed("down again") <= 1.0


def test_each_failure_logs_one_warning_with_its_attempt_and_delay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reconnect = policy(Backoff(base=2.0, cap=2.0))
    with caplog.at_level(logging.WARNING, logger=log.name):
        first = reconnect.failed(OSError("connection refused\nDETAIL: more lines"))
        second = reconnect.failed(OSError())
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 2
    assert [r.getMessage() for r in caplog.records] == [
        f"test loop: connect failed (connection refused); attempt 1, retry in {first:.2f}s",
        f"test loop: connect failed (OSError); attempt 2, retry in {second:.2f}s",
    ]


async def test_no_sleep_before_the_first_attempt() -> None:
    reconnect = policy(Backoff(base=3600.0, cap=3600.0))
    calls = 0

    async def connect() -> str:
        nonlocal calls
        calls += 1
        return "connected"

    assert await asyncio.wait_for(reconnect.attempt(connect, OSError), PROMPT) == "connected"
    assert (calls, reconnect.failures) == (1, 0)


async def test_attempt_retries_until_it_connects_then_resets() -> None:
    reconnect = policy(Backoff(base=0.001, cap=0.004))
    seen: list[str] = []

    async def connect() -> int:
        if len(seen) < 3:
            raise ConnectionError(f"refused {len(seen)}")
        return len(seen)

    result = await asyncio.wait_for(
        reconnect.attempt(connect, ConnectionError, on_failure=lambda e: seen.append(str(e))),
        PROMPT,
    )
    assert result == 3
    assert seen == ["refused 0", "refused 1", "refused 2"]
    assert reconnect.failures == 0


async def test_other_errors_are_not_retried() -> None:
    reconnect = policy(Backoff(base=3600.0, cap=3600.0))

    async def connect() -> None:
        raise ValueError("a bug, not a connection")

    with pytest.raises(ValueError, match="a bug"):
        await asyncio.wait_for(reconnect.attempt(connect, ConnectionError), PROMPT)
    assert reconnect.failures == 0


async def test_cancelling_a_loop_in_its_backoff_ends_it_at_once() -> None:
    reconnect = policy(Backoff(base=3600.0, cap=3600.0))
    failing = asyncio.Event()

    async def connect() -> None:
        failing.set()
        raise ConnectionError("down")

    task = asyncio.create_task(reconnect.attempt(connect, ConnectionError))
    await asyncio.wait_for(failing.wait(), PROMPT)
    await asyncio.sleep(0)  # let it enter its hour-long wait
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=PROMPT)
    assert task in done and task.cancelled()


async def test_stop_ends_a_wait_at_once() -> None:
    stop = asyncio.Event()
    reconnect = policy(Backoff(base=3600.0, cap=3600.0), stop=stop)
    waiting = asyncio.create_task(reconnect.wait(reconnect.failed("down")))
    await asyncio.sleep(0)
    assert not waiting.done()
    stop.set()
    await asyncio.wait_for(waiting, PROMPT)
