"""Errors raised by the plan service.

One branch of the core's tree, grown only where callers catch::

    PgenoughError                (pgenough.core)
    └── PlanServiceError         anything the plan service raises on purpose
        ├── FeedError            the snapshot document cannot be parsed: malformed,
        │                        truncated or hostile (DOCTYPE, entities)
        └── ProviderError        the provider did not deliver: HTTP status, timeouts,
                                 transport errors (after the retries it deserves)

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
