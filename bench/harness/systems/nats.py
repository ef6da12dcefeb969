"""NATS JetStream (nats-py): a fresh file-storage stream and durable pull consumer per drain,
publishes awaiting their acks, and a drain by pull requests (``nats``: one ack per message;
``nats-ackall``: ``AckPolicy.ALL``, one ack per batch)."""

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

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")


def nats_subject(name: str) -> str:
    return f"bench.{name}"


NATS_DURABLE = "workers"


async def nats_connect() -> Any:
    import nats

    async def quiet(exc: Exception) -> None:
        """Errors surface as exceptions of the calls; nats-py's default prints a traceback."""

    return await nats.connect(NATS_URL, connect_timeout=5, allow_reconnect=False, error_cb=quiet)


def setup_nats(url: str) -> None:
    """Nothing: every drain gets a fresh stream (``enqueue_nats``)."""


def enqueue_nats(url: str, n: int, name: str, ack_all: bool = False) -> float:
    """A fresh file-storage work-queue stream and durable pull consumer (explicit acks, or
    ``AckPolicy.ALL`` with ``ack_all``), then ``n`` publishes, each awaiting its ack,
    ``BROKER_PUBLISH_WINDOW`` in flight."""

    async def go() -> float:
        from nats.js.api import (
            AckPolicy,
            ConsumerConfig,
            RetentionPolicy,
            StorageType,
            StreamConfig,
        )

        nc = await nats_connect()
        try:
            js = nc.jetstream(publish_async_max_pending=BROKER_PUBLISH_WINDOW)
            await js.add_stream(
                StreamConfig(
                    name=name,
                    subjects=[nats_subject(name)],
                    storage=StorageType.FILE,
                    # A work-queue stream takes explicit acks only; with its one consumer an
                    # interest stream deletes a message once it is acked, just the same.
                    retention=RetentionPolicy.INTEREST if ack_all else RetentionPolicy.WORK_QUEUE,
                )
            )
            await js.add_consumer(
                name,
                ConsumerConfig(
                    durable_name=NATS_DURABLE,
                    ack_policy=AckPolicy.ALL if ack_all else AckPolicy.EXPLICIT,
                    ack_wait=120,
                    max_ack_pending=-1,
                ),
            )
            subject = nats_subject(name)
            futures = []
            start = time.perf_counter()
            for i in range(n):
                futures.append(await js.publish_async(subject, json.dumps({"n": i}).encode()))
            acks = await asyncio.gather(*futures)
            elapsed = time.perf_counter() - start
        finally:
            await nc.close()
        assert len(acks) == n
        return elapsed

    return asyncio.run(go())


async def _nats_consumer_left(js: Any, name: str) -> tuple[int, int, int]:
    info = await js.consumer_info(name, NATS_DURABLE)
    stream = await js.stream_info(name)
    return int(info.num_pending), int(info.num_ack_pending), int(stream.state.messages)


def remaining_nats(url: str, name: str) -> int:
    """Messages the consumer has not delivered, delivered but not acked, and left in the
    stream; acks are applied asynchronously, so wait up to 5 s for them to land."""

    async def go() -> int:
        nc = await nats_connect()
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + 5
            while True:
                left = await _nats_consumer_left(js, name)
                if not any(left) or time.monotonic() > deadline:
                    return sum(left)
                await asyncio.sleep(0.05)
        finally:
            await nc.close()

    return asyncio.run(go())


def cleanup_nats(url: str, name: str) -> None:
    async def go() -> None:
        nc = await nats_connect()
        try:
            with contextlib.suppress(Exception):
                await nc.jetstream().delete_stream(name)
        finally:
            await nc.close()

    asyncio.run(go())


async def drain_nats(spec: DrainSpec, barrier: Barrier) -> tuple[float, int]:
    """Pull requests of ``batch`` messages with ``no_wait`` (the first step of nats-py's
    ``fetch``: it would then linger for new messages, which a drain must not wait for); each
    message handled and acked (``nats-ackall``: all handled, then only the last one acked,
    which under ``AckPolicy.ALL`` acks every message up to it); done when a request finds
    nothing pending."""
    from nats.js.client import JetStreamContext

    ack_all = spec.system == "nats-ackall"
    nc = await nats_connect()
    done = 0
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        request = json.dumps({"batch": spec.batch, "no_wait": True}).encode()
        pull = f"$JS.API.CONSUMER.MSG.NEXT.{spec.name}.{NATS_DURABLE}"
        await nc.flush()
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT)
        while True:
            await nc.publish(pull, request, reply=inbox)
            batch: list[Any] = []
            while len(batch) < spec.batch:
                msg = await sub.next_msg(timeout=60)
                if JetStreamContext.is_status_msg(msg):
                    break  # 404 no messages / 408 request done: the batch ends here
                batch.append(msg)
            if not batch:
                break
            for msg in batch:  # as nats-py's fetch: the batch arrives, then each is handled
                broker_handler(msg.data)
                if not ack_all:
                    await msg.ack()
            if ack_all:
                await batch[-1].ack()  # the batch's highest stream sequence: all of it acked
            done += len(batch)
        await nc.flush()  # the acks are on the server
        return time.time(), done
    finally:
        await nc.close()
