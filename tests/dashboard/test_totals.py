"""The jobs page's totals per state (``overview.state_totals``): of one queue or all, the
scheduled among the ready, as ``list_jobs(state="ready")`` lists them."""

from __future__ import annotations

from pgenough.core.admin import QueueStats
from pgenough.dashboard.overview import state_totals

COUNTS = [QueueStats("mail", 0, 0, 0, 1, 0, 0.0), QueueStats("ops", 2, 1, 0, 0, 1, 3.5)]


def test_totals_of_every_queue_or_one() -> None:
    assert state_totals(COUNTS) == {"ready": 3, "running": 0, "dead": 1, "cancelled": 1}
    assert state_totals(COUNTS, "mail") == {"ready": 0, "running": 0, "dead": 1, "cancelled": 0}
    assert state_totals(COUNTS, "nowhere") == dict.fromkeys(
        ("ready", "running", "dead", "cancelled"), 0
    )
