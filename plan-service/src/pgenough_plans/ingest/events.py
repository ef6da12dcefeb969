"""The plan service's notifications: ``run_changed`` whenever a run changes status.

Published in the transaction that changes the run, so a subscriber (the dashboard's live
view) hears of a change only once it is committed. ``plans_changed`` (``process.py``) says the
canonical plans moved; this one says a run moved, whatever it did to the plans.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from pgenough.core import publish
from pgenough_plans.ingest.runs import RunStatus

RUN_CHANGED = "run_changed"


async def run_changed(
    conn: psycopg.AsyncConnection[Any], run_id: int, provider: str, status: RunStatus
) -> None:
    await publish(
        conn,
        RUN_CHANGED,
        json.dumps({"run_id": run_id, "provider": provider, "status": status}),
    )
