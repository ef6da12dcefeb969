"""Pydantic models of the responses, for the OpenAPI document only: ``/search`` bodies are
built by PostgreSQL and sent as bytes, never re-serialised through these."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Literal

from pydantic import BaseModel, Field

from pgenough_plans.api.errors import ErrorCode

TIME_PATTERN = r"^[0-2][0-9]:[0-5][0-9]:[0-6][0-9]$"


class Event(BaseModel):
    id: uuid.UUID = Field(description="Stable id of the plan (provider, base plan, plan).")
    title: str
    start_date: dt.date = Field(description="UTC, YYYY-MM-DD.")
    start_time: str = Field(pattern=TIME_PATTERN, description="UTC, HH:MM:SS.")
    end_date: dt.date | None = Field(description="UTC, YYYY-MM-DD; null for a plan without an end.")
    end_time: str | None = Field(
        pattern=TIME_PATTERN, description="UTC, HH:MM:SS; null for a plan without an end."
    )
    min_price: float | None = Field(
        description="Lowest zone price, exact decimal as a JSON number; null when no zone has a"
        " price (then max_price is null too)."
    )
    max_price: float | None = Field(
        description="Highest zone price, exact decimal as a JSON number; null when no zone has"
        " a price."
    )


class EventList(BaseModel):
    events: list[Event]


class SearchResponse(BaseModel):
    data: EventList
    error: None


class ErrorBody(BaseModel):
    code: ErrorCode
    message: str


class ErrorResponse(BaseModel):
    data: None
    error: ErrorBody


class OneReplicaStatus(BaseModel):
    replica: str
    """Its name in metrics: host:port (never a password), #index when two are alike."""
    up: bool
    """Its last probe answered."""
    within: bool
    """Up and within PGENOUGH_API_MAX_REPLICA_LAG: reads may go there."""
    lag_seconds: float | None
    """At most how far it is behind; null while it does not answer."""


class ReplicaStatus(BaseModel):
    reading: Literal["replica", "primary"]
    """Where /search and the dashboard's pages read now (a replica while one is within)."""
    lag_seconds: float | None
    """The least lag of any read replica; null while none answers."""
    replicas: list[OneReplicaStatus]
    """Each replica of PGENOUGH_API_READ_URL, in its order."""


class Status(BaseModel):
    status: Literal["live", "ready"]
    replica: ReplicaStatus | None = None
    """/health/ready only, with PGENOUGH_API_READ_URL set."""


class StatusResponse(BaseModel):
    data: Status
    error: None
