"""The lifecycle analyzer: pods no scheduler picks up, pods and namespaces stuck terminating."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, Severity, Snapshot, diagnose
from capstan.kube import parse_timestamp

from .kit import T0, event, node, pod, waiting

NOW = (parse_timestamp(T0) or 0.0) + 600.0  # ten minutes after every object of the kit was created


def pending(name: str = "train-0", **spec: Any) -> dict[str, Any]:
    p = pod(name, node=None, phase="Pending", statuses=[], owner=None, **spec)
    p["metadata"]["creationTimestamp"] = T0
    return p


def test_a_pod_naming_a_scheduler_that_does_not_run_is_named() -> None:
    snap = Snapshot(objects={"Pod": [pending(schedulerName="volcano")]}, observed_at=NOW)
    (f,) = diagnose(snap).findings
    assert (f.analyzer, f.cause, f.severity, f.category) == (
        "lifecycle", "no-scheduler/volcano", Severity.CRITICAL, Category.CONTROL_PLANE,
    )  # fmt: skip
    assert "schedulerName volcano" in f.root_cause and "600s" in f.root_cause
    assert f.confidence == 0.85


def test_no_verdict_from_the_default_scheduler_is_said_with_less_confidence() -> None:
    (f,) = diagnose(Snapshot(objects={"Pod": [pending()]}, observed_at=NOW)).findings
    assert f.cause == "no-scheduler/default-scheduler" and f.confidence < 0.85


def test_a_scheduler_verdict_a_gate_or_a_young_pod_is_not_this_analyzers() -> None:
    verdict = pending("a")
    verdict["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    gated = pending("b", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    young = pending("c")
    failed = pending("d")
    snap = Snapshot(
        objects={"Pod": [verdict, gated, young, failed]},
        events=[event(failed, "FailedScheduling", "0/3 nodes are available: 3 Insufficient cpu.")],
        observed_at=(parse_timestamp(T0) or 0.0) + 30.0,
    )
    assert [f for f in diagnose(snap).findings if f.analyzer == "lifecycle"] == []
    later = Snapshot(objects=snap.objects, events=snap.events, observed_at=NOW)
    assert {f.subject.name for f in diagnose(later).findings if f.analyzer == "lifecycle"} == {"c"}


def deleted(name: str, *, finalizers: list[str] | None = None, node_name: str = "node-a") -> dict[str, Any]:
    p = pod(name, node=node_name, statuses=[waiting("app", "ContainerCreating")])
    p["metadata"]["deletionTimestamp"] = T0
    if finalizers:
        p["metadata"]["finalizers"] = finalizers
    return p


def test_a_pod_held_by_a_finalizer_is_stuck_terminating() -> None:
    snap = Snapshot(
        objects={"Pod": [deleted("web-1", finalizers=["example.com/cleanup"])], "Node": [node("node-a")]},
        observed_at=NOW,
    )
    (f,) = [f for f in diagnose(snap).findings if f.analyzer == "lifecycle"]
    assert f.cause == "stuck-terminating/finalizers/example.com/cleanup"
    assert "example.com/cleanup" in f.root_cause and "600s after its grace period" in f.root_cause


def test_a_pod_on_a_not_ready_node_is_the_nodes_symptom() -> None:
    snap = Snapshot(
        objects={"Pod": [deleted("web-1")], "Node": [node("node-a", ready="False")]}, observed_at=NOW
    )
    roots = diagnose(snap).findings
    assert [r.subject.kind for r in roots] == ["Node"]
    assert [s.object.name for s in roots[0].symptoms] == ["web-1"]


def test_a_pod_whose_node_is_gone_and_one_just_deleted() -> None:
    gone = deleted("web-1", node_name="node-z")
    fresh = deleted("web-2")
    fresh["metadata"]["deletionTimestamp"] = "2026-12-01T10:09:00Z"  # one minute before NOW
    snap = Snapshot(objects={"Pod": [gone, fresh], "Node": [node("node-a")]}, observed_at=NOW)
    found = {f.subject.name: f.cause for f in diagnose(snap).findings if f.analyzer == "lifecycle"}
    assert found == {"web-1": "stuck-terminating/node-gone"}


def test_a_namespace_stuck_on_an_unavailable_api_group() -> None:
    ns = {
        "kind": "Namespace",
        "metadata": {"name": "shop", "deletionTimestamp": T0},
        "status": {
            "phase": "Terminating",
            "conditions": [
                {"type": "NamespaceDeletionDiscoveryFailure", "status": "True", "reason": "DiscoveryFailed",
                 "message": "Discovery failed for some groups, 1 failing: unable to retrieve the complete list of "
                            "server APIs: metrics.k8s.io/v1beta1: the server is currently unable to handle the request"},
                {"type": "NamespaceContentRemaining", "status": "False"},
            ],
        },
    }  # fmt: skip
    (f,) = diagnose(Snapshot(objects={"Namespace": [ns]}, observed_at=NOW)).findings
    assert f.cause == "stuck-terminating/NamespaceDeletionDiscoveryFailure"
    assert "metrics.k8s.io/v1beta1" in f.root_cause and "apiservice" in f.next_check
    active = {"kind": "Namespace", "metadata": {"name": "ok"}, "status": {"phase": "Active"}}
    assert diagnose(Snapshot(objects={"Namespace": [active]}, observed_at=NOW)).findings == ()
