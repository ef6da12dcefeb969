"""Command-line value parsers the benchmarks share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)


def _numbers(text: str, convert: Callable[[str], N], what: str, least: N) -> tuple[N, ...]:
    try:
        values = tuple(convert(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of {what}: {text!r}") from None
    if not values or min(values) < least:
        raise argparse.ArgumentTypeError(f"need {what} >= {least}: {text!r}")
    return tuple(sorted(set(values)))


def float_list(text: str) -> tuple[float, ...]:
    """``0,1,5``: numbers >= 0, sorted, each once."""
    return _numbers(text, float, "numbers", 0.0)


def int_list(text: str) -> tuple[int, ...]:
    """``1,2,4``: positive integers, sorted, each once."""
    return _numbers(text, int, "integers", 1)
