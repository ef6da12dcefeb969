"""The core's public surface changes only on purpose."""

from __future__ import annotations

import types

import pgenough.core


def test_all_is_sorted_and_complete() -> None:
    exported = pgenough.core.__all__
    assert exported == sorted(exported)
    public = {
        name
        for name, value in vars(pgenough.core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(exported)
