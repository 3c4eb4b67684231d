"""The references analyzer: running pods whose ConfigMap, Secret or key is gone, and no guess when a kind is
unreadable."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, ObjectRef, Readable, Severity, Snapshot, diagnose
from capstan.diagnose._references import analyze_references
from capstan.restarts import RecordedChange

from .kit import configmap, container, pod, waiting


def reading_pod() -> dict[str, Any]:
    c = container(env=[{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "mode"}}}])
    p = pod(containers=[c])
    p["spec"]["volumes"] = [
        {"name": "tls", "secret": {"secretName": "web-tls"}},
        {"name": "opt", "configMap": {"name": "extras", "optional": True}},
    ]
    return p


def test_a_renamed_key_and_a_deleted_secret_are_warnings_with_the_change() -> None:
    rename = RecordedChange(
        10.0, "ConfigMap", "shop", "flags", "MODIFIED", "data.mode removed, data.MODE added"
    )
    snap = Snapshot(
        objects={"Pod": [reading_pod()], "ConfigMap": [configmap("flags", MODE="fast")], "Secret": []},
        changes=[rename],
        observed_at=20.0,
    )
    found = {f.cause: f for f in analyze_references(snap)}
    assert set(found) == {"ConfigMap/flags/mode", "Secret/web-tls/"}
    key = found["ConfigMap/flags/mode"]
    assert key.severity is Severity.WARNING and key.category is Category.CONFIGURATION
    assert "ConfigMap shop/flags has no key mode" in key.root_cause and "next restart" in key.root_cause
    assert key.changes == (rename,)
    assert ObjectRef("Secret", "shop", "web-tls") in found["Secret/web-tls/"].objects


def test_unreadable_secrets_are_a_blind_spot_not_a_missing_secret() -> None:
    snap = Snapshot(
        objects={"Pod": [reading_pod()], "ConfigMap": [configmap("flags", mode="fast")]},
        unreadable={"Secret": Readable("Secret", False, "secrets is forbidden")},
    )
    d = diagnose(snap)
    assert d.findings == ()
    assert [(b.analyzer, b.kind) for b in d.blind] == [("references", "Secret")]


def test_pods_that_do_not_run_are_left_to_the_pods_analyzer() -> None:
    p = reading_pod()
    p["status"]["containerStatuses"] = [
        waiting("app", "CreateContainerConfigError", 'configmap "flags" not found')
    ]
    assert analyze_references(Snapshot(objects={"Pod": [p], "ConfigMap": [], "Secret": []})) == []
