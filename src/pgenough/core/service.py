"""One lifecycle for a process's long-lived services: ``start()``, ``stop()``, ``wait_stopped()``.

A service is a loop that runs beside the process's real work for as long as the process does:
the worker's listener (``Notifier``), its periodic duties (``Periodic``, maintenance among
them), the worker itself, the API's cache listener and pressure publisher, the dashboard's live
feed. Each used to be a task started and ended its own way; now a process host puts them in a
``Services`` group, which starts them in order and stops them in reverse, each one gone
before the next is stopped (a listener outlives the loops it wakes). *From:* River's
``startstop`` (every service has ``Start``, ``Stop``, ``Started``, ``Stopped``).

``start()`` runs ``serve()`` as a task and waits, at most ``ready_timeout`` seconds, for
``ready()`` (a listener: LISTEN is active); it returns whether the service was ready by then,
and raises if ``serve()`` failed first. ``stop()`` asks the service to end: by default it is
cancelled, at its next await; a service that holds work to finish (the worker: running
handlers) overrides it to end gracefully. ``wait_stopped()`` returns once ``serve()`` has
ended; an error it ended with is logged, not raised (a host stopping its services stops all
of them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

log = logging.getLogger(__name__)


class Service:
    """Base of a long-lived service; subclasses write ``serve()`` (and may ``ready()``)."""

    service_name: str = "service"
    """Its task's name (set per instance by services with several instances)."""
    ready_timeout: float = 0.0
    """How long ``start()`` waits for ``ready()`` (0: it does not wait)."""
    _service_task: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        """The service's loop: until cancelled, or until ``stop()`` makes it return."""
        raise NotImplementedError

    async def ready(self) -> None:
        """Return once the service does its job (default: as soon as it runs)."""

    async def start(self) -> bool:
        """Run ``serve()``; True once ``ready()``, False if ``ready_timeout`` passed first."""
        if self._service_task is not None and not self._service_task.done():
            raise RuntimeError(f"{self.service_name} is already running")
        task = asyncio.create_task(self.serve(), name=self.service_name)
        self._service_task = task
        if self.ready_timeout <= 0:
            return False
        ready = asyncio.ensure_future(self.ready())
        try:
            await asyncio.wait(
                {task, ready}, timeout=self.ready_timeout, return_when="FIRST_COMPLETED"
            )
        finally:
            ready.cancel()
        error = task.exception() if task.done() and not task.cancelled() else None
        if error is not None:
            raise error
        return ready.done() and not ready.cancelled()

    def stop(self) -> None:
        """Ask the service to end (this one: cancel it). Returns at once; see wait_stopped."""
        if self._service_task is not None:
            self._service_task.cancel()

    async def wait_stopped(self) -> None:
        """Return once ``serve()`` has ended (at once if it never started)."""
        task = self._service_task
        if task is None:
            return
        await asyncio.wait({task})
        error = None if task.cancelled() else task.exception()
        if error is not None:
            log.error("%s ended with an error", self.service_name, exc_info=error)

    @property
    def running(self) -> bool:
        return self._service_task is not None and not self._service_task.done()


class TaskService(Service):
    """A service made of a coroutine function (``fn()`` runs until cancelled), with an
    optional ``ready`` event it sets once it does its job."""

    def __init__(
        self,
        name: str,
        fn: Callable[[], Awaitable[None]],
        *,
        ready: asyncio.Event | None = None,
        ready_timeout: float = 0.0,
    ) -> None:
        self.service_name = name
        self._fn = fn
        self._ready = ready
        self.ready_timeout = ready_timeout if ready is not None else 0.0

    async def serve(self) -> None:
        await self._fn()

    async def ready(self) -> None:
        if self._ready is not None:
            await self._ready.wait()


class Services:
    """A process host's services: started in order, stopped in reverse, each one ended before
    the next is stopped. ``async with Services() as services: await services.start(x)``."""

    def __init__(self) -> None:
        self._started: list[Service] = []

    async def start(self, service: Service) -> bool:
        """Start ``service`` (see ``Service.start``); it is stopped with the others."""
        ready = await service.start()
        self._started.append(service)
        return ready

    async def stop(self) -> None:
        """Stop every started service, the last started first."""
        while self._started:
            service = self._started.pop()
            service.stop()
            await service.wait_stopped()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


__all__ = [
    "Service",
    "Services",
    "TaskService",
]
