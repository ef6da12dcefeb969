"""The metrics catalogue (docs/operations.md, "Metrics") lists exactly the metrics pgenough
exports."""

from __future__ import annotations

import re

from tests.helpers.procs import ROOT
from tests.plan_service.test_deploy_grafana import exported_series

CATALOGUE = ROOT / "docs" / "operations.md"


def catalogued() -> set[str]:
    """The metric of each table row (its first cell)."""
    rows = re.findall(r"^\| `(pgenough_[a-z0-9_]+)` \|", CATALOGUE.read_text("utf-8"), re.M)
    assert len(rows) == len(set(rows)), "a metric is listed twice"
    return set(rows)


def exposed_names() -> set[str]:
    """A histogram is catalogued under its base name, counters with _total."""
    names: set[str] = set()
    for name in exported_series():
        if name.endswith(("_bucket", "_sum")):
            continue
        names.add(name.removesuffix("_count") if name.endswith("_count") else name)
    return names


def test_every_exported_metric_is_catalogued_and_nothing_else() -> None:
    assert exposed_names() - catalogued() == set(), "exported but not in the catalogue"
    assert catalogued() - exposed_names() == set(), "catalogued but not exported"
