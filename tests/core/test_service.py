"""The one service lifecycle (``core/service.py``): a host starts its services in order and
stops them in reverse, each ended before the next; ``start()`` waits for readiness within
its timeout and raises a failure to start; ``stop()`` of a plain loop ends it at once."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pgenough.core.service import Service, Services, TaskService

PROMPT = 2.0


class Recorded(Service):
    """A service that says when it starts and when it has ended."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.service_name = name
        self._log = log

    async def serve(self) -> None:
        self._log.append(f"start {self.service_name}")
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            self._log.append(f"end {self.service_name}")


async def test_a_host_starts_in_order_and_stops_in_reverse() -> None:
    log: list[str] = []
    async with Services() as services:
        for name in ("listener", "periodic", "stats"):
            await services.start(Recorded(name, log))
        await asyncio.sleep(0)  # let each take its first step
        assert log == ["start listener", "start periodic", "start stats"]
    assert log[3:] == ["end stats", "end periodic", "end listener"]


async def test_start_waits_for_readiness_within_its_timeout() -> None:
    ready = asyncio.Event()

    async def listen() -> None:
        ready.set()
        await asyncio.Event().wait()

    service = TaskService("listen", listen, ready=ready, ready_timeout=PROMPT)
    assert await asyncio.wait_for(service.start(), PROMPT * 2) is True
    assert service.running
    service.stop()
    await asyncio.wait_for(service.wait_stopped(), PROMPT)
    assert not service.running


async def test_start_returns_false_when_not_ready_in_time() -> None:
    never = asyncio.Event()
    service = TaskService("slow", asyncio.Event().wait, ready=never, ready_timeout=0.01)
    assert await service.start() is False
    assert service.running  # it goes on trying; the host decides what to say
    service.stop()
    await asyncio.wait_for(service.wait_stopped(), PROMPT)


async def test_a_service_that_fails_before_it_is_ready_fails_start() -> None:
    async def broken() -> None:
        raise RuntimeError("cannot start")

    service = TaskService("broken", broken, ready=asyncio.Event(), ready_timeout=PROMPT)
    with pytest.raises(RuntimeError, match="cannot start"):
        await asyncio.wait_for(service.start(), PROMPT * 2)


async def test_an_error_it_ended_with_is_logged_at_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failed = asyncio.Event()

    async def fails_later() -> None:
        failed.set()
        raise ValueError("lost its way")

    service = TaskService("later", fails_later)
    await service.start()
    await asyncio.wait_for(failed.wait(), PROMPT)
    with caplog.at_level(logging.ERROR, logger="pgenough.core.service"):
        service.stop()
        await asyncio.wait_for(service.wait_stopped(), PROMPT)
    [record] = caplog.records
    assert record.getMessage() == "later ended with an error"


async def test_a_service_runs_once_at_a_time() -> None:
    service = TaskService("once", asyncio.Event().wait)
    await service.start()
    with pytest.raises(RuntimeError, match="already running"):
        await service.start()
    service.stop()
    await asyncio.wait_for(service.wait_stopped(), PROMPT)
