"""The provider's HTTP boundary: timeouts, bounded retries with backoff and jitter,
``Retry-After`` on 429/503, no retry on other 4xx, redirects followed by rule, a low-speed
floor, and every attempt reported.

A download that breaks mid-body is retried from the first byte: the caller's ``restart``
hook discards what the failed attempt staged. What the body *means* (XML errors) is not this
module's business and is never retried here.

Redirects are followed here, not by httpx, so that each hop can be judged before it is
requested: only ``http`` and ``https`` targets, at most ``max_redirects`` hops (more is a
"redirect loop"), and another host (host and port, as the ``Host`` header names it) only
when ``redirect_other_hosts`` is set; an ``http`` to ``https`` upgrade of the same host is
always followed. A refused redirect fails the run at once: retrying cannot change it.

The body is read raw and decoded here (``gzip`` and ``deflate``, the encodings we ask for),
rather than by httpx's decoder, for two things it does not do: a compressed stream that ends
before its end marker is an error ("gzip body is truncated") instead of a silently shorter
document, and the output of one network chunk is cut into pieces of at most
``MAX_DECODED_PIECE`` bytes, so a compression bomb cannot inflate memory. A body that does
not decode is not retried (the same bytes would come back).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import random
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Final, TypeVar

import httpx

from pgenough.core import Backoff
from pgenough_plans.ingest.defaults import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FETCH_ATTEMPTS,
    DEFAULT_LOW_SPEED_LIMIT,
    DEFAULT_LOW_SPEED_TIME,
    DEFAULT_MAX_REDIRECTS,
    DEFAULT_READ_TIMEOUT,
)
from pgenough_plans.ingest.errors import ProviderError

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_MAX_RETRY_AFTER: Final = 300.0
RETRYABLE_STATUS: Final = frozenset({408, 429, 500, 502, 503, 504})
URL_SCHEMES: Final = ("http", "https")
"""The only schemes a provider URL, or a redirect, may use."""
ACCEPT_ENCODING: Final = "gzip, deflate"
"""The content codings we ask for, and the only ones ``BodyDecoder`` accepts."""
MAX_DECODED_PIECE: Final = 1 << 20
"""Largest piece of decoded body handed on at once, whatever one network chunk inflates to."""


def check_url(url: str) -> httpx.URL:
    """``url`` parsed, or ``ValueError`` saying why it cannot be a provider URL."""
    try:
        parsed = httpx.URL(url)
        port = parsed.port  # an invalid port only shows here in some versions
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ValueError(f"invalid provider URL {url!r}: {exc}") from None
    if parsed.scheme not in URL_SCHEMES:
        raise ValueError(f"invalid provider URL {url!r}: the scheme must be http or https")
    if not parsed.host:
        raise ValueError(f"invalid provider URL {url!r}: it names no host")
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"invalid provider URL {url!r}: port {port} is out of range")
    return parsed


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    url: str
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    """Longest silence between two reads of the body."""
    max_attempts: int = DEFAULT_FETCH_ATTEMPTS
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, cap=30.0))
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER
    """A longer Retry-After fails the run (the next scheduled fetch tries again)."""
    low_speed_limit: float = DEFAULT_LOW_SPEED_LIMIT
    """Bytes per second; 0 turns the floor off."""
    low_speed_time: float = DEFAULT_LOW_SPEED_TIME
    """Seconds over which the body must average ``low_speed_limit``."""
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    redirect_other_hosts: bool = False
    """Follow a redirect to another host (or port); off, such a redirect fails the run."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"provider name {self.name!r}: use letters, digits, - and _")
        try:
            check_url(self.url)
        except ValueError as exc:
            raise ValueError(f"provider {self.name}: {exc}") from None
        if self.max_attempts < 1 or min(self.connect_timeout, self.read_timeout) <= 0:
            raise ValueError("max_attempts must be >= 1 and timeouts positive")
        if self.low_speed_limit < 0 or self.low_speed_time <= 0 or self.max_redirects < 0:
            raise ValueError("low_speed_limit >= 0, low_speed_time > 0, max_redirects >= 0")

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
    """Body bytes received, as they came over the network (compressed, if they were)."""
    redirects: int = 0
    url: str | None = None
    """The URL the body came from, when a redirect was followed."""

    def as_json(self) -> dict[str, object]:
        fields = asdict(self)
        if not self.redirects:
            del fields["redirects"]
        return {k: v for k, v in fields.items() if v is not None}


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


class LowSpeed:
    """The low-speed floor of one attempt, in *network time* (time spent waiting for the
    provider; time our own writes take is not held against it). Pure: the caller reports each
    wait and says how long the next one may last.

    An attempt fails when, over the last ``window`` seconds of network time (and at least
    ``window`` seconds into the attempt), fewer than ``limit * window`` bytes arrived.
    """

    def __init__(self, limit: float, window: float) -> None:
        self.limit = limit
        self.window = window
        self._now = 0.0
        self._arrivals: deque[tuple[float, int]] = deque()

    def waited(self, seconds: float, received: int) -> None:
        """``seconds`` of network time passed, ending with ``received`` bytes (maybe 0)."""
        self._now += max(0.0, seconds)
        if received:
            self._arrivals.append((self._now, received))
        horizon = self._now - self.window
        while self._arrivals and self._arrivals[0][0] <= horizon:
            self._arrivals.popleft()

    def remaining(self) -> float | None:
        """Network seconds left before the floor is broken if nothing more arrives; None
        when the floor is off."""
        if self.limit <= 0:
            return None
        need = self.limit * self.window
        total = 0
        latest = 0.0  # the start of the attempt: the first window must pass in full
        for at, received in reversed(self._arrivals):
            total += received
            if total >= need:
                latest = at
                break
        return max(0.0, latest + self.window - self._now)

    def describe(self) -> str:
        received = sum(n for _, n in self._arrivals)
        return (
            f"too slow: {received} bytes in the last {self.window:g} s,"
            f" below the floor of {self.limit:g} bytes/s"
        )


class BodyDecoder:
    """Decodes a body's ``Content-Encoding`` (identity, gzip, deflate) in bounded pieces, and
    says when a compressed stream is corrupt or ends before its end marker."""

    def __init__(self, content_encoding: str | None) -> None:
        coding = (content_encoding or "").strip().lower()
        self.coding = coding
        self._z: zlib._Decompress | None
        if coding in ("", "identity"):
            self._z = None
        elif coding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self._z = zlib.decompressobj()
        else:
            raise ProviderError(
                f"unsupported Content-Encoding {coding[:40]!r} (asked for {ACCEPT_ENCODING})",
                status=200,
                kind="decoding",
            )
        self._started = False

    def _error(self, what: str) -> ProviderError:
        return ProviderError(f"{self.coding} body {what}", status=200, kind="decoding")

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of ``data``, in pieces of at most ``MAX_DECODED_PIECE``."""
        if self._z is None:
            if data:
                yield data
            return
        pending = data
        while True:
            z = self._z
            if z.eof:
                if self.coding == "deflate" or not pending.strip(b"\0"):
                    return  # what follows the end of the stream (padding) is ignored
                # gzip allows several members one after the other (RFC 1952, 2.2).
                z = self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                piece = z.decompress(pending, MAX_DECODED_PIECE)
            except zlib.error as exc:
                if self.coding == "deflate" and not self._started:
                    # Not the zlib wrapper RFC 9110 names: some servers send raw deflate.
                    self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                    self._started = True
                    continue
                raise self._error(f"does not decode: {exc}") from None
            self._started = True
            if piece:
                yield piece
            pending = z.unused_data if z.eof else z.unconsumed_tail
            # A full piece may leave output inside zlib with no input left: drain it.
            if not pending and len(piece) < MAX_DECODED_PIECE:
                return

    def close(self) -> Iterator[bytes]:
        """The end of the body: what is left, or an error if the stream stopped short."""
        z = self._z
        if z is None:
            return
        if not self._started:
            raise self._error("is empty")
        tail = z.flush()
        if not z.eof:
            raise self._error("is truncated: the stream ended before its end marker")
        if tail:
            yield tail


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
    on_phase: Callable[[str], Awaitable[None]] | None = None,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Download ``config.url`` and hand the decoded body's chunks to ``consume``.

    Retries (up to ``max_attempts``) connection failures, timeouts, bodies broken mid-way or
    slower than the floor, and 408/429/5xx, waiting ``Retry-After`` when given, otherwise a
    jittered exponential backoff; calls ``restart`` before each retry. Raises
    ``ProviderError`` when it gives up, on a status that retrying cannot fix, on a refused
    redirect and on a body that does not decode; exceptions of ``consume`` pass through.
    ``on_phase`` hears what the fetch is doing ("streaming the body (attempt 2 of 4)").
    """
    rng = rng or random.Random()

    async def phase(text: str) -> None:
        if on_phase is not None:
            await on_phase(text)

    for number in range(1, config.max_attempts + 1):
        attempt = _AttemptLog(number, config.max_attempts, on_attempt)
        try:
            result = await _one_attempt(client, config, consume, attempt, phase)
        except _Retry as retry:
            delay, reason = _retry_delay(config, retry, number, rng)
            await attempt.report(retry.status, retry.error, delay)
            if delay is None:
                raise ProviderError(
                    f"provider {config.name}: {reason} ({attempt.ordinal})",
                    status=retry.status,
                    kind="provider" if retry.status is not None else "transport",
                ) from retry
            await restart()
            await phase(f"waiting {delay:.3g} s to retry after {retry.error} ({attempt.ordinal})")
            await sleep(delay)
            continue
        except ProviderError as exc:
            await attempt.report(exc.status, str(exc))
            raise ProviderError(
                f"provider {config.name}: {exc}", status=exc.status, kind=exc.kind
            ) from exc
        await attempt.report(200)
        return result
    raise AssertionError("unreachable")


async def _one_attempt(
    client: httpx.AsyncClient,
    config: ProviderConfig,
    consume: Callable[[AsyncIterator[bytes]], Awaitable[T]],
    attempt: _AttemptLog,
    phase: Callable[[str], Awaitable[None]],
) -> T:
    """One attempt: connect (following redirects), check the status, stream the body into
    ``consume``. Raises ``_Retry`` for what another attempt may fix, ``ProviderError`` for what
    it will not; the caller reports the attempt (but a body ``consume`` could not use is
    reported here, by ``_consume``)."""
    await phase(f"connecting ({attempt.ordinal})")
    with _transport_faults(attempt):
        resp = await _open(client, config, attempt)
        try:
            if resp.status_code != 200:
                # The error page is not read: a hostile one could be huge or slow.
                raise _status_outcome(resp, attempt.at)
            decoder = BodyDecoder(resp.headers.get("content-encoding"))
            await phase(f"streaming the body ({attempt.ordinal})")
            floor = LowSpeed(config.low_speed_limit, config.low_speed_time)
            return await _consume(consume, attempt.body(resp, decoder, floor), attempt)
        finally:
            await resp.aclose()


async def _consume(
    consume: Callable[[AsyncIterator[bytes]], Awaitable[T]],
    body: AsyncIterator[bytes],
    attempt: _AttemptLog,
) -> T:
    """``consume(body)``; a body that arrived but could not be used (e.g. invalid XML) ends
    the attempt, on the record, and the caller of ``fetch`` decides the rest."""
    try:
        return await consume(body)
    except (httpx.HTTPError, _Retry, ProviderError):
        raise
    except Exception as exc:
        try:
            await attempt.report(200, str(exc))
        except Exception:
            # Reporting needs what may just have failed (the run's database connection, cut
            # off): the error that ended the attempt is the one to tell, not its echo.
            log.debug("attempt %d: could not report %r", attempt.number, exc, exc_info=True)
        raise


@contextlib.contextmanager
def _transport_faults(attempt: _AttemptLog) -> Iterator[None]:
    """httpx's errors as the fetch sees them: a timeout or a transport fault may pass on the
    next attempt (``_Retry``); a bad URL or any other HTTP error will not (``ProviderError``)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise _Retry(f"timeout ({type(exc).__name__})", None, None) from exc
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        url = str(attempt.url)
        raise ProviderError(f"invalid provider URL {url!r}: {exc}", kind="url") from exc
    except httpx.TransportError as exc:
        detail = str(exc) or type(exc).__name__
        raise _Retry(f"transport error: {detail}", None, None) from exc
    except httpx.HTTPError as exc:  # not a transport fault: retrying will not help
        raise ProviderError(f"{type(exc).__name__}: {exc}", kind="transport") from exc


def _retry_delay(
    config: ProviderConfig, retry: _Retry, number: int, rng: random.Random
) -> tuple[float | None, str]:
    """Seconds to wait before attempt ``number + 1``, or None to give up; and the reason to
    give up with. The provider's ``Retry-After`` if it sent one, else the backoff's; past
    ``max_retry_after`` it is not waited for."""
    if number == config.max_attempts:
        return None, retry.error
    if retry.retry_after is not None:
        delay = retry.retry_after
    else:
        delay = config.backoff.delay(number, rng)
    if delay > config.max_retry_after:
        return None, f"{retry.error}; Retry-After {delay:g}s exceeds {config.max_retry_after:g}s"
    return delay, retry.error


class _AttemptLog:
    """Times one attempt, counts its bytes, follows its redirects, and reports it once over."""

    def __init__(
        self, number: int, of: int, on_attempt: Callable[[Attempt], Awaitable[None]]
    ) -> None:
        self.number = number
        self.ordinal = f"attempt {number} of {of}"
        """For messages: "attempt 2 of 4"."""
        self.on_attempt = on_attempt
        self.started = time.monotonic()
        self.at = datetime.now(UTC)
        self.received = 0
        self.redirects = 0
        self.url: httpx.URL | None = None

    async def body(
        self, resp: httpx.Response, decoder: BodyDecoder, floor: LowSpeed
    ) -> AsyncIterator[bytes]:
        """The decoded body, under the low-speed floor (armed only while we wait on the
        network)."""
        raw = resp.aiter_raw()
        loop = asyncio.get_running_loop()
        while True:
            limit = floor.remaining()
            if limit is not None and limit <= 0:
                raise _Retry(floor.describe(), 200, None)
            began = loop.time()
            try:
                async with asyncio.timeout(limit) as watch:
                    chunk = await anext(raw)
            except StopAsyncIteration:
                break
            except TimeoutError:
                if watch.expired():
                    floor.waited(loop.time() - began, 0)
                    raise _Retry(floor.describe(), 200, None) from None
                raise
            floor.waited(loop.time() - began, len(chunk))
            self.received += len(chunk)
            for piece in decoder.feed(chunk):
                yield piece
        for piece in decoder.close():
            yield piece

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
                self.redirects,
                str(self.url) if self.redirects and self.url is not None else None,
            )
        )


async def _open(
    client: httpx.AsyncClient, config: ProviderConfig, attempt: _AttemptLog
) -> httpx.Response:
    """Send the request, following redirects by this module's rules; the final response,
    still streaming."""
    request = client.build_request(
        "GET", config.url, headers={"Accept-Encoding": ACCEPT_ENCODING}, timeout=config.timeout()
    )
    attempt.url = request.url
    while True:
        try:
            resp = await client.send(request, stream=True, follow_redirects=False)
        except httpx.RemoteProtocolError as exc:
            # httpx builds the next request as soon as it reads a Location header, and says
            # so when that header is not a URL at all.
            if "location header" not in str(exc).lower():
                raise
            raise ProviderError(
                f"redirect refused: the Location header is not a URL ({exc})", kind="redirect"
            ) from None
        target = resp.next_request
        if target is None:
            return resp
        await resp.aclose()
        if attempt.redirects >= config.max_redirects:
            raise ProviderError(
                f"redirect loop: more than {config.max_redirects} redirects"
                f" (the last one, HTTP {resp.status_code}, to {_location(resp)})",
                status=resp.status_code,
                kind="redirect",
            )
        _check_redirect(config, request.url, target.url, resp)
        attempt.redirects += 1
        attempt.url = target.url
        request = target


def _location(resp: httpx.Response) -> str:
    """The redirect's target as the provider wrote it (httpx fills in what it leaves out)."""
    text = resp.headers.get("location", "")
    return repr(text if len(text) <= 120 else text[:120] + "...")


def _origin(url: httpx.URL) -> tuple[str, int | None]:
    default = 443 if url.scheme == "https" else 80
    return url.host, url.port or default


def _check_redirect(
    config: ProviderConfig, source: httpx.URL, target: httpx.URL, resp: httpx.Response
) -> None:
    status = resp.status_code
    if target.scheme not in URL_SCHEMES:
        raise ProviderError(
            f"redirect refused: HTTP {status} to {_location(resp)}; only http and https"
            " redirects are followed",
            status=status,
            kind="redirect",
        )
    if config.redirect_other_hosts or _origin(target) == _origin(source):
        return
    upgrade = source.scheme == "http" and target.scheme == "https" and target.host == source.host
    if upgrade and _origin(source)[1] == 80 and _origin(target)[1] == 443:
        return
    raise ProviderError(
        f"redirect refused: HTTP {status} to another host, {_location(resp)};"
        " redirects to other hosts are not followed (setting: redirect_other_hosts)",
        status=status,
        kind="redirect",
    )


def _status_outcome(resp: httpx.Response, at: datetime) -> Exception:
    status = resp.status_code
    if status in RETRYABLE_STATUS:
        after = retry_after_seconds(resp.headers.get("retry-after"), at)
        return _Retry(f"HTTP {status}", status, after)
    return ProviderError(f"HTTP {status} (not retried)", status=status, kind="provider")
