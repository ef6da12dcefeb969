"""The provider's HTTP boundary: timeouts, bounded retries with backoff and jitter,
``Retry-After`` on 429/503, no retry on other 4xx, every attempt reported.

A download that breaks mid-body is retried from the first byte: the caller's ``restart``
hook discards what the failed attempt staged. What the body *means* (XML errors) is not this
module's business and is never retried here.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import httpx

from pgenough.core import Backoff
from pgenough.plans.errors import ProviderError

T = TypeVar("T")

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_MAX_RETRY_AFTER = 300.0
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    url: str
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    """Longest silence between two reads of the body."""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=30.0))
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER
    """A longer Retry-After fails the run (the next scheduled fetch tries again)."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"provider name {self.name!r}: use letters, digits, - and _")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"provider {self.name}: url must be http(s), got {self.url!r}")
        if self.max_attempts < 1 or min(self.connect_timeout, self.read_timeout) <= 0:
            raise ValueError("max_attempts must be >= 1 and timeouts positive")

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.read_timeout, connect=self.connect_timeout)


@dataclass(frozen=True)
class Attempt:
    """One HTTP attempt, as recorded on the run."""

    number: int
    at: str
    duration: float
    status: int | None = None
    error: str | None = None
    retry_in: float | None = None
    bytes: int = 0

    def as_json(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def retry_after_seconds(value: str | None, now: datetime) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent
    or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


class _Retry(Exception):
    def __init__(self, error: str, status: int | None, retry_after: float | None) -> None:
        self.error, self.status, self.retry_after = error, status, retry_after


async def fetch(
    client: httpx.AsyncClient,
    config: ProviderConfig,
    consume: Callable[[AsyncIterator[bytes]], Awaitable[T]],
    *,
    on_attempt: Callable[[Attempt], Awaitable[None]],
    restart: Callable[[], Awaitable[None]],
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Download ``config.url`` and hand the body's chunks to ``consume``.

    Retries (up to ``max_attempts``) connection failures, timeouts, bodies broken mid-way
    and 408/429/5xx, waiting ``Retry-After`` when given, otherwise a jittered exponential
    backoff; calls ``restart`` before each retry. Raises ``ProviderError`` when it gives up
    or on a status that retrying cannot fix; exceptions of ``consume`` pass through.
    """
    rng = rng or random.Random()
    for number in range(1, config.max_attempts + 1):
        attempt = _AttemptLog(number, on_attempt)
        report, counted = attempt.report, attempt.counted
        try:
            try:
                async with client.stream("GET", config.url, timeout=config.timeout()) as resp:
                    if resp.status_code != 200:
                        await resp.aread()
                        raise _status_outcome(config, resp, attempt.at)
                    try:
                        result = await consume(counted(resp.aiter_bytes()))
                    except httpx.TransportError:
                        raise
                    except Exception as exc:
                        # The body arrived but could not be used (e.g. invalid XML): that
                        # attempt is over and on the record; the caller decides the rest.
                        await report(200, str(exc))
                        raise
            except httpx.TimeoutException as exc:
                raise _Retry(f"timeout ({type(exc).__name__})", None, None) from exc
            except httpx.TransportError as exc:
                detail = str(exc) or type(exc).__name__
                raise _Retry(f"transport error: {detail}", None, None) from exc
        except _Retry as retry:
            last = number == config.max_attempts
            delay: float | None = None
            reason = retry.error
            if not last:
                delay = (
                    retry.retry_after
                    if retry.retry_after is not None
                    else config.backoff.delay(number, rng)
                )
                if delay > config.max_retry_after:
                    reason = f"{reason}; Retry-After {delay:g}s exceeds {config.max_retry_after:g}s"
                    last, delay = True, None
            await report(retry.status, retry.error, delay)
            if last:
                raise ProviderError(
                    f"provider {config.name}: {reason} (attempt {number} of {config.max_attempts})",
                    status=retry.status,
                ) from retry
            await restart()
            assert delay is not None
            await sleep(delay)
            continue
        except ProviderError as exc:
            await report(exc.status, str(exc))
            raise
        await report(200)
        return result
    raise AssertionError("unreachable")


class _AttemptLog:
    """Times one attempt, counts its bytes, and reports it once it is over."""

    def __init__(self, number: int, on_attempt: Callable[[Attempt], Awaitable[None]]) -> None:
        self.number = number
        self.on_attempt = on_attempt
        self.started = time.monotonic()
        self.at = datetime.now(UTC)
        self.received = 0

    async def counted(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in body:
            self.received += len(chunk)
            yield chunk

    async def report(
        self, status: int | None, error: str | None = None, retry_in: float | None = None
    ) -> None:
        await self.on_attempt(
            Attempt(
                self.number,
                self.at.isoformat(),
                time.monotonic() - self.started,
                status,
                error,
                retry_in,
                self.received,
            )
        )


def _status_outcome(config: ProviderConfig, resp: httpx.Response, at: datetime) -> Exception:
    status = resp.status_code
    if status in RETRYABLE_STATUS:
        after = retry_after_seconds(resp.headers.get("retry-after"), at)
        return _Retry(f"HTTP {status}", status, after)
    return ProviderError(f"provider {config.name}: HTTP {status} (not retried)", status=status)
