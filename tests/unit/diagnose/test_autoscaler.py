"""Reading cluster-autoscaler's and Karpenter's Events about a pending pod (messages as they write them)."""

from __future__ import annotations

from capstan.diagnose import ObjectRef, Snapshot
from capstan.diagnose._autoscaler import (
    ScaleUpGroup,
    autoscaler_verdict,
    parse_not_triggered,
    parse_triggered,
)

from .kit import event, pod


def test_not_triggered_clauses() -> None:
    assert parse_not_triggered(
        "pod didn't trigger scale-up: 1 node(s) had untolerated taint(s), 3 max node group size reached"
    ) == ((1, "node(s) had untolerated taint(s)"), (3, "max node group size reached"))
    assert parse_not_triggered("pod didn't trigger scale-up (it wouldn't fit if a new node is added)") == (
        (None, "it wouldn't fit if a new node is added"),
    )
    assert parse_not_triggered("pod didn't trigger scale-up: 1 in backoff after failed scale-up") == (
        (1, "in backoff after failed scale-up"),
    )
    assert parse_not_triggered("pod didn't trigger scale-up:") == ()
    assert parse_not_triggered("0/3 nodes are available") is None


def test_triggered_groups() -> None:
    assert parse_triggered("pod triggered scale-up: [{aks-gpunp-98036146-vmss 1->2 (max: 2)}]") == (
        ScaleUpGroup("aks-gpunp-98036146-vmss", 1, 2, 2),
    )
    assert parse_triggered("pod triggered scale-up: [{a 0->1 (max: 3)} {b 2->4 (max: 8)}]") == (
        ScaleUpGroup("a", 0, 1, 3), ScaleUpGroup("b", 2, 4, 8),
    )  # fmt: skip


def test_the_newest_verdict_wins_and_karpenter_is_told_apart() -> None:
    p = pod("train-0", node=None, phase="Pending", statuses=[])
    no = event(p, "NotTriggerScaleUp", "pod didn't trigger scale-up: 2 max node group size reached",
               type="Normal", at="2026-12-01T10:00:00Z")  # fmt: skip
    yes = event(p, "TriggeredScaleUp", "pod triggered scale-up: [{gpu 1->2 (max: 4)}]", type="Normal",
                at="2026-12-01T10:05:00Z")  # fmt: skip
    yes["metadata"]["name"] += "-2"
    verdict = autoscaler_verdict(
        Snapshot(objects={"Pod": [p]}, events=[yes, no]), "shop", "train-0", "uid-train-0"
    )
    assert verdict is not None and verdict.outlook == "scaling-up"
    assert verdict.summary == "cluster-autoscaler is adding a node (gpu 1->2 (max 4))"

    nominated = event(p, "Nominated", "Pod should schedule on: nodeclaim/gpu-8x2kq", type="Normal")
    nominated["source"] = {"component": "karpenter"}
    karpenter_fail = event(p, "FailedScheduling", 'Failed to schedule pod, incompatible with nodepool "gpu"',
                           at="2026-12-01T10:09:00Z")  # fmt: skip
    karpenter_fail["source"] = {"component": "karpenter"}
    karpenter_fail["metadata"]["name"] += "-k"
    v1 = autoscaler_verdict(Snapshot(events=[nominated]), "shop", "train-0")
    assert (
        v1 is not None and v1.outlook == "nominated" and v1.target == ObjectRef("NodeClaim", "", "gpu-8x2kq")
    )
    v2 = autoscaler_verdict(Snapshot(events=[nominated, karpenter_fail]), "shop", "train-0")
    assert v2 is not None and v2.outlook == "no-nodepool" and "nodepool" in v2.summary
    scheduler = event(p, "FailedScheduling", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert autoscaler_verdict(Snapshot(events=[scheduler]), "shop", "train-0") is None
