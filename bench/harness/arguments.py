"""Command-line value parsers the benchmarks share."""

from __future__ import annotations

import argparse


def float_list(text: str) -> tuple[float, ...]:
    """``0,1,5``: numbers >= 0, sorted, each once."""
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"need numbers >= 0: {text!r}")
    return tuple(sorted(set(values)))


def int_list(text: str) -> tuple[int, ...]:
    """``1,2,4``: positive integers, sorted, each once."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need positive integers: {text!r}")
    return tuple(sorted(set(values)))
