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


def test_an_xid_condition_is_a_gpu_fault_and_other_detector_conditions_are_node_warnings() -> None:
    xid = {
        "type": "GpuXidError",
        "status": "True",
        "reason": "XidCritical",
        "message": "Xid 79: GPU has fallen off the bus",
    }
    kernel = {
        "type": "KernelDeadlock",
        "status": "True",
        "reason": "DockerHung",
        "message": "task docker blocked",
    }
    cleared = {"type": "FrequentKubeletRestart", "status": "False", "reason": "NoFrequentKubeletRestart"}
    n = node("gpu-2", gpus=8, conditions=[xid, kernel, cleared])
    found = {f.cause: f for f in analyze_nodes(Snapshot(objects={"Node": [n], "Pod": [pod(node="gpu-2")]}))}
    assert set(found) == {"condition/GpuXidError", "condition/KernelDeadlock"}
    g = found["condition/GpuXidError"]
    assert g.category is Category.GPU and g.severity is Severity.CRITICAL and "Xid 79" in g.root_cause
    assert ObjectRef("Pod", "shop", "web-7d9f8-abcde") in g.objects
    assert found["condition/KernelDeadlock"].category is Category.NODE
