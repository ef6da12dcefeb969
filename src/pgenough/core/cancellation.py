"""Cancelling a running job: the operator's cancel (``discard_job``, ``pgenough discard``, the
dashboard, the Django admin) reaches its handler.

The cancel itself is the row's state (``cancelled``, in the operator's transaction): from then
on the job's completion finds no claim, so nothing of it commits, and it is never retried. So
that the handler stops too, the same statement notifies ``CANCEL_CHANNEL`` with the job's id;
the worker holding it (its listener, or its heartbeat when the listener is down) cancels an
``async`` handler at its next await, and marks the job cancelled in this process, which a plain
function sees through its ``TaskContext`` (``ctx.cancelled``, ``ctx.raise_if_cancelled()``):
Python cannot interrupt a thread.
"""

from __future__ import annotations

from typing import Final

from pgenough.core.errors import JobCancelled

CANCEL_CHANNEL: Final = "pgenough_cancel"
"""Notified with a job's id when an operator cancels it (workers listen here)."""

cancelled_here: set[int] = set()
"""Ids of the jobs running in this process whose cancel has reached it, until their handler
ends (the worker adds and removes them)."""


def is_cancelled(job_id: int) -> bool:
    """Whether the job ``job_id``, running in this process, was cancelled."""
    return job_id in cancelled_here


def raise_if_cancelled(job_id: int) -> None:
    """Raise ``JobCancelled`` if the job ``job_id``, running in this process, was cancelled."""
    if job_id in cancelled_here:
        raise JobCancelled(job_id)
