"""The contract that keeps ``pgenough.contrib`` on the core alone names every other module of
pgenough (import-linter's forbidden contract has no "all but"): a new one must be added."""

import pkgutil
import tomllib

import pgenough
from tests.helpers.procs import ROOT

CONTRACT = "the framework integrations (contrib) import only the core of pgenough"


def test_contrib_is_forbidden_every_module_but_the_core() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = (c for c in config["tool"]["importlinter"]["contracts"] if c["name"] == CONTRACT)
    assert contract["source_modules"] == ["pgenough.contrib"]
    modules = {
        f"pgenough.{m.name}"
        for m in pkgutil.iter_modules(pgenough.__path__)
        if m.name not in {"core", "contrib", "__main__"}
    }
    assert set(contract["forbidden_modules"]) == modules
