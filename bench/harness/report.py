"""How the benchmarks print their figures: Markdown tables, rates, ratios, milliseconds,
percentiles, figures rounded in the reader's disfavour (``down``, ``up``) and targets met or
not."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile_99(samples: Sequence[float]) -> float:
    """The 99th percentile (of at least two samples)."""
    return statistics.quantiles(samples, n=100, method="inclusive")[98]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x"


def fmt_ms(x: float) -> str:
    return f"{x * 1000:.2f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def percentile(samples: Sequence[float], q: int) -> float:
    """The ``q``th percentile; the one sample of one, NaN of none."""
    if len(samples) < 2:
        return samples[0] if samples else float("nan")
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def down(value: float, digits: int = 0) -> str:
    """A higher-is-better figure for display: truncated, never rounded up."""
    scale = 10**digits
    return f"{math.floor(value * scale) / scale:,.{digits}f}"


def up(value: float, digits: int = 1) -> str:
    """A lower-is-better figure (memory, growth) for display: rounded up, never down."""
    scale = 10**digits
    return f"{math.ceil(value * scale) / scale:,.{digits}f}"


def print_target(what: str, met: bool, measured: str) -> bool:
    """One target printed, met or not, with what was measured; whether it was met."""
    print(f"  {what}: {'met' if met else 'NOT met'} ({measured})")
    return met
