"""The Grafana dashboard only queries metrics pgenough exports, so it cannot drift silently."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY

from tests.helpers.procs import ROOT

DASHBOARD = ROOT / "plan-service" / "deploy" / "grafana" / "pgenough.json"
# Together they import every module that defines a pgenough_ metric.
METRIC_MODULES = (
    "pgenough.core.metrics",
    "pgenough_plans.ingest.metrics",
    "pgenough_plans.api.app",
)
SUFFIXES = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "gauge": [""]}


def exported_series() -> set[str]:
    """Names as Prometheus stores them: counters with _total, histograms as three series."""
    for module in METRIC_MODULES:
        importlib.import_module(module)
    names: set[str] = set()
    for family in REGISTRY.collect():
        if family.name.startswith("pgenough_"):
            names.update(family.name + s for s in SUFFIXES[family.type])
    return names


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def test_the_dashboard_is_an_importable_grafana_document() -> None:
    doc = json.loads(DASHBOARD.read_text("utf-8"))
    assert doc["schemaVersion"] >= 39
    assert [i["name"] for i in doc["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [p["id"] for p in panels(doc["panels"])]
    assert len(ids) == len(set(ids))
    for panel in panels(doc["panels"]):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
            assert panel["targets"], panel["title"]


def test_every_queried_metric_is_exported() -> None:
    doc = json.loads(DASHBOARD.read_text("utf-8"))
    exprs = [t["expr"] for p in panels(doc["panels"]) for t in p.get("targets", [])]
    queried = {m for e in exprs for m in re.findall(r"\bpgenough_[a-z0-9_]+", e)}
    assert queried, "no PromQL found"
    assert queried - exported_series() == set()
    # Each area of the brief has a panel.
    for needle in (
        "pgenough_plans_fetches_total",
        "pgenough_plans_fetch_duration_seconds_bucket",
        "pgenough_plans_written_total",
        "pgenough_jobs_dead_total",
        "pgenough_jobs_reclaimed_total",
        "pgenough_api_bulkhead_rejections_total",
        "pgenough_api_cache_hits_total",
        "pgenough_queue_oldest_ready_age_seconds",
        "pgenough_db_pool_connections_in_use",
        "pgenough_api_request_duration_seconds_bucket",
    ):
        assert needle in queried, needle
