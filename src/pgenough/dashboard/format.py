"""How the dashboard writes numbers, ages and instants: plain functions, used as Jinja filters
(the live view's JavaScript writes them the same way)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final


def count(value: int | float | None) -> str:
    """``12,345``; an em dash for nothing."""
    if value is None:
        return "—"
    return f"{value:,.0f}"


def seconds(value: float | None) -> str:
    """A duration or an age, to the unit that matters: ``850 ms``, ``42 s``, ``3 min 5 s``,
    ``2 h 10 min``, ``3 d 4 h``."""
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def rate(value: float | None) -> str:
    """Per second: ``1,234/s``."""
    if value is None:
        return "—"
    return f"{value:,.0f}/s" if value >= 10 else f"{value:.1f}/s"


def instant(value: datetime | str | None) -> str:
    """``2025-12-01 14:03:07 UTC``: to the second, always in UTC."""
    if value is None:
        return "—"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(value: datetime | None, now: datetime) -> str:
    """``value`` from ``now``: ``in 12 s`` ahead, ``3 min 5 s ago`` behind, ``now`` within
    half a second either way."""
    if value is None:
        return "—"
    delta = (value - now).total_seconds()
    if abs(delta) < 0.5:
        return "now"
    return f"in {seconds(delta)}" if delta > 0 else f"{seconds(-delta)} ago"


_UNITS: Final = ((86400, "d"), (3600, "h"), (60, "min"))
_FIVE_FIELDS: Final = re.compile(r"(\d{1,2}) (\d{1,2}|\*) \* \* \*")


def schedule(spec: str) -> str:
    """A periodic task's schedule (``PeriodicInfo.schedule``) for people: ``every 60.0s`` is
    ``every 1 min``; ``cron 30 2 * * * Europe/Berlin`` is ``daily at 02:30 (Europe/Berlin)``,
    ``cron 5 * * * * UTC`` is ``hourly at :05 (UTC)``, any other cron expression is itself with
    its zone; any other text as is."""
    kind, _, rest = spec.partition(" ")
    if kind == "every" and rest.endswith("s"):
        try:
            every = float(rest[:-1])
        except ValueError:
            return spec
        for unit, name in _UNITS:
            if every >= unit and every % unit == 0:
                return f"every {every / unit:g} {name}"
        return f"every {every:g} s"
    if kind == "cron":
        expr, _, zone = rest.rpartition(" ")
        if not expr:
            return spec
        daily = _FIVE_FIELDS.fullmatch(expr)
        if daily and daily.group(2) != "*":
            return f"daily at {int(daily.group(2)):02d}:{int(daily.group(1)):02d} ({zone})"
        if daily:
            return f"hourly at :{int(daily.group(1)):02d} ({zone})"
        if expr == "* * * * *":
            return f"every minute ({zone})"
        return f"cron {expr} ({zone})"
    return spec


def pretty_json(value: Any) -> str:
    """A payload as an operator reads it: indented, keys in order, non-ASCII as is."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def status_class(value: Any) -> str:
    """The CSS class that colours a state (a job's, or an extension's: a run's status)."""
    return f"st-{str(value).lower()}"


def span(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from ``start`` to ``end``; None unless both happened."""
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


FILTERS: dict[str, Callable[..., Any]] = {
    "count": count,
    "seconds": seconds,
    "rate": rate,
    "instant": instant,
    "status_class": status_class,
    "span": span,
    "relative": relative,
    "pretty_json": pretty_json,
    "schedule": schedule,
}
