"""Errors raised by the plan service.

One branch of the core's tree, grown only where callers catch::

    PgenoughError                (pgenough.core)
    └── PlanServiceError         anything the plan service raises on purpose
        ├── FeedError            the snapshot document cannot be parsed: malformed,
        │                        truncated, hostile (DOCTYPE, entities) or nested too deep
        ├── ProviderError        the provider did not deliver: an HTTP status, a refused
        │                        redirect, a body that does not decode, timeouts, a stream
        │                        too slow, the run's deadline (``kind`` says which)
        └── RunLost              the run was failed by someone else (the stale-run reaper)
                                 while this fetcher was still streaming it

lxml exceptions are translated once, in ``feed.FeedParser``; httpx exceptions once, in
``provider.fetch``; both chained with ``from``.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from pgenough.core import PgenoughError

ProviderFailure: TypeAlias = Literal[
    "provider", "transport", "redirect", "decoding", "url", "deadline"
]
"""What kind of provider failure a ``ProviderError`` is; also its label value in the metric
``pgenough_plans_runs_failed_total{reason}``:

- ``provider``: an HTTP status retrying cannot fix, or 429/5xx until the attempts ran out;
- ``transport``: connection failures, timeouts, resets, a body slower than the floor, once
  the attempts ran out;
- ``redirect``: a redirect loop, or a redirect refused (not http(s), another host, invalid);
- ``decoding``: a ``Content-Encoding`` that does not decode, is truncated or unsupported;
- ``url``: a URL that cannot be requested at all;
- ``deadline``: the run's overall deadline passed.
"""


class PlanServiceError(PgenoughError):
    """Root of every error the plan service raises on purpose."""


class FeedError(PlanServiceError):
    """The document cannot be parsed (malformed, truncated, hostile)."""


class ProviderError(PlanServiceError):
    """The provider could not deliver a snapshot. ``status`` is the last HTTP status, if any;
    ``kind`` classifies the failure (see ``ProviderFailure``)."""

    def __init__(
        self, message: str, *, status: int | None = None, kind: ProviderFailure = "transport"
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind: ProviderFailure = kind


class RunLost(PlanServiceError):
    """The run is no longer RUNNING: the stale-run reaper failed it (and dropped its staging)
    while this fetcher still streamed it, so this fetch is abandoned."""

    def __init__(self, run_id: int) -> None:
        super().__init__(
            f"run {run_id} was failed by the stale-run reaper while it was still streaming;"
            " this fetch is abandoned (a heartbeat came too late)"
        )
        self.run_id = run_id
