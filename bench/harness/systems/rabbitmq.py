"""RabbitMQ (aiormq, the AMQP client under aio-pika): a fresh durable queue per drain,
persistent messages with publisher confirms, and a drain by consumers with manual acks
(``rabbitmq``: one per message; ``rabbitmq-multi``: ``basic.ack(multiple=True)`` per batch)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from multiprocessing.synchronize import Barrier
from typing import Any

from bench.harness.systems.base import (
    BARRIER_TIMEOUT,
    BROKER_PUBLISH_WINDOW,
    DrainSpec,
    broker_handler,
)

RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
RABBITMQ_IDLE_POLL = 0.010
"""A RabbitMQ worker with nothing delivered re-checks the queue after this long (seconds)."""


async def rabbitmq_channel(confirms: bool = False) -> tuple[Any, Any]:
    import aiormq

    conn = await aiormq.connect(RABBITMQ_URL)
    return conn, await conn.channel(publisher_confirms=confirms)


def setup_rabbitmq(url: str) -> None:
    """Nothing: every drain gets a fresh queue (``enqueue_rabbitmq``)."""


def enqueue_rabbitmq(url: str, n: int, name: str) -> float:
    """A fresh durable queue, then ``n`` persistent messages on a channel with publisher
    confirms, ``BROKER_PUBLISH_WINDOW`` awaiting their confirm at once."""

    async def go() -> float:
        import aiormq

        conn, channel = await rabbitmq_channel(confirms=True)
        try:
            await channel.queue_declare(name, durable=True)
            persistent = aiormq.spec.Basic.Properties(delivery_mode=2)
            window = asyncio.Semaphore(BROKER_PUBLISH_WINDOW)

            async def publish(i: int) -> None:
                async with window:
                    confirm = await channel.basic_publish(
                        json.dumps({"n": i}).encode(), routing_key=name, properties=persistent
                    )
                if not isinstance(confirm, aiormq.spec.Basic.Ack):
                    raise RuntimeError(f"rabbitmq: message {i} not confirmed: {confirm!r}")

            start = time.perf_counter()
            await asyncio.gather(*(publish(i) for i in range(n)))
            elapsed = time.perf_counter() - start
        finally:
            await conn.close()
        return elapsed

    return asyncio.run(go())


def remaining_rabbitmq(url: str, name: str) -> int:
    """Ready messages once every worker's connection is closed (an unacked message would
    have gone back to ready then)."""

    async def go() -> int:
        conn, channel = await rabbitmq_channel()
        try:
            declared = await channel.queue_declare(name, passive=True)
            return int(declared.message_count or 0)
        finally:
            await conn.close()

    return asyncio.run(go())


def cleanup_rabbitmq(url: str, name: str) -> None:
    async def go() -> None:
        conn, channel = await rabbitmq_channel()
        try:
            await channel.queue_delete(name)
        finally:
            await conn.close()

    asyncio.run(go())


async def drain_rabbitmq(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    """A consumer with manual ack and prefetch ``batch``; each delivery handled and acked.
    With nothing delivered the worker asks the queue (a passive declare, which also comes
    back after all its acks on the channel); done when the queue has no ready message and
    this worker holds none. Another worker's unacked deliveries are that worker's to finish;
    the clock stops at the last worker's end.

    ``rabbitmq-multi``: the same consumer, but one ``basic.ack(multiple=True)`` per batch,
    on the delivery tag of its last message, once ``batch`` deliveries are handled (the
    whole prefetch window: the broker sends the next batch after it) or, with fewer in hand,
    once nothing more is delivered for ``RABBITMQ_IDLE_POLL`` (the queue's tail)."""
    multi = spec.system == "rabbitmq-multi"
    conn, channel = await rabbitmq_channel()
    done = 0
    try:
        await channel.basic_qos(prefetch_count=spec.batch)
        await channel.queue_declare(spec.name, passive=True)
        inbox: asyncio.Queue[Any] = asyncio.Queue()
        unacked = 0  # rabbitmq-multi: deliveries handled since the last ack, the last one's tag
        last_tag = 0

        async def deliver(message: Any) -> None:
            inbox.put_nowait(message)

        async def ack(tag: int, multiple: bool) -> None:
            # wait=False: not until the frame is written (AMQP acks have no reply anyway);
            # the passive declare that ends the drain comes back after them.
            await channel.basic_ack(tag, multiple=multiple, wait=False)

        async def handle(message: Any) -> None:
            nonlocal unacked, last_tag
            broker_handler(message.body)
            if not multi:
                await ack(message.delivery.delivery_tag, False)
                return
            unacked += 1
            last_tag = message.delivery.delivery_tag
            if unacked >= spec.batch:
                await flush()

        async def flush() -> None:
            """``rabbitmq-multi``: ack every delivery up to the last one handled."""
            nonlocal unacked
            if unacked:
                await ack(last_tag, True)
                unacked = 0

        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        await channel.basic_consume(spec.name, deliver, no_ack=False)
        while True:
            if inbox.empty():
                if unacked:  # rabbitmq-multi, a partial batch: more may be on its way
                    with contextlib.suppress(TimeoutError):
                        await handle(await asyncio.wait_for(inbox.get(), RABBITMQ_IDLE_POLL))
                        done += 1
                        continue
                    await flush()  # none came: the queue's tail (or another worker holds it)
                left = await channel.queue_declare(spec.name, passive=True)
                if not left.message_count and inbox.empty():
                    break
                with contextlib.suppress(TimeoutError):
                    await handle(await asyncio.wait_for(inbox.get(), RABBITMQ_IDLE_POLL))
                    done += 1
                continue
            await handle(inbox.get_nowait())
            done += 1
        return time.time(), done
    finally:
        await conn.close()
