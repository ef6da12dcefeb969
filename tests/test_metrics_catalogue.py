"""Each product's metrics catalogue lists exactly the metrics it exports: the library's
(docs/operations/metrics.md) those of the ``pgenough`` package, the plan service's
(docs/plan-service/metrics.md) those its own modules add.

Each set is read from prometheus-client's default registry in a process of its own, after
importing the modules in question, so neither product's imports can lend the other a metric.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.procs import ROOT

LIBRARY_CATALOGUE = ROOT / "docs" / "operations" / "metrics.md"
PLANS_CATALOGUE = ROOT / "docs" / "plan-service" / "metrics.md"
PLAN_MODULES = ("pgenough_plans.ingest.metrics", "pgenough_plans.api.app")
"""Together they import every module of the plan service that defines a metric."""

_PROBE = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys

    import pgenough
    from prometheus_client import REGISTRY

    # Every module of the library (its Django app needs a configured Django: it defines no
    # metric of its own), then the modules named on the command line.
    for info in pkgutil.walk_packages(pgenough.__path__, "pgenough."):
        if not info.name.startswith(("pgenough.contrib", "pgenough.__main__")):
            importlib.import_module(info.name)
    for name in sys.argv[1:]:
        importlib.import_module(name)
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("pgenough_"):
            # As catalogued: a counter with _total, a histogram under its base name.
            names.add(family.name + "_total" if family.type == "counter" else family.name)
    print(json.dumps(sorted(names)))
    """
)


def exported(*modules: str) -> set[str]:
    """The pgenough_ metrics registered once the library and ``modules`` are imported."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def catalogued(path: Path) -> set[str]:
    """The metric of each table row (its first cell)."""
    rows = re.findall(r"^\| `(pgenough_[a-z0-9_]+)` \|", path.read_text("utf-8"), re.M)
    assert len(rows) == len(set(rows)), f"{path.name}: a metric is listed twice"
    return set(rows)


@pytest.fixture(scope="module")
def library() -> set[str]:
    return exported()


def test_the_library_catalogue_is_the_librarys_metrics(library: set[str]) -> None:
    listed = catalogued(LIBRARY_CATALOGUE)
    assert library, "the library registered no metric"
    assert library - listed == set(), "exported by the library but not in its catalogue"
    assert listed - library == set(), "in the library's catalogue but not exported by it"


def test_the_plan_service_catalogue_is_what_it_adds(library: set[str]) -> None:
    added = exported(*PLAN_MODULES) - library
    listed = catalogued(PLANS_CATALOGUE)
    assert added, "the plan service registered no metric of its own"
    assert added - listed == set(), "exported by the plan service but not in its catalogue"
    assert listed - added == set(), "in the plan service's catalogue but not its own metric"
