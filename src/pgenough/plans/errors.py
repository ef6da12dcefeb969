"""Errors raised by the plan service.

One branch of the core's tree, grown only where callers catch::

    PgenoughError                (pgenough.core)
    └── PlanServiceError         anything the plan service raises on purpose
        ├── FeedError            the snapshot document cannot be parsed: malformed,
        │                        truncated or hostile (DOCTYPE, entities)
        ├── ProviderError        the provider did not deliver: HTTP status, timeouts,
        │                        transport errors (after the retries it deserves)
        └── RunLost              the run was failed by someone else (the stale-run reaper)
                                 while this fetcher was still streaming it

lxml exceptions are translated once, in ``feed.FeedParser``; httpx exceptions once, in
``provider.fetch``; both chained with ``from``.
"""

from __future__ import annotations

from pgenough.core import PgenoughError


class PlanServiceError(PgenoughError):
    """Root of every error the plan service raises on purpose."""


class FeedError(PlanServiceError):
    """The document cannot be parsed (malformed, truncated, hostile)."""


class ProviderError(PlanServiceError):
    """The provider could not deliver a snapshot: a status retrying cannot fix, or retries
    spent on timeouts, transport errors or 429/5xx. ``status`` is the last HTTP status, if any.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RunLost(PlanServiceError):
    """The run is no longer RUNNING: the stale-run reaper failed it (and dropped its staging)
    while this fetcher still streamed it, so this fetch is abandoned."""

    def __init__(self, run_id: int) -> None:
        super().__init__(
            f"run {run_id} was failed by the stale-run reaper while it was still streaming;"
            " this fetch is abandoned (a heartbeat came too late)"
        )
        self.run_id = run_id
