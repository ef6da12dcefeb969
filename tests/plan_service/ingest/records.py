"""The slow, obvious paths the fetch worker's streaming ones are checked against: a whole
document parsed in memory, and parsed records staged row by row through psycopg's own
formatting (the worker stages COPY text)."""

from __future__ import annotations

from collections.abc import Iterable

from pgenough.core.statements import AsyncConn
from pgenough_plans.ingest.feed import DEFAULT_CHUNK_SIZE, FeedParser, PlanRecord
from pgenough_plans.ingest.store import StagingWriter, _q


def parse_bytes(data: bytes) -> tuple[list[PlanRecord], FeedParser]:
    """Parse a whole document as the fetch does, in chunks: its records and the spent parser,
    for its counters. Raises ``FeedError`` like ``FeedParser``."""
    parser = FeedParser()
    records: list[PlanRecord] = []
    for offset in range(0, len(data), DEFAULT_CHUNK_SIZE):
        records += parser.feed(data[offset : offset + DEFAULT_CHUNK_SIZE])
    records += parser.close()
    return records, parser


async def write_records(
    conn: AsyncConn, writer: StagingWriter, records: Iterable[PlanRecord]
) -> int:
    """COPY ``records`` into ``writer``'s staging table, numbered from its ``seq`` on (in one
    statement, committed with the connection's transaction)."""
    n = 0
    async with conn.cursor().copy(_q("copy_staging", writer.run_id)) as copy:
        for r in records:
            await copy.write_row(
                (
                    writer.seq,
                    r.base_plan_id,
                    r.plan_id,
                    r.title,
                    r.sell_mode,
                    r.organizer_company_id,
                    r.starts_at,
                    r.ends_at,
                    r.sell_from,
                    r.sell_to,
                    r.sold_out,
                    r.min_price,
                    r.max_price,
                )
            )
            writer.seq += 1
            n += 1
    return n
