"""The chart's Grafana dashboard (deploy/helm/capstan/files/dashboards/capstan.json) queries only series the
recorder, the notifier, the gateway and the capacity controller export, grouped only by labels those series have: a
renamed metric or label fails here, not silently as an empty panel; and each series they export is on a panel."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from capstan.capacity.live import ControllerMetrics
from capstan.config import load_model
from capstan.notify import NotifyMetrics
from capstan.route import RouteConfig, Router, upstream_for
from capstan.store import HistoryMetrics

pytestmark = pytest.mark.unit

DASHBOARD = (
    Path(__file__).resolve().parents[3]
    / "deploy"
    / "helm"
    / "capstan"
    / "files"
    / "dashboards"
    / "capstan.json"
)
# added by Prometheus to every scraped series (the ServiceMonitor's target labels), and the histogram's bucket bound
SCRAPE_LABELS = {"namespace", "pod", "service", "job", "instance", "le"}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> dict[str, set[str]]:
    """Every sample name the components' metrics export, with its labels (read from the metric objects: a labelled
    family shows no labels until it has a child). The gateway's are those its app object serves on /metrics (its
    metrics class is not public: the router builds it)."""
    from prometheus_client.metrics import MetricWrapperBase

    registry = CollectorRegistry()
    route = load_model(RouteConfig, {}, "test")
    gateway = Router(route, upstream=upstream_for(route.proxy)).metrics  # nothing connected, nothing started
    out: dict[str, set[str]] = {}
    for metrics in (HistoryMetrics(registry), NotifyMetrics(registry), ControllerMetrics(registry), gateway):
        for metric in vars(metrics).values():
            if isinstance(metric, MetricWrapperBase):
                name = metric._name  # without the counter's _total
                for suffix in SUFFIXES[str(metric._type)]:
                    out[name + suffix] = set(metric._labelnames)
    return out


def expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def test_every_query_names_an_exported_series_and_groups_by_its_labels() -> None:
    series = exported()
    assert len(expressions()) >= 10
    for expr in expressions():
        names = re.findall(r"\b(capstan_[a-z_]+)\b", expr)
        assert names, expr
        for name in names:
            assert name in series, f"{name} is not exported (by {sorted(series)})"
        known = set().union(*(series[n] for n in names)) | SCRAPE_LABELS
        for group in re.findall(r"\bby \(([^)]*)\)", expr):
            labels = {label.strip() for label in group.split(",")}
            assert labels <= known, f"{expr}: {labels - known} is not a label of {names}"


def test_every_exported_series_of_the_components_is_on_the_dashboard() -> None:
    shown = {n for e in expressions() for n in re.findall(r"\b(capstan_[a-z_]+)\b", e)}
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in exported()}
    missing = {f for f in families if not any(s.startswith(f) for s in shown)}
    assert not missing, f"series no panel shows: {sorted(missing)}"
