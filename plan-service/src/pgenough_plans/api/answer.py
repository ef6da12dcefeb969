"""A ``/search`` answer: one page, the whole range in one piece, or the whole range streamed.

* With ``limit``: one page of at most ``limit`` events, and ``Link: <...>; rel="next"`` (a
  relative URL with an ``after`` cursor) when more follow.
* Without ``limit``: every matching event. The first keyset page of ``STREAM_PAGE`` events is
  read before anything is sent, so an error there is still an error response; when it holds
  everything the answer is sent (and cached) in one piece. Otherwise the first page is read
  again, and every page after it, from one snapshot (``REPEATABLE READ READ ONLY``), and
  streamed page by page, so the API holds one page at a time however many events match.
  While it streams, the search keeps its bulkhead slot and its connection; each page is
  bounded by the statement timeout, the whole stream by ``stream_timeout``, and the wait for
  the client to take each page by ``stall_timeout``. At most the bulkhead's ``max_streams``
  searches stream at once; one more is refused (503) before anything is sent.

A client that stops reading would otherwise hold its slot, its connection and its snapshot
(an xmin horizon that keeps vacuum from removing dead rows on the whole database) until
``stream_timeout``: past ``stall_timeout`` the stream is cut and the connection reset at once
(the server's ``ABORT`` extension, ``pgenough_plans.api.server``), since a close would wait for the
client to read what is buffered.

A search read on a replica that stops answering (frozen, its sockets open) is abandoned at
the API's own deadline (``replica.deadline``: the search timeout plus a margin) and read again
on the primary; a stream whose page passes that deadline is cut (reason ``deadline``).

A stream cut after its status line was sent (a page past its statement timeout, the stream
past ``stream_timeout``, the database gone) cannot become an error response: the connection
is closed before the body is complete (no final chunk), so the client sees a truncated
transfer and a body that is not valid JSON, never a short list that looks whole. The cut is
logged on one line and counted in ``pgenough_api_streams_cut_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import PoolTimeout
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from pgenough.core.errors import first_line
from pgenough_plans.api import metrics
from pgenough_plans.api.deps import ApiState
from pgenough_plans.api.errors import TooBusy, Unavailable
from pgenough_plans.api.replica import Lag, ReplicaStalled, deadline, read_connection
from pgenough_plans.api.search import Page, Q, SearchQuery, fetch_page

log = logging.getLogger(__name__)

PREFIX: Final = b'{"data":{"events":['
SUFFIX: Final = b']},"error":null}'
MEDIA_TYPE: Final = "application/json"
INCOMPLETE: Final = "ASGI callable returned without completing response."
"""What uvicorn logs when an app ends a response early, as a cut stream does on purpose."""
ABORT: Final = "pgenough.abort"
"""The scope extension (``scope["extensions"][ABORT]``, a callable) that resets the client's
connection, dropping what is buffered for it; servers without it close it instead."""


class _Stalled(Exception):
    """The client did not take a page within the stall timeout."""


@dataclass(frozen=True)
class Answer:
    """A complete answer, as the cache keeps it."""

    body: bytes
    next_link: str | None = None

    def response(self) -> Response:
        headers = {"link": f'<{self.next_link}>; rel="next"'} if self.next_link else None
        return Response(self.body, headers=headers, media_type=MEDIA_TYPE)


def answer_of(page: Page, query: SearchQuery) -> Answer:
    link = query.next_link(page.last) if page.last is not None else None
    return Answer(PREFIX + page.events.encode() + SUFFIX, link)


@contextlib.contextmanager
def database_errors(search_timeout: float) -> Iterator[None]:
    """What the database's failures mean to the client, before the answer has started."""
    try:
        yield
    except psycopg.errors.QueryCanceled as exc:
        metrics.SEARCH_TIMEOUTS.inc()
        raise TooBusy(
            f"the search did not finish within {search_timeout:g} s;"
            " retry later or narrow the range"
        ) from exc
    except PoolTimeout as exc:
        raise Unavailable("no database connection is available; retry later") from exc
    except psycopg.OperationalError as exc:
        raise Unavailable("the database cannot be reached; retry later") from exc


async def _end_snapshot(conn: psycopg.AsyncConnection[Any]) -> None:
    # Read only: nothing to commit, and ROLLBACK also ends a transaction a failed page left.
    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        with contextlib.suppress(psycopg.Error):  # a broken connection: the pool discards it
            await conn.execute(Q["end_snapshot"])


async def _timed(conn: psycopg.AsyncConnection[Any], seconds: float) -> None:
    """Behind a transaction pooler: ``seconds`` of statement timeout for the transaction open
    on ``conn`` (the pool's sessions carry none: see ``app.running``)."""
    await conn.execute(Q["local_statement_timeout"], {"ms": f"{max(1, round(seconds * 1000))}"})


async def search(api: ApiState, query: SearchQuery, *, head: bool = False) -> Response:
    """The response to ``query``: from the cache, in one piece, or streamed."""
    key = query.cache_key
    if key is not None:
        cached = api.cache.get(key)
        if cached is not None:
            return cached.response()
    generation = api.cache.generation
    config = api.config
    stack = AsyncExitStack()
    try:
        await stack.enter_async_context(api.bulkhead.slot())
        with database_errors(config.search_timeout):
            try:
                first = await _first_page(api, query, stack, replicas=True)
            except ReplicaStalled as exc:
                # Cut at its deadline and passed over: the primary answers instead.
                log.warning("%s: the search reads the primary", first_line(exc))
                first = await _first_page(api, query, stack, replicas=False)
        if not first.streams:
            await stack.aclose()
            answer = answer_of(first.page, query)
            if key is not None:
                api.cache.put(key, answer, generation, first.replayed)
            return answer.response()
    except BaseException:
        await stack.aclose()
        raise
    return Stream(
        query,
        first.conn,
        first.page,
        stack,
        config.stream_timeout,
        config.stream_stall_timeout,
        head=head,
        replica=first.replica,
        deadline=config.read_deadline,
    )


@dataclass(frozen=True)
class _First:
    """A search's first page, and the connection (held by the search's stack) it was read on."""

    conn: psycopg.AsyncConnection[Any]
    page: Page
    replayed: int | None
    replica: Lag | None
    streams: bool
    """More pages follow, from the snapshot open on ``conn``."""


async def _first_page(
    api: ApiState, query: SearchQuery, stack: AsyncExitStack, *, replicas: bool
) -> _First:
    """Read the first page on a replica (``replicas``, when the API has some) or the primary,
    with everything it holds pushed on ``stack`` once it succeeds; on a failure it holds
    nothing (a replica's cut connection back to its pool, to be discarded)."""
    config = api.config
    streamed = query.limit is None
    async with AsyncExitStack() as held:
        read = await read_connection(
            api.replicas if replicas else None, api.pool, held, config.pool_timeout
        )
        conn = read.conn
        with deadline(conn, config.read_deadline, read.replica):
            pooled = config.behind_pooler
            if pooled:
                # The first page in a transaction of its own, with its timeout (two round
                # trips more than a direct search: BEGIN and the timeout; COMMIT at the end).
                await conn.execute(Q["begin_read"])
                held.push_async_callback(_end_snapshot, conn)
                await _timed(conn, config.search_timeout)
            if config.search_delay:
                await conn.execute(Q["delay"], {"seconds": config.search_delay})
            page = await fetch_page(conn, query, query.after, query.offset)
        streams = streamed and page.more
        if streams:
            # Too large for one piece: every page, this one again, from one snapshot. A
            # range that fits one page (the common search) pays no BEGIN and ROLLBACK.
            held.enter_context(api.bulkhead.stream())
            with deadline(conn, config.read_deadline, read.replica):
                if pooled:
                    await conn.execute(Q["end_snapshot"])  # the first page's transaction
                await conn.execute(Q["snapshot"])
                held.push_async_callback(_end_snapshot, conn)
                if pooled:
                    await _timed(conn, config.search_timeout)
                page = await fetch_page(conn, query, query.after, query.offset)
        stack.push_async_exit(held.pop_all())
    return _First(conn, page, read.replayed, read.replica, streams)


class Stream(Response):
    """Every event of ``query`` after ``first``, page by page (see the module's docstring).
    Owns ``stack`` (the bulkhead slot, the connection and its snapshot): closed when the
    stream ends, however it ends."""

    media_type = MEDIA_TYPE

    def __init__(
        self,
        query: SearchQuery,
        conn: psycopg.AsyncConnection[Any],
        first: Page,
        stack: AsyncExitStack,
        timeout: float,
        stall_timeout: float,
        *,
        head: bool = False,
        replica: Lag | None = None,
        deadline: float = math.inf,
    ) -> None:
        super().__init__(None, media_type=MEDIA_TYPE)
        # No Content-Length: the length is known only at the end (chunked transfer). A HEAD
        # answer says so too, as the GET does (uvicorn adds it only when a body follows).
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        if head:
            self.raw_headers.append((b"transfer-encoding", b"chunked"))
        self.query = query
        self.conn = conn
        self.first = first
        self.stack = stack
        self.timeout = timeout
        self.stall_timeout = stall_timeout
        self.head = head
        self.replica = replica
        """The replica ``conn`` reads (None: the primary)."""
        self.deadline = deadline
        """Seconds a page may take on a replica before the stream is cut."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self.stack:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            if self.head:
                await send({"type": "http.response.body", "body": b""})
                return
            gone = asyncio.Event()
            watcher = asyncio.create_task(_until_disconnect(receive, gone))
            try:
                stalled = await self._stream(send, gone)
            finally:
                watcher.cancel()
            if stalled:
                abort = scope.get("extensions", {}).get(ABORT)
                if abort is not None:
                    abort()

    async def _send(self, send: Send, body: bytes, *, more: bool = True) -> None:
        try:
            async with asyncio.timeout(self.stall_timeout):
                await send({"type": "http.response.body", "body": body, "more_body": more})
        except TimeoutError:
            raise _Stalled from None

    async def _stream(self, send: Send, gone: asyncio.Event) -> bool:
        """Send every page; True when the client stalled (its connection should be reset)."""
        started = time.monotonic()
        page, pages = self.first, 1
        try:
            async with asyncio.timeout(self.timeout):
                await self._send(send, PREFIX + page.events.encode())
                while page.last is not None:
                    with deadline(self.conn, self.deadline, self.replica):
                        page = await fetch_page(self.conn, self.query, page.last, 0)
                    pages += 1
                    if gone.is_set():
                        return False  # the client left: nobody to send the rest to
                    body = b"," + page.events.encode() if page.events else b""
                    if page.last is None:
                        await self._send(send, body + SUFFIX, more=False)
                        return False
                    await self._send(send, body)
            return False
        except _Stalled:
            reason = "stall"
            why = (
                "the client took no page within PGENOUGH_API_STREAM_STALL_TIMEOUT"
                f" ({self.stall_timeout:g} s)"
            )
        except TimeoutError:
            reason, why = "timeout", f"past PGENOUGH_API_STREAM_TIMEOUT ({self.timeout:g} s)"
        except psycopg.errors.QueryCanceled:
            metrics.SEARCH_TIMEOUTS.inc()
            reason, why = "statement_timeout", "a page ran past PGENOUGH_API_SEARCH_TIMEOUT"
        except ReplicaStalled as exc:
            reason, why = "deadline", first_line(exc)
        except psycopg.OperationalError as exc:
            reason, why = "database", f"the database connection failed ({first_line(exc)})"
        metrics.STREAMS_CUT.labels(reason).inc()
        log.warning(
            "search stream cut at page %d after %.1f s: %s; the client gets a truncated body",
            pages,
            time.monotonic() - started,
            why,
        )
        # Returning without the final body message makes the server close the connection
        # without the last chunk: the client cannot take the partial body for a whole one.
        return reason == "stall"


async def _until_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


class IncompleteFilter(logging.Filter):
    """Drops uvicorn's error line for a response ended early: a cut stream logs its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != INCOMPLETE
