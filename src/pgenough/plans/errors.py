"""Errors raised by the plan service.

One branch of the core's tree, grown only where callers catch::

    PgenoughError                (pgenough.core)
    └── PlanServiceError         anything the plan service raises on purpose
        └── FeedError            the snapshot document cannot be parsed: malformed,
                                 truncated or hostile (DOCTYPE, entities)

lxml exceptions are translated once, in ``feed.FeedParser``, and chained with ``from``.
"""

from __future__ import annotations

from pgenough.core import PgenoughError


class PlanServiceError(PgenoughError):
    """Root of every error the plan service raises on purpose."""


class FeedError(PlanServiceError):
    """The document cannot be parsed (malformed, truncated, hostile)."""
