"""A job's states: the one spelling of the ``pgenough.job_state`` SQL enum in Python.

Every other spelling (``JOB_STATES``, ``QueueStats``'s counts, the depth gauges' labels, the
states a command or a page accepts) is derived from ``JobState`` here;
tests/core/test_job_states.py checks it against the enum in the database.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class JobState(StrEnum):
    """The ``pgenough.job_state`` enum (``migrations/0001_core.sql``). A completed job has
    no state: its row is deleted by the statement that completes it."""

    READY = "ready"
    """Waiting to run: now, or at its ``run_at`` (then "scheduled" in ``QueueStats``)."""
    RUNNING = "running"
    """Claimed by a worker, under a lease."""
    DEAD = "dead"
    """Attempts spent, or the handler gave up: kept for operators, retryable."""
    CANCELLED = "cancelled"
    """Cancelled by an operator: kept until the cleaner removes it, retryable until then."""


JOB_STATES: Final[tuple[JobState, ...]] = tuple(JobState)
"""Every job state, in the SQL enum's order (they compare equal to their strings)."""

SCHEDULED: Final = "scheduled"
"""Not a state: the ready jobs whose ``run_at`` is still to come, which ``QueueStats``
counts apart from the ready ones that may run now."""

QUEUE_DEPTHS: Final[tuple[str, ...]] = (
    JobState.READY.value,
    SCHEDULED,
    JobState.RUNNING.value,
    JobState.DEAD.value,
    JobState.CANCELLED.value,
)
"""The counts of ``QueueStats``, in its field order: the states, the ready split in two."""


def depth_state(depth: str) -> JobState:
    """The state a count of ``QUEUE_DEPTHS`` is of (the scheduled are ready)."""
    return JobState.READY if depth == SCHEDULED else JobState(depth)


def parse_job_state(value: str) -> JobState:
    """``value`` as a ``JobState``, or a ``ValueError`` naming the states: what every caller
    that takes a state from a user (``list_jobs``, the CLI, the dashboard) checks it with."""
    try:
        return JobState(value)
    except ValueError:
        raise ValueError(f"state must be one of {', '.join(JOB_STATES)}") from None
