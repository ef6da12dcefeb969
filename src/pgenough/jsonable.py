"""Values as JSON-ready data: the one conversion behind ``--json`` on the command line and
the dashboard's JSON, for the core's records (jobs, queue counts) and the plan service's read
model (``plans.inspect``) alike. It imports neither, so the core-only CLI has it too."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from decimal import Decimal
from typing import Any


def as_json(value: Any) -> Any:
    """``value`` (dataclasses, lists, datetimes, decimals) as JSON-ready data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value
