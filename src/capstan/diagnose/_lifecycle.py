"""The lifecycle analyzer: objects the control plane should have moved on and has not.

- **Pods no scheduler picks up**: Pending, bound to no node, with no scheduler verdict at all (no ``PodScheduled``
  condition, no ``FailedScheduling`` Event, no scheduling gate) for :data:`UNSEEN_SECONDS`. With a ``schedulerName``
  other than ``default-scheduler`` that is the cause (a scheduler that is not installed or not running); with the
  default one, kube-scheduler itself is not scheduling (down, or without its leader Lease), said with less confidence.
- **Pods stuck terminating**: a ``deletionTimestamp`` (the end of the grace period) :data:`STUCK_SECONDS` past: the
  finalizers that hold it, or the node that cannot confirm the kill (NotReady or gone); otherwise the kubelet of its
  node has not confirmed.
- **Namespaces stuck terminating**: ``phase: Terminating`` with a ``NamespaceDeletion*``/``Namespace*Remaining``
  condition True, the namespace controller's message quoted (the resources or finalizers left, or the API group it
  could not discover — an aggregated API that is down).

Times come from the snapshot (``observed_at``), never from a clock; without one these checks are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._snapshot import KubeObject, Snapshot
from capstan.kube import parse_timestamp

NAME: Final = "lifecycle"
UNSEEN_SECONDS: Final = 60.0
"""How long a pod may wait for any scheduler verdict before that absence is a finding."""
STUCK_SECONDS: Final = 120.0
"""How long past its grace period a deleted pod may linger before it is called stuck."""
_NAMESPACE_CONDITIONS: Final = (
    "NamespaceDeletionDiscoveryFailure",
    "NamespaceDeletionGroupVersionParsingFailure",
    "NamespaceDeletionContentFailure",
    "NamespaceContentRemaining",
    "NamespaceFinalizersRemaining",
)


def analyze_lifecycle(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    if not snapshot.observed_at:
        return out
    for pod in snapshot.of("Pod"):
        ref = ref_of("Pod", pod)
        with about(ref):
            out.extend(_unscheduled(snapshot, pod, ref))
            out.extend(_stuck_pod(snapshot, pod, ref))
    for namespace in snapshot.of("Namespace"):
        ref = ref_of("Namespace", namespace)
        with about(ref):
            out.extend(_stuck_namespace(snapshot, namespace, ref))
    return out


def _age(snapshot: Snapshot, stamp: object) -> float | None:
    at = parse_timestamp(str(stamp or ""))
    return None if at is None else snapshot.observed_at - at


def _unscheduled(snapshot: Snapshot, pod: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    if (
        spec.get("nodeName")
        or str(status.get("phase") or "Pending") != "Pending"
        or meta.get("deletionTimestamp")
    ):
        return
    if spec.get("schedulingGates") or any(
        isinstance(c, Mapping) and c.get("type") == "PodScheduled" for c in status.get("conditions") or []
    ):
        return  # gated (the scheduling analyzer says so), or a scheduler has given a verdict
    if any(
        e.get("reason") == "FailedScheduling" for e in snapshot.events_about("Pod", ref.namespace, ref.name)
    ):
        return
    age = _age(snapshot, meta.get("creationTimestamp"))
    if age is None or age < UNSEEN_SECONDS:
        return
    scheduler = str(spec.get("schedulerName") or "default-scheduler")
    evidence = [
        Evidence("scheduler", Source.OBJECT_FIELD, "spec.schedulerName", scheduler),
        Evidence("node", Source.OBJECT_FIELD, "spec.nodeName", "(none)"),
        Evidence(
            "created", Source.OBJECT_FIELD, "metadata.creationTimestamp", str(meta.get("creationTimestamp"))
        ),
        Evidence("scheduler verdict", Source.OBJECT_FIELD, "status.conditions[PodScheduled]", "(none)"),
    ]
    if scheduler != "default-scheduler":
        root = (
            f"Pod {ref.namespace}/{ref.name} names schedulerName {scheduler}, and no scheduler of that name has "
            f"looked at it in {age:.0f}s: that scheduler is not installed or not running."
        )
        cause, severity, confidence = f"no-scheduler/{scheduler}", Severity.CRITICAL, 0.85
        check = f"kubectl get pods -A -o wide | grep -i {scheduler}; or set spec.schedulerName to default-scheduler"
    else:
        root = (
            f"Pod {ref.namespace}/{ref.name} has had no verdict from the default scheduler in {age:.0f}s "
            f"(no PodScheduled condition, no FailedScheduling Event): kube-scheduler is not scheduling."
        )
        cause, severity, confidence = "no-scheduler/default-scheduler", Severity.CRITICAL, 0.6
        check = "kubectl -n kube-system get pods,lease | grep kube-scheduler; read the scheduler's log"
    yield Finding.create(
        NAME, cause, subject=ref, severity=severity, category=Category.CONTROL_PLANE, root_cause=root,
        evidence=evidence, changes=preceding_changes(snapshot, [ref]), confidence=confidence, next_check=check,
    )  # fmt: skip


def _stuck_pod(snapshot: Snapshot, pod: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    deleted = meta.get("deletionTimestamp")
    if not deleted:
        return
    # a pod's deletionTimestamp is when its grace period ends (set at deletion to now + grace): past it by `age`
    age = _age(snapshot, deleted)
    if age is None or age < STUCK_SECONDS:
        return
    finalizers = [str(f) for f in meta.get("finalizers") or []]
    node_name = str(spec.get("nodeName") or "")
    evidence = [Evidence("deletion", Source.OBJECT_FIELD, "metadata.deletionTimestamp", str(deleted))]
    related: list[ObjectRef] = []
    if finalizers:
        evidence.append(
            Evidence("finalizers", Source.OBJECT_FIELD, "metadata.finalizers", ", ".join(finalizers))
        )
        why = f"finalizer(s) {', '.join(finalizers)} hold it: the controller that owns them has not removed them"
        cause = f"stuck-terminating/finalizers/{','.join(finalizers)}"
        check = f"find the controller owning {finalizers[0]}; kubectl get pod -n {ref.namespace} {ref.name} -o yaml"
    elif node_name:
        node = snapshot.get("Node", "", node_name)
        ready = _ready(node) if node is not None else None
        related.append(ObjectRef("Node", "", node_name))
        if node is None and snapshot.readable("Node").readable:
            why = f"its node {node_name} no longer exists, so no kubelet will confirm the kill"
            cause = "stuck-terminating/node-gone"
        elif ready not in (None, "True"):
            why = f"its node {node_name} is NotReady (Ready={ready}), so its kubelet cannot confirm the kill"
            cause = "stuck-terminating/node-not-ready"
        else:
            why = f"the kubelet on {node_name} has not confirmed the containers stopped"
            cause = "stuck-terminating/kubelet"
        evidence.append(Evidence("node", Source.OBJECT_FIELD, "spec.nodeName", node_name))
        check = (
            f"kubectl describe node {node_name}; as a last resort kubectl delete pod --force after checking"
        )
    else:
        return  # an unscheduled pod is deleted at once; nothing to say
    yield Finding.create(
        NAME, cause, subject=ref, related=related, severity=Severity.WARNING, category=Category.CONTROL_PLANE,
        root_cause=f"Pod {ref.namespace}/{ref.name} is still there {age:.0f}s after its grace period ended: {why}.",
        evidence=evidence, changes=preceding_changes(snapshot, [ref]), confidence=0.85, next_check=check,
    )  # fmt: skip


def _ready(node: KubeObject) -> str:
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            return str(c.get("status") or "Unknown")
    return "Unknown"


def _stuck_namespace(snapshot: Snapshot, namespace: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    status = namespace.get("status") or {}
    if status.get("phase") != "Terminating":
        return
    conditions = [
        c
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") in _NAMESPACE_CONDITIONS and c.get("status") == "True"
    ]
    if not conditions:
        return
    first = conditions[0]
    kind = str(first.get("type"))
    message = str(first.get("message") or first.get("reason") or "")
    evidence = [
        Evidence(
            str(c.get("type")), Source.OBJECT_FIELD, f"status.conditions[{c.get('type')}]",
            quote(str(c.get("message") or c.get("reason") or "")),
        )
        for c in conditions
    ]  # fmt: skip
    if kind == "NamespaceDeletionDiscoveryFailure":
        why = f"the namespace controller cannot discover every API group ({quote(message, 200)}): an aggregated API is down"
        check = "kubectl get apiservice | grep False; fix or delete the unavailable APIService"
    else:
        why = f"{quote(message, 200)}"
        check = f"kubectl api-resources --verbs=list --namespaced -o name | xargs -n1 kubectl get -n {ref.name} --ignore-not-found"
    yield Finding.create(
        NAME, f"stuck-terminating/{kind}", subject=ref, severity=Severity.WARNING, category=Category.CONTROL_PLANE,
        root_cause=f"Namespace {ref.name} is stuck Terminating: {why}.",
        evidence=evidence, changes=preceding_changes(snapshot, [ref]), confidence=0.9, next_check=check,
    )  # fmt: skip
