"""The provider client's retry policy, with httpx.MockTransport (no sockets, no clock)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from pgenough.core import Backoff
from pgenough_plans.ingest.errors import ProviderError
from pgenough_plans.ingest.provider import Attempt, ProviderConfig, fetch, retry_after_seconds

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def test_retry_after_takes_seconds_or_an_http_date() -> None:
    assert retry_after_seconds("120", NOW) == 120.0
    assert retry_after_seconds("Mon, 30 Nov 2026 12:00:30 GMT", NOW) == 30.0
    assert retry_after_seconds("Mon, 30 Nov 2026 11:00:00 GMT", NOW) == 0.0
    assert retry_after_seconds("soon", NOW) is None
    assert retry_after_seconds(None, NOW) is None


class _Body(httpx.AsyncByteStream):
    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


async def run(
    responses: list[httpx.Response], **config: object
) -> tuple[list[Attempt], list[float], object]:
    queue = list(responses)
    attempts: list[Attempt] = []
    sleeps: list[float] = []
    restarts = 0

    def handler(request: httpx.Request) -> httpx.Response:
        # Streamed, as a body from the network is (a Response made with content= is read
        # whole, and the provider reads raw bytes).
        given = queue.pop(0)
        return httpx.Response(given.status_code, headers=given.headers, stream=_Body(given.content))

    async def consume(body: AsyncIterator[bytes]) -> bytes:
        return b"".join([chunk async for chunk in body])

    async def on_attempt(attempt: Attempt) -> None:
        attempts.append(attempt)

    async def restart() -> None:
        nonlocal restarts
        restarts += 1

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    cfg = ProviderConfig("p", "http://provider.test/feed", **config)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        try:
            result: object = await fetch(
                client,
                cfg,
                consume,
                on_attempt=on_attempt,
                restart=restart,
                rng=random.Random(1),
                sleep=sleep,
            )
        except ProviderError as exc:
            result = exc
    assert restarts == len(sleeps)  # every retry starts over
    return attempts, sleeps, result


async def test_5xx_backs_off_exponentially_with_jitter_then_succeeds() -> None:
    backoff = Backoff(base=1.0, cap=60.0)
    attempts, sleeps, result = await run(
        [httpx.Response(500), httpx.Response(502), httpx.Response(200, content=b"<x/>")],
        backoff=backoff,
    )
    assert result == b"<x/>"
    assert [a.status for a in attempts] == [500, 502, 200]
    assert 0.5 <= sleeps[0] <= 1.0
    assert 1.0 <= sleeps[1] <= 2.0


async def test_retry_after_is_used_and_a_too_long_one_gives_up() -> None:
    _, sleeps, result = await run(
        [httpx.Response(429, headers={"Retry-After": "7"}), httpx.Response(200, content=b"ok")]
    )
    assert (sleeps, result) == ([7.0], b"ok")
    attempts, sleeps, result = await run(
        [httpx.Response(503, headers={"Retry-After": "3600"})], max_retry_after=60.0
    )
    assert sleeps == []
    assert isinstance(result, ProviderError)
    assert "Retry-After 3600s exceeds 60s" in str(result)
    assert len(attempts) == 1


async def test_other_4xx_is_final_and_retries_are_bounded() -> None:
    attempts, sleeps, result = await run([httpx.Response(403)])
    assert isinstance(result, ProviderError)
    assert (str(result), result.status, sleeps) == ("provider p: HTTP 403 (not retried)", 403, [])
    attempts, sleeps, result = await run([httpx.Response(503)] * 3, max_attempts=3)
    assert isinstance(result, ProviderError)
    assert str(result) == "provider p: HTTP 503 (attempt 3 of 3)"
    assert len(attempts) == 3
    assert len(sleeps) == 2


def test_provider_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match=r"invalid provider URL 'ftp://x': the scheme must be"):
        ProviderConfig("p", "ftp://x")
    with pytest.raises(ValueError, match=r"invalid provider URL 'http://127\.0\.0\.1:99999/x'"):
        ProviderConfig("p", "http://127.0.0.1:99999/x")
    with pytest.raises(ValueError, match="names no host"):
        ProviderConfig("p", "http:///feed")
    with pytest.raises(ValueError, match="provider name"):
        ProviderConfig("a b", "http://x")


async def test_a_failure_to_report_the_attempt_does_not_hide_what_ended_it() -> None:
    """The body could not be used, and recording the attempt fails too (both need the run's
    database connection, which a network cut took): the error raised is the first."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Body(b"<x/>"))

    async def consume(body: AsyncIterator[bytes]) -> bytes:
        raise RuntimeError("could not receive data from server: Connection timed out")

    async def on_attempt(attempt: Attempt) -> None:
        raise RuntimeError("the connection is closed")

    async def restart() -> None:
        raise AssertionError("not retried")

    cfg = ProviderConfig("p", "http://provider.test/feed")
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(RuntimeError, match="Connection timed out"):
            await fetch(client, cfg, consume, on_attempt=on_attempt, restart=restart)
