"""The plan service's tables: runs' staging tables and the set-based upsert into ``plans``.

Each run stages into a table of its own (``plans.staging_<run id>``), dropped when the
run is processed or fails, so discarding a failed snapshot costs one ``DROP TABLE`` and leaves
no dead rows behind. Chunks of work are ranges of the staging table's pages (TID range scans:
no index to build), applied by one statement each.

A staged row's ``seq`` is its position among the snapshot's staged plans, in document order.
A plan listed more than once takes the content of its last listing: ``merge_duplicates``
folds its listings into one row before the run is sealed, so no chunk ever writes an earlier
copy, whatever the chunking and however many workers apply them; the run counts the extra
listings (``runs.plans_duplicate``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from pgenough.core.db import PLAN_EACH_TIME, AsyncConn, named_queries
from pgenough.core.migrations import MigrationSet
from pgenough_plans.ingest.defaults import DEFAULT_VACUUM_DEAD_SHARE, VACUUM_MIN_DEAD_ROWS

log = logging.getLogger(__name__)
_Q = named_queries("pgenough_plans.ingest", "store")

MIGRATIONS = MigrationSet("plans", "pgenough_plans.ingest")
"""The plan service's schema track; pass it to ``pgenough.core.migrate``."""
SCHEMA = "plans"
"""The plan service's own schema (migration 0008): its tables, types, functions and the runs'
staging tables; the library's are in ``pgenough``."""

# Plan ids are name-based UUIDs (v3) in this namespace: stable across runs, hosts and
# versions. The database computes them (plans.plan_uuid) where rows are written.
PLAN_NAMESPACE = uuid.UUID("6f1c2b7e-3d4a-5b8c-9e0f-a1b2c3d4e5f6")
DEFAULT_CHUNK_PAGES = 128  # about 7,500 staged plans


def plan_uuid(provider: str, base_plan_id: str, plan_id: str) -> uuid.UUID:
    """The API id of a plan, derived from its identity (as ``plans.plan_uuid`` does)."""
    return uuid.uuid3(PLAN_NAMESPACE, f"{provider}\x1f{base_plan_id}\x1f{plan_id}")


def staging_table(run_id: int) -> sql.Identifier:
    return sql.Identifier(SCHEMA, f"staging_{run_id}")


def _q(name: str, run_id: int) -> sql.Composed:
    return sql.SQL(_Q[name]).format(staging=staging_table(run_id))


async def create_staging(conn: AsyncConn, run_id: int, provider: str) -> None:
    await conn.execute(
        sql.SQL(_Q["create_staging"]).format(
            staging=staging_table(run_id), provider=sql.Literal(provider)
        )
    )


async def analyze_staging(conn: AsyncConn, run_id: int) -> None:
    await conn.execute(_q("analyze_staging", run_id))


async def truncate_staging(conn: AsyncConn, run_id: int) -> None:
    await conn.execute(_q("truncate_staging", run_id))


async def staging_lost(conn: AsyncConn, run_id: int) -> bool:
    """Whether a sealed run's staging table has been emptied under it: a crash of the server
    or a promoted standby resets unlogged tables (``create_staging``). Only for a run that
    staged plans: a sealed run's table is never emptied otherwise."""
    cur = await conn.execute(
        _Q["staging_size"], {"table": f"plans.staging_{run_id}"}, prepare=PLAN_EACH_TIME
    )
    row = await cur.fetchone()
    return row is None or row[0] is None or row[0] == 0


async def drop_staging(conn: AsyncConn, run_id: int) -> None:
    await conn.execute(_q("drop_staging", run_id))


@dataclass(frozen=True)
class VacuumResult:
    dead_rows: int
    """The plans table's dead row versions when it looked (``pg_stat_user_tables``)."""
    vacuumed: bool


async def vacuum_plans(
    conn: AsyncConn, dead_share: float = DEFAULT_VACUUM_DEAD_SHARE
) -> VacuumResult:
    """VACUUM the plans table once its dead row versions reach ``dead_share`` of its live
    rows (and ``VACUUM_MIN_DEAD_ROWS``). ``conn`` in autocommit mode.

    Every plan a snapshot changes is a new row version, and the page it lands on, and the
    one it left, lose their all-visible bit: /search's index-only scan on
    ``plans_search_idx`` then reads the heap for every plan on them, the skipped ones of an
    offset too. A snapshot that changes a tenth of the plans touches nearly every page, so
    after one run nearly every search reads the heap, and on a hot standby, which cannot mark
    index entries dead, it also walks every dead entry (docs/plan-service/scaling.md, "Why a replica
    slows during processing"). Autovacuum waits for a fifth of the table
    (``autovacuum_vacuum_scale_factor``) and looks once a minute; the process workers' duty
    (``pgenough.plans.vacuum``) looks every ``VACUUM_INTERVAL`` seconds.
    """
    cur = await conn.execute(_Q["plans_dead_rows"])
    row = await cur.fetchone()
    dead, live = (int(row[0]), int(row[1])) if row else (0, 0)
    if dead < max(VACUUM_MIN_DEAD_ROWS, dead_share * live):
        return VacuumResult(dead, vacuumed=False)
    await conn.execute(_Q["vacuum_plans"])
    log.info("vacuumed plans.plans (%d dead row versions, %d live rows)", dead, live)
    return VacuumResult(dead, vacuumed=True)


async def merge_duplicates(conn: AsyncConn, run_id: int) -> int:
    """Make each plan the snapshot lists more than once one staged row: its last listing,
    online if any listing was (``merge_duplicates`` in ``sql/store.sql``). Call before the
    seal, before ``chunk_ranges``. Returns how many listings repeated a plan listed earlier
    (0 costs one pass over the staging table and writes nothing)."""
    cur = await conn.execute(_q("count_duplicates", run_id))
    row = await cur.fetchone()
    duplicates = int(row[0]) if row else 0
    if duplicates:
        await conn.execute(_q("merge_duplicates", run_id))
    return duplicates


@dataclass
class StagingWriter:
    """Appends parsed plans to a run's staging table, one COPY per batch.

    ``write_copy`` COPYs a batch and waits for it. The fetch worker uses ``start_copy`` and
    ``flush`` instead: a batch's COPY runs while the worker parses the next one, at most one
    in flight, so the server inserts on its core while the parser holds this process's (the
    worker used to wait for each COPY, about a fifth of a 1M-plan fetch). The connection is
    the COPY's until it ends: anything else run on it waits for it (psycopg's connection lock).
    """

    run_id: int
    seq: int = 0
    _in_flight: asyncio.Task[int] | None = field(default=None, repr=False, compare=False)

    def reset(self) -> None:
        """Number from 0 again (a restarted download). Settle the COPY in flight first."""
        if self._in_flight is not None:
            raise RuntimeError("reset with a COPY in flight: flush or abandon it first")
        self.seq = 0

    async def write_copy(self, conn: AsyncConn, lines: Sequence[str]) -> int:
        """COPY plans given as lines of COPY text (``FeedParser(copy_text=True)``), numbered
        from ``seq`` on, and wait for it: one ``write`` of the whole batch, no per-row
        formatting. Returns the rows written by it and by the COPY it waited for, if any."""
        done = await self.flush()
        return done + await self._copy(conn, self._payload(lines), len(lines))

    def start_copy(self, conn: AsyncConn, lines: Sequence[str]) -> None:
        """Start the COPY of ``lines`` (as ``write_copy``) and return at once; ``flush``
        waits for it. The COPY started before must have been flushed."""
        if self._in_flight is not None:
            raise RuntimeError("a COPY is in flight: flush it first")
        payload = self._payload(lines)  # numbered now: the next batch follows these
        self._in_flight = asyncio.ensure_future(self._copy(conn, payload, len(lines)))

    async def flush(self) -> int:
        """Wait for the COPY in flight, if any: the rows it wrote (0 with none), or its
        error."""
        in_flight, self._in_flight = self._in_flight, None
        return await in_flight if in_flight is not None else 0

    async def abandon(self, cancel: bool) -> None:
        """After an error elsewhere, settle the COPY in flight, if any, ignoring its own
        error (the caller's is the one to report): wait for it to end, or, with ``cancel``
        (the fetch was cancelled or stopped), cancel it first, as a COPY awaited in the
        caller's own task would have been."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None:
            return
        if cancel:
            in_flight.cancel()
        await asyncio.wait([in_flight])  # settled, whatever it raises
        if not in_flight.cancelled() and (exc := in_flight.exception()) is not None:
            log.debug("run %d: the COPY in flight failed too: %s", self.run_id, exc)

    def _payload(self, lines: Sequence[str]) -> bytes:
        seq = self.seq
        self.seq += len(lines)
        return "".join([f"{seq + i}\t{line}\n" for i, line in enumerate(lines)]).encode()

    async def _copy(self, conn: AsyncConn, payload: bytes, rows: int) -> int:
        async with conn.cursor().copy(_q("copy_staging", self.run_id)) as copy:
            await copy.write(payload)
        return rows


async def chunk_ranges(
    conn: AsyncConn, run_id: int, pages_per_chunk: int = DEFAULT_CHUNK_PAGES
) -> list[tuple[str, str]]:
    """Page ranges ``[lo, hi)`` (as TIDs) covering the staging table."""
    cur = await conn.execute(
        _Q["staging_pages"],
        {"table": f"plans.staging_{run_id}"},
    )
    row = await cur.fetchone()
    pages = int(row[0]) if row else 0
    return [
        (f"({lo},0)", f"({min(lo + pages_per_chunk, pages)},0)")
        for lo in range(0, pages, pages_per_chunk)
    ]


@dataclass(frozen=True)
class ChunkResult:
    rows: int
    """Staged rows in the chunk."""
    written: int
    """Plans inserted or changed."""
    failed: int
    """Rows that could not be written (recorded in plans.plan_failures)."""


async def apply_chunk(
    conn: AsyncConn,
    *,
    run_id: int,
    provider: str,
    snapshot_at: datetime,
    lo: str,
    hi: str,
) -> ChunkResult:
    """Upsert one chunk inside the transaction open on ``conn``.

    A row that cannot be written (a value PostgreSQL refuses) is isolated by bisecting the
    chunk under savepoints, recorded in ``plan_failures``, and its neighbours are written.
    """
    params = {
        "run_id": run_id,
        "provider": provider,
        "snapshot_at": snapshot_at,
        "lo": lo,
        "hi": hi,
    }
    try:
        async with conn.transaction():
            return await _apply(conn, params, 0, 2**62)
    except psycopg.DatabaseError as exc:
        if isinstance(exc, psycopg.OperationalError):
            raise
        log.warning("run %d chunk %s-%s: %s; isolating the bad row(s)", run_id, lo, hi, exc)
    cur = await conn.execute(_q("chunk_seq_bounds", run_id), {"lo": lo, "hi": hi})
    bounds = await cur.fetchone()
    if bounds is None or bounds[0] is None:
        return ChunkResult(0, 0, 0)
    return await _bisect(conn, params, int(bounds[0]), int(bounds[1]))


async def _apply(conn: AsyncConn, params: dict[str, Any], seq_lo: int, seq_hi: int) -> ChunkResult:
    # plans and plan_seen grow from empty in a fresh database's first run: planned each time.
    cur = await conn.execute(
        _q("apply_rows", params["run_id"]),
        {**params, "seq_lo": seq_lo, "seq_hi": seq_hi},
        prepare=PLAN_EACH_TIME,
    )
    row = await cur.fetchone()
    assert row is not None
    return ChunkResult(rows=int(row[0]), written=int(row[1]), failed=0)


async def _bisect(conn: AsyncConn, params: dict[str, Any], seq_lo: int, seq_hi: int) -> ChunkResult:
    try:
        async with conn.transaction():
            return await _apply(conn, params, seq_lo, seq_hi)
    except psycopg.DatabaseError as exc:
        if isinstance(exc, psycopg.OperationalError):
            raise
        if seq_hi - seq_lo > 1:
            mid = (seq_lo + seq_hi) // 2
            left = await _bisect(conn, params, seq_lo, mid)
            right = await _bisect(conn, params, mid, seq_hi)
            return ChunkResult(
                left.rows + right.rows, left.written + right.written, left.failed + right.failed
            )
        await _record_failure(conn, params, seq_lo, exc)
        return ChunkResult(rows=1, written=0, failed=1)


async def _record_failure(
    conn: AsyncConn, params: dict[str, Any], seq: int, exc: psycopg.DatabaseError
) -> None:
    run_id = params["run_id"]
    cur = await conn.execute(
        _q("row_at", run_id), {"lo": params["lo"], "hi": params["hi"], "seq": seq}
    )
    ident = await cur.fetchone() or (None, None)
    error = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    await conn.execute(
        _Q["record_failure"],
        {
            "run_id": run_id,
            "seq": seq,
            "base_plan_id": ident[0],
            "plan_id": ident[1],
            "error": error[:1000],
        },
    )
    log.error("run %d: plan %s/%s (seq %d) not written: %s", run_id, ident[0], ident[1], seq, error)
