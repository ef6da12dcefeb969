"""An independent model of DESIGN §4, to compare the database against.

It replays snapshots in the order they were processed, each with the time its fetch started,
and says what ``plans.plans`` must then contain: per plan, the content of its last listing
in the newest snapshot that lists it; ever-online if any listing in any snapshot was online.
Ends, prices and sold_out are whatever the record says, None included.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pgenough_plans.ingest.feed import PlanRecord
from pgenough_plans.ingest.store import plan_uuid

COLUMNS = (
    "provider, base_plan_id, plan_id, id, title, sell_mode, organizer_company_id, starts_at,"
    " ends_at, sell_from, sell_to, sold_out, min_price, max_price, ever_online"
)
DUMP = (
    f"SELECT {COLUMNS} FROM plans.plans"
    ' ORDER BY provider COLLATE "C", base_plan_id COLLATE "C", plan_id COLLATE "C"'
)


@dataclass
class _State:
    listed: tuple[datetime, int]
    """The snapshot's time and the position of the listing that gave the content."""
    record: PlanRecord
    ever_online: bool


def expected_rows(
    provider: str, processed: Iterable[tuple[datetime, Iterable[PlanRecord]]]
) -> list[tuple[Any, ...]]:
    """The rows of ``DUMP`` after processing ``(snapshot time, records)`` in this order;
    ``records`` are a snapshot's records in document order (all of them, as staged)."""
    state: dict[tuple[str, str], _State] = {}
    for at, records in processed:
        for position, r in enumerate(records):
            key = (r.base_plan_id, r.plan_id)
            online = r.sell_mode == "online"
            current = state.get(key)
            if current is None:
                state[key] = _State((at, position), r, online)
            elif (at, position) > current.listed:  # a newer snapshot, or a later listing
                state[key] = _State((at, position), r, current.ever_online or online)
            else:
                current.ever_online = current.ever_online or online
    rows = []
    for (bp, p), s in sorted(state.items()):
        r = s.record
        rows.append(
            (
                provider,
                bp,
                p,
                plan_uuid(provider, bp, p),
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
                s.ever_online,
            )
        )
    return rows
