"""The scheduling analyzer: FailedScheduling messages parsed into per-reason node counts, the binding constraint
named, GPU shortage counted by GPU model, gates, and a decoy warning that must not become the root."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.diagnose import Category, ObjectRef, Severity, Snapshot, Source, diagnose
from capstan.diagnose._scheduling import analyze_scheduling, parse_failed_scheduling

from .kit import container, event, node, pod

GPU_MSG = (
    "0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint "
    "{dedicated: infra}. preemption: 0/12 nodes are available: 4 No preemption victims found for incoming pod, "
    "8 Preemption is not helpful for scheduling."
)


def pending(**extra: Any) -> dict[str, Any]:
    return pod("train-0", node=None, phase="Pending", statuses=[], owner=("Job", "train"), **extra)


def gpu_container(n: int) -> dict[str, Any]:
    return container("trainer", resources={"limits": {"nvidia.com/gpu": str(n)}})


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (GPU_MSG, [(4, "resource", "nvidia.com/gpu"), (8, "taint", None)]),
        (
            "0/5 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
            "2 node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu.",
            [(1, "taint", None), (2, "selector", None), (2, "resource", "cpu")],
        ),
        (
            "0/3 nodes are available: 3 node(s) had taint {gpu: true}, that the pod didn't tolerate.",
            [(3, "taint", None)],
        ),
        (
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes "
            "are available: 3 Preemption is not helpful for scheduling.",
            [(None, "storage", None)],
        ),
        (
            "0/4 nodes are available: 2 node(s) didn't match pod anti-affinity rules, 2 node(s) were unschedulable.",
            [(2, "anti-affinity", None), (2, "unschedulable", None)],
        ),
        (  # kube-scheduler 1.34+ (DRA) puts a sentence between the clauses and the preemption verdict
            "0/5 nodes are available: 3 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
            "{nvidia.com/gpu: present}. no new claims to deallocate, preemption: 0/5 nodes are available: "
            "5 No preemption victims found for incoming pod.",
            [(3, "resource", "nvidia.com/gpu"), (2, "taint", None)],
        ),
    ],
)
def test_parse_failed_scheduling(message: str, expected: list[tuple[int | None, str, str | None]]) -> None:
    parsed = parse_failed_scheduling(message)
    assert parsed is not None
    assert [(r.count, r.kind, r.resource) for r in parsed.reasons] == expected


def test_parse_rejects_other_messages() -> None:
    assert parse_failed_scheduling("skip schedule deleting pod: shop/x") is None


def test_gpu_shortage_is_the_binding_constraint_and_is_counted_by_model() -> None:
    a100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    h100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    nodes = [node(f"gpu-a{i}", labels=a100, gpus=8) for i in range(2)]
    nodes += [node(f"gpu-h{i}", labels=h100, gpus=8) for i in range(2)]
    nodes += [node(f"cpu-{i}") for i in range(8)]
    busy = [
        pod(f"hog-{n}", node=n, containers=[container("x", resources={"limits": {"nvidia.com/gpu": used}})])
        for n, used in (("gpu-a0", "8"), ("gpu-a1", "6"), ("gpu-h0", "8"), ("gpu-h1", "8"))
    ]
    p = pending(containers=[gpu_container(4)], nodeSelector=a100)
    e = event(p, "FailedScheduling", GPU_MSG)
    decoy = event(nodes[-1], "Rebooted", "Node cpu-7 has been rebooted, boot id: 1234")
    snap = Snapshot(objects={"Pod": [p, *busy], "Node": nodes}, events=[e, decoy])
    (f,) = analyze_scheduling(snap)
    assert f.category is Category.SCHEDULING and f.severity is Severity.CRITICAL
    assert f.cause == "unschedulable/resource/nvidia.com/gpu"
    assert "GPU shortage" in f.root_cause and "4 nvidia.com/gpu on NVIDIA-A100-SXM4-80GB" in f.root_cause
    assert "NVIDIA-A100-SXM4-80GB: 2 node(s), 2 free, at most 2 on one" in f.root_cause
    assert "H100" not in f.root_cause  # the pod asks for A100s only
    assert ObjectRef("Node", "", "gpu-a1") in f.objects
    assert any(e.source is Source.EVENT and e.text.startswith("0/12 nodes are available") for e in f.evidence)
    first = diagnose(snap).findings[0]
    assert first.id == f.id  # the decoy (a node reboot Event) is not the root


def test_gpu_shortage_without_a_model_lists_every_model() -> None:
    nodes = [
        node("a", labels={"nvidia.com/gpu.product": "A100"}, gpus=1),
        node("h", labels={"nvidia.com/gpu.product": "H100"}, gpus=2),
    ]
    p = pending(containers=[gpu_container(4)])
    msg = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    (f,) = analyze_scheduling(
        Snapshot(objects={"Pod": [p], "Node": nodes}, events=[event(p, "FailedScheduling", msg)])
    )
    assert "A100: 1 node(s), 1 free" in f.root_cause and "H100: 1 node(s), 2 free" in f.root_cause


def test_taint_binds_when_no_resource_is_short() -> None:
    p = pending()
    msg = "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}."
    (f,) = analyze_scheduling(Snapshot(objects={"Pod": [p]}, events=[event(p, "FailedScheduling", msg)]))
    assert "taint it does not tolerate" in f.root_cause and "{dedicated: gpu}" in f.root_cause
    assert f.cause == "unschedulable/taint/"


def test_selector_binds_and_is_quoted_from_the_condition() -> None:
    p = pending(nodeSelector={"accelerator": "h200"})
    p["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector.",
        }
    ]
    nodes = [node(f"a{i}", labels={"accelerator": "a100"}) for i in range(4)] + [node("cpu")]
    (f,) = analyze_scheduling(Snapshot(objects={"Pod": [p], "Node": nodes}))
    assert "accelerator=h200" in f.root_cause
    assert "(the nodes have accelerator=a100 ×4, no accelerator ×1)" in f.root_cause
    assert any(e.where == "status.conditions[PodScheduled].message" for e in f.evidence)


def test_unbound_pvc_binds_on_its_own() -> None:
    p = pending()
    msg = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    (f,) = analyze_scheduling(Snapshot(objects={"Pod": [p]}, events=[event(p, "FailedScheduling", msg)]))
    assert f.cause == "unschedulable/storage/" and "PersistentVolumeClaims" in f.root_cause


def test_scheduling_gates() -> None:
    p = pending(schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    (f,) = analyze_scheduling(Snapshot(objects={"Pod": [p]}))
    assert f.cause == "SchedulingGated" and "kueue.x-k8s.io/admission" in f.root_cause


def test_scheduled_pods_and_pending_pods_without_a_message_say_nothing() -> None:
    assert analyze_scheduling(Snapshot(objects={"Pod": [pod(), pending()]})) == []


def gpu_pending_snapshot(*autoscaler_events: tuple[str, str, str]) -> Snapshot:
    nodes = [node("gpu-0", labels={"nvidia.com/gpu.product": "NVIDIA-L4"}, gpus=1)]
    busy = pod("hog", node="gpu-0", containers=[gpu_container(1)])
    p = pending(containers=[gpu_container(1)])
    events = [event(p, "FailedScheduling", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")]
    for i, (reason, message, component) in enumerate(autoscaler_events):
        e = event(p, reason, message, type="Normal", at=f"2026-12-01T10:0{i + 1}:00Z")
        e["metadata"]["name"] += f"-{i}"
        e["source"] = {"component": component}
        events.append(e)
    return Snapshot(objects={"Pod": [p, busy], "Node": nodes}, events=events)


def test_a_refusing_autoscaler_completes_the_root_cause() -> None:
    snap = gpu_pending_snapshot(
        (
            "NotTriggerScaleUp",
            "pod didn't trigger scale-up: 1 max node group size reached",
            "cluster-autoscaler",
        )
    )
    (f,) = analyze_scheduling(snap)
    assert f.severity is Severity.CRITICAL and f.cause == "unschedulable/resource/nvidia.com/gpu"
    assert "cluster-autoscaler will not add a node: 1 max node group size reached" in f.root_cause
    assert any(e.where == "Event NotTriggerScaleUp (cluster-autoscaler)" for e in f.evidence)


def test_capacity_on_its_way_makes_the_wait_info() -> None:
    snap = gpu_pending_snapshot(
        (
            "NotTriggerScaleUp",
            "pod didn't trigger scale-up: 1 in backoff after failed scale-up",
            "cluster-autoscaler",
        ),
        ("TriggeredScaleUp", "pod triggered scale-up: [{l4-pool 1->2 (max: 4)}]", "cluster-autoscaler"),
    )
    (f,) = analyze_scheduling(snap)
    assert f.severity is Severity.INFO
    assert "cluster-autoscaler is adding a node (l4-pool 1->2 (max 4)), so it should start" in f.root_cause
    nominated = gpu_pending_snapshot(("Nominated", "Pod should schedule on: nodeclaim/gpu-x1", "karpenter"))
    (k,) = analyze_scheduling(nominated)
    assert k.severity is Severity.INFO and ObjectRef("NodeClaim", "", "gpu-x1") in k.objects


def test_karpenters_failed_scheduling_is_its_verdict_not_the_schedulers_message() -> None:
    snap = gpu_pending_snapshot(
        ("FailedScheduling", 'Failed to schedule pod, incompatible with nodepool "gpu", no instance type satisfied '
                             "resources", "karpenter"),
    )  # fmt: skip
    (f,) = analyze_scheduling(snap)
    assert (
        f.cause == "unschedulable/resource/nvidia.com/gpu"
    )  # the scheduler's message was parsed, not Karpenter's
    assert "Karpenter cannot launch a node for it" in f.root_cause
