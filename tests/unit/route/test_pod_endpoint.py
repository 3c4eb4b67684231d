"""Which endpoint a serving pod stands for (:func:`capstan.route._discovery.pod_endpoint`, the pure core of
Kubernetes discovery; the informer that feeds it runs on the real control plane in
tests/integration/route/test_discovery.py)."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.route import KubernetesDiscoveryConfig
from capstan.route._discovery import pod_endpoint

pytestmark = pytest.mark.unit


def test_a_pod_is_an_endpoint_only_while_running_and_ready() -> None:
    cfg = KubernetesDiscoveryConfig(namespace="ml", selector="app=llm", port=8001, models=["m"])
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ml", "labels": {"capstan.io/role": "decode"}},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.7",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    ep = pod_endpoint(pod, cfg)
    assert ep is not None and (ep.name, ep.url, ep.models, ep.role) == (
        "ml/p",
        "http://10.0.0.7:8001",
        ("m",),
        "decode",
    )
    assert pod_endpoint({**pod, "status": {**pod["status"], "conditions": []}}, cfg) is None
    assert pod_endpoint({**pod, "status": {**pod["status"], "phase": "Pending"}}, cfg) is None
    gone = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-11-30T00:00:00Z"}}
    assert pod_endpoint(gone, cfg) is None
    v6 = pod_endpoint({**pod, "status": {**pod["status"], "podIP": "fd00::7"}}, cfg)
    assert v6 is not None and v6.url == "http://[fd00::7]:8001"
    assert ep.kv_events is None  # no publisher unless configured


def test_a_pods_kv_event_publisher_comes_from_its_annotation_or_the_configured_port() -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ml"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.7",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    by_port = KubernetesDiscoveryConfig(namespace="ml", selector="app=llm", kv_events_port=5557)
    ep = pod_endpoint(pod, by_port)
    assert ep is not None and ep.kv_events == "tcp://10.0.0.7:5557"
    named = {**pod, "metadata": {**pod["metadata"], "annotations": {"capstan.io/kv-events": "tcp://kv:9"}}}
    ep = pod_endpoint(named, by_port)
    assert ep is not None and ep.kv_events == "tcp://kv:9"
