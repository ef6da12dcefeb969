"""The library's public surface changes only on purpose: each public module's ``__all__`` is
sorted and names what it has (the plan service may import nothing else: the import-linter
contracts of ``make lint``); the core's is also complete."""

from __future__ import annotations

import importlib
import types

import pytest

import pgenough.core
from pgenough.settings import Settings

PUBLIC_MODULES = [
    "pgenough",
    "pgenough.cli",
    "pgenough.core",
    "pgenough.core.admin",
    "pgenough.core.db",
    "pgenough.core.errors",
    "pgenough.core.locks",
    "pgenough.core.logcontext",
    "pgenough.core.maintenance",
    "pgenough.core.migrations",
    "pgenough.core.periodic",
    "pgenough.core.pubsub",
    "pgenough.core.queue",
    "pgenough.core.retry",
    "pgenough.core.schedule",
    "pgenough.core.service",
    "pgenough.core.tasks",
    "pgenough.core.worker",
    "pgenough.dashboard",
    "pgenough.graceful",
    "pgenough.httpserver",
    "pgenough.render",
    "pgenough.settings",
]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_sorted_and_names_what_the_module_has(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert exported == sorted(exported)
    assert [n for n in exported if not hasattr(module, n)] == []


def test_the_core_exports_every_public_name_it_has() -> None:
    public = {
        name
        for name, value in vars(pgenough.core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(pgenough.core.__all__)


def test_the_public_modules_are_the_ones_the_plan_service_may_import() -> None:
    """pyproject.toml's public_names contract lists the same modules."""
    import tomllib

    from tests.helpers.procs import ROOT

    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (names,) = [c for c in contracts if c["type"] == "public_names"]
    assert sorted(names["public_modules"]) == PUBLIC_MODULES


def test_the_settings_are_pgenoughs_only() -> None:
    """Nothing of the plan service (providers, fetching, ingestion, its /search API) is a
    setting of the library: those are the plan service's (``PlanSettings``)."""
    plan_words = ("provider", "fetch", "ingest", "api_", "search")
    assert [f for f in Settings.model_fields if any(w in f for w in plan_words)] == []
