"""The nodes analyzer: NotReady, pressure conditions, GPUs allocatable below capacity."""

from __future__ import annotations

from capstan.diagnose import Category, ObjectRef, Severity, Snapshot
from capstan.diagnose._nodes import analyze_nodes

from .kit import node, pod


def test_not_ready_node_lists_its_pods() -> None:
    n = node("gpu-3", ready="False")
    n["status"]["conditions"][0]["message"] = (
        "container runtime network not ready: cni plugin not initialized"
    )
    (f,) = analyze_nodes(Snapshot(objects={"Node": [n], "Pod": [pod(node="gpu-3")]}))
    assert f.severity is Severity.CRITICAL and f.category is Category.NODE
    assert "cni plugin not initialized" in f.root_cause
    assert ObjectRef("Pod", "shop", "web-7d9f8-abcde") in f.objects


def test_pressure_condition() -> None:
    n = node("a", conditions=[{"type": "DiskPressure", "status": "True", "message": "ephemeral storage low"}])
    (f,) = analyze_nodes(Snapshot(objects={"Node": [n]}))
    assert f.cause == "DiskPressure" and f.severity is Severity.WARNING


def test_gpu_allocatable_below_capacity() -> None:
    n = node("gpu-1", gpus=8, allocatable_gpus=6)
    (f,) = analyze_nodes(Snapshot(objects={"Node": [n]}))
    assert f.category is Category.GPU and "offers 6 of its 8 nvidia.com/gpu" in f.root_cause


def test_healthy_node_says_nothing() -> None:
    assert analyze_nodes(Snapshot(objects={"Node": [node("a", gpus=8)]})) == []
