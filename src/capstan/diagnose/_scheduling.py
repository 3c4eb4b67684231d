"""The scheduling analyzer: why a pod stays Pending. It parses the scheduler's ``FailedScheduling`` message into
per-reason node counts (``0/12 nodes are available: 4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint
{…}``), names the binding constraint, and for a GPU shortage counts free GPUs by GPU model from the node labels and
the requests of the pods bound to each node. Scheduling gates are reported as such. What the node autoscaler said
about the pod (``_autoscaler``: cluster-autoscaler's TriggeredScaleUp/NotTriggerScaleUp, Karpenter's Nominated or
its own FailedScheduling) completes the sentence: capacity on its way makes the wait info; a refusal says why
no node will come."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._autoscaler import autoscaler_verdict, is_scheduler_event
from capstan.diagnose._common import is_terminal, number, preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._gpu import advertised_gpus, requested_gpus
from capstan.diagnose._snapshot import KubeObject, Snapshot, event_message, meta_of
from capstan.kube import event_time

NAME: Final = "scheduling"
GPU_MODEL_LABELS: Final = (
    "nvidia.com/gpu.product",
    "amd.com/gpu.product",
    "cloud.google.com/gke-accelerator",
)
MAX_NODES: Final = 5

_HEAD: Final = re.compile(
    r"^\s*(?P<unfit>\d+)/(?P<total>\d+) nodes are available(?::\s*(?P<body>.*))?$", re.S
)
_SPLIT: Final = re.compile(r",\s+(?=\d+\s)")
_PART: Final = re.compile(r"^(?P<count>\d+)\s+(?P<reason>.+)$", re.S)


@dataclass(frozen=True)
class NodeReason:
    """One clause of a FailedScheduling message: ``count`` nodes (None when the clause has no count, such as
    ``pod has unbound immediate PersistentVolumeClaims``) ruled out for ``reason``, of ``kind``."""

    count: int | None
    reason: str
    kind: str  # resource, taint, selector, affinity, anti-affinity, storage, unschedulable, ports, spread, pods, other
    resource: str | None = None


@dataclass(frozen=True)
class Unschedulable:
    total: int
    reasons: tuple[NodeReason, ...]


def _kind(reason: str) -> tuple[str, str | None]:
    low = reason.lower()
    if reason.startswith("Insufficient "):
        return "resource", reason.removeprefix("Insufficient ").strip()
    if "taint" in low:
        return "taint", None
    if "anti-affinity" in low:
        return "anti-affinity", None
    if "node affinity/selector" in low or "node selector" in low:
        return "selector", None
    if "volume node affinity" in low or "persistentvolumeclaim" in low or "persistent volumes" in low:
        return "storage", None
    if "affinity" in low:
        return "affinity", None
    if "unschedulable" in low:
        return "unschedulable", None
    if "free ports" in low:
        return "ports", None
    if "topology spread" in low:
        return "spread", None
    if "too many pods" in low:
        return "pods", None
    return "other", None


def parse_failed_scheduling(message: str) -> Unschedulable | None:
    """The per-reason node counts of a ``FailedScheduling`` message (the part before ``preemption:``); None when the
    message is not in that form."""
    m = _HEAD.match(message.strip())
    if m is None:
        return None
    # the clauses end at the first sentence end: what follows is the preemption verdict, and newer schedulers put
    # more between them ("1 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: …")
    body = (
        re.split(r"\.\s", (m["body"] or "").split(" preemption:")[0].strip(), maxsplit=1)[0]
        .strip()
        .rstrip(".")
    )
    reasons = []
    for part in (p.strip().rstrip(".") for p in _SPLIT.split(body) if p.strip()):
        pm = _PART.match(part)
        count, reason = (int(pm["count"]), pm["reason"].strip()) if pm else (None, part)
        kind, resource = _kind(reason)
        reasons.append(NodeReason(count, reason, kind, resource))
    return Unschedulable(int(m["total"]), tuple(reasons))


def _is_gpu(resource: str) -> bool:
    return resource.endswith("/gpu") or "/mig-" in resource


def pod_request(pod: KubeObject, resource: str) -> float:
    """What a pod requests of ``resource``: the sum over its containers (requests, else limits), or its largest
    init container if that is more."""
    spec = pod.get("spec") or {}

    def of(c: Mapping[str, Any]) -> float:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        return number(value) if value is not None else 0.0

    main = sum(of(c) for c in spec.get("containers") or [])
    init = max((of(c) for c in spec.get("initContainers") or []), default=0.0)
    return max(main, init)


@dataclass(frozen=True)
class GpuNode:
    name: str
    model: str
    allocatable: float
    used: float

    @property
    def free(self) -> float:
        return max(0.0, self.allocatable - self.used)


def gpu_nodes(snapshot: Snapshot, resource: str) -> list[GpuNode]:
    """The nodes that have ``resource``, with their GPU model label and what bound pods request of it."""
    used: dict[str, float] = {}
    for pod in snapshot.of("Pod"):
        bound = str((pod.get("spec") or {}).get("nodeName") or "")
        if bound and not is_terminal(pod):
            used[bound] = used.get(bound, 0.0) + pod_request(pod, resource)
    out = []
    for node in snapshot.of("Node"):
        status = node.get("status") or {}
        allocatable = number((status.get("allocatable") or status.get("capacity") or {}).get(resource, 0))
        if allocatable <= 0:
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        model = next((str(labels[k]) for k in GPU_MODEL_LABELS if labels.get(k)), "unknown model")
        name = meta_of(node)[1]
        out.append(GpuNode(name, model, allocatable, used.get(name, 0.0)))
    return sorted(out, key=lambda n: (n.model, n.name))


def wanted_model(pod: KubeObject) -> str | None:
    """The GPU model a pod asks for through its nodeSelector or a required node-affinity ``In`` term."""
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    for label in GPU_MODEL_LABELS:
        if selector.get(label):
            return str(selector[label])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") in GPU_MODEL_LABELS and expr.get("operator") == "In" and expr.get("values"):
                return ",".join(str(v) for v in expr["values"])
    return None


def _fmt(x: float) -> str:
    return str(int(x)) if math.isclose(x, round(x)) else f"{x:g}"


def _binding(pod: KubeObject, parsed: Unschedulable) -> NodeReason | None:
    """The constraint that keeps the pod off every node it could otherwise use: a shortage of a GPU (or other
    resource) the pod requests wins over the taints and selectors that exclude the nodes lacking it; otherwise the
    clause ruling out the most nodes (a clause without a count, such as an unbound PVC, binds on its own)."""
    if not parsed.reasons:
        return None
    uncounted = [r for r in parsed.reasons if r.count is None]
    if uncounted:
        return uncounted[0]
    shortages = [
        r for r in parsed.reasons if r.kind == "resource" and r.resource and pod_request(pod, r.resource) > 0
    ]
    gpu = [r for r in shortages if r.resource and _is_gpu(r.resource)]
    if gpu:
        return gpu[0]
    return max(parsed.reasons, key=lambda r: r.count or 0)


def _scheduling_message(snapshot: Snapshot, pod: KubeObject) -> tuple[str, KubeObject | None]:
    namespace, name, uid = meta_of(pod)
    events = [
        e
        for e in snapshot.events_about("Pod", namespace, name, uid)
        if e.get("reason") == "FailedScheduling" and is_scheduler_event(e)
    ]
    if events:
        return event_message(events[-1]), events[-1]
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("message"):
            return str(cond["message"]), None
    return "", None


def _scheduler_evidence(message: str, event: KubeObject | None) -> Evidence:
    """The scheduler's verdict as evidence: its FailedScheduling Event, or the PodScheduled condition's message."""
    if event is not None:
        return Evidence(
            "scheduler message", Source.EVENT, "Event FailedScheduling", quote(message), event_time(event)
        )
    return Evidence(
        "scheduler message", Source.OBJECT_FIELD, "status.conditions[PodScheduled].message", quote(message)
    )


def analyze_scheduling(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    gpus: dict[str, list[GpuNode]] = {}  # per GPU resource, computed once per diagnosis
    # the GPU resources nodes advertise (None when Nodes cannot be read: then nothing is "not advertised")
    advertised = advertised_gpus(snapshot) if snapshot.readable("Node").readable else None
    for pod in snapshot.of("Pod"):
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") or str(status.get("phase") or "Pending") != "Pending":
            continue
        ref = ref_of("Pod", pod)
        with about(ref):
            out.extend(_pending(snapshot, pod, ref, gpus, advertised))
    return out


def _pending(
    snapshot: Snapshot,
    pod: KubeObject,
    ref: ObjectRef,
    gpus: dict[str, list[GpuNode]],
    advertised: Mapping[str, list[str]] | None,
) -> Iterator[Finding]:
    spec = pod.get("spec") or {}
    gates = [str(g.get("name")) for g in spec.get("schedulingGates") or [] if isinstance(g, Mapping)]
    if gates:
        yield Finding.create(
            NAME,
            "SchedulingGated",
            subject=ref,
            severity=Severity.WARNING,
            category=Category.SCHEDULING,
            root_cause=f"Pod {ref.namespace}/{ref.name} is held by scheduling gates {', '.join(gates)}: the scheduler "
            "does not consider it until the controller that set them removes them.",
            evidence=[
                Evidence("scheduling gates", Source.OBJECT_FIELD, "spec.schedulingGates", ", ".join(gates))
            ],
            confidence=0.95,
            next_check="find the controller that owns the gate (a queue such as Kueue) and why it holds the pod",
        )
        return
    message, event = _scheduling_message(snapshot, pod)
    if advertised is not None and not _provisioning(snapshot, pod):
        wanted = requested_gpus(pod)
        missing = [r for r in sorted(wanted) if r not in advertised]
        if missing:
            yield _not_advertised(
                snapshot, pod, ref, missing[0], wanted[missing[0]], advertised, message, event
            )
            return
    if not message:
        return
    evidence = [_scheduler_evidence(message, event)]
    parsed = parse_failed_scheduling(message)
    binding = _binding(pod, parsed) if parsed is not None else None
    related: list[ObjectRef] = []
    if parsed is None or binding is None:
        root = f"Pod {ref.namespace}/{ref.name} cannot be scheduled: {quote(message, 200)}."
        confidence = 0.5
        cause = "unschedulable"
    else:
        counts = reasons_text(parsed.reasons)
        what = _explain_binding(snapshot, pod, binding, evidence, related, gpus)
        root = (
            f"Pod {ref.namespace}/{ref.name} cannot be scheduled: {what} "
            f"(0/{parsed.total} nodes are available: {counts})."
        )
        confidence = 0.9 if len(parsed.reasons) == 1 or binding.kind == "resource" else 0.75
        cause = f"unschedulable/{binding.kind}/{binding.resource or ''}"
    severity = Severity.CRITICAL
    namespace, name, uid = meta_of(pod)
    verdict = autoscaler_verdict(snapshot, namespace, name, uid)
    if verdict is not None:
        # the node autoscaler's word on it: new capacity on its way (then the wait is expected: info), or why
        # none will come (the real answer to "why is this GPU pod pending")
        evidence.append(
            Evidence(
                "autoscaler", Source.EVENT, f"Event {verdict.reason} ({verdict.who})", quote(verdict.message),
                verdict.at,
            )
        )  # fmt: skip
        if verdict.outlook in ("scaling-up", "nominated"):
            severity = Severity.INFO  # the expected wait for a node that is coming: reported, never blamed
            root = f"{root[:-1]}; {verdict.summary}, so it should start once that node is ready."
        else:
            root = f"{root[:-1]}; {verdict.summary}."
            confidence = min(1.0, confidence + 0.05)
        if verdict.target is not None:
            related.append(verdict.target)
    yield Finding.create(
        NAME,
        cause,
        subject=ref,
        related=related,
        severity=severity,
        category=Category.SCHEDULING,
        root_cause=root,
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref]),
        confidence=confidence,
        next_check=_next_check(binding, ref),
    )


PROVISIONING: Final = ("TriggeredScaleUp", "Nominated")


def _provisioning(snapshot: Snapshot, pod: KubeObject) -> bool:
    """A node autoscaler (cluster-autoscaler's ``TriggeredScaleUp``, Karpenter's ``Nominated``) is bringing up a node
    for the pod: a GPU resource no current node advertises may be the new node's."""
    namespace, name, uid = meta_of(pod)
    return any(e.get("reason") in PROVISIONING for e in snapshot.events_about("Pod", namespace, name, uid))


def _mig_hint(resource: str, advertised: Mapping[str, list[str]], snapshot: Snapshot) -> str:
    """Why the name may differ: another MIG profile, or the other MIG strategy (single: slices are advertised as
    ``nvidia.com/gpu``; mixed: each profile under its own ``nvidia.com/mig-<profile>`` name)."""
    strategies = sorted(
        {
            str(((n.get("metadata") or {}).get("labels") or {}).get("nvidia.com/mig.strategy"))
            for n in snapshot.of("Node")
            if ((n.get("metadata") or {}).get("labels") or {}).get("nvidia.com/mig.strategy")
        }
    )
    strategy = f" (nvidia.com/mig.strategy={','.join(strategies)})" if strategies else ""
    migs = [r for r in advertised if "/mig-" in r]
    if "/mig-" in resource and migs:
        return f": the nodes are partitioned into other MIG profiles{strategy}"
    if "/mig-" in resource and any(r.endswith("/gpu") for r in advertised):
        return f": the nodes advertise whole GPUs or MIG slices as nvidia.com/gpu (the single MIG strategy{strategy})"
    if resource.endswith("/gpu") and migs:
        return f": the nodes advertise MIG slices by profile (the mixed MIG strategy{strategy})"
    if not advertised:
        return ": no node advertises any GPU resource (is the device plugin running?)"
    return ""


def _not_advertised(
    snapshot: Snapshot,
    pod: KubeObject,
    ref: ObjectRef,
    resource: str,
    wanted: tuple[float, str],
    advertised: Mapping[str, list[str]],
    message: str,
    event: KubeObject | None,
) -> Finding:
    """A pod that requests a GPU resource no node has in its capacity or allocatable: no amount of waiting or
    scaling helps, the name is wrong (a MIG profile, the MIG strategy) or no device plugin offers it."""
    amount, where = wanted
    have = "; ".join(f"{r} on {len(nodes)} node(s)" for r, nodes in advertised.items()) or "none"
    evidence = [Evidence("GPU request", Source.OBJECT_FIELD, where, f"{resource}: {_fmt(amount)}")]
    for r, nodes in list(advertised.items())[:MAX_NODES]:
        evidence.append(
            Evidence(
                "GPU resource advertised",
                Source.OBJECT_FIELD,
                "Node status.capacity/allocatable",
                f"{r}: {', '.join(nodes[:MAX_NODES])}"
                + (f" and {len(nodes) - MAX_NODES} more" if len(nodes) > MAX_NODES else ""),
            )
        )
    if message:
        evidence.append(_scheduler_evidence(message, event))
    nodes = sorted({n for ns in advertised.values() for n in ns})
    return Finding.create(
        NAME,
        f"gpu-not-advertised/{resource}",
        subject=ref,
        related=[ObjectRef("Node", "", n) for n in nodes[:MAX_NODES]],
        severity=Severity.CRITICAL,
        category=Category.GPU,
        root_cause=(
            f"Pod {ref.namespace}/{ref.name} requests {_fmt(amount)} {resource} ({where}), a GPU resource no node "
            f"advertises{_mig_hint(resource, advertised, snapshot)}; the nodes advertise: {have}."
        ),
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref]),
        confidence=0.9,
        next_check=(
            "kubectl get nodes -o custom-columns=NAME:.metadata.name,GPUS:.status.allocatable "
            f"(and the GPU operator's MIG config), against the pod's {resource} request"
        ),
    )


def _explain_binding(
    snapshot: Snapshot,
    pod: KubeObject,
    binding: NodeReason,
    evidence: list[Evidence],
    related: list[ObjectRef],
    gpus: dict[str, list[GpuNode]],
) -> str:
    spec = pod.get("spec") or {}
    if binding.kind == "resource" and binding.resource:
        resource = binding.resource
        need = pod_request(pod, resource)
        evidence.append(
            Evidence("request", Source.OBJECT_FIELD, f"spec.containers[*].resources ({resource})", _fmt(need))
        )
        if not _is_gpu(resource):
            return f"no node has {_fmt(need)} {resource} free ({binding.count} Insufficient {resource})"
        if resource not in gpus:
            gpus[resource] = gpu_nodes(snapshot, resource)
        nodes = gpus[resource]
        model = wanted_model(pod)
        if model is not None:
            nodes = [n for n in nodes if n.model in model.split(",")]
        related.extend(ObjectRef("Node", "", n.name) for n in nodes[:MAX_NODES])
        for n in nodes[:MAX_NODES]:
            evidence.append(
                Evidence(
                    "GPUs on node",
                    Source.OBJECT_FIELD,
                    f"Node {n.name} status.allocatable[{resource}]",
                    f"{n.model}: allocatable {_fmt(n.allocatable)}, requested by bound pods {_fmt(n.used)}",
                )
            )
        fit = [n for n in nodes if n.free >= need]
        by_model: dict[str, list[GpuNode]] = {}
        for n in nodes:
            by_model.setdefault(n.model, []).append(n)
        free = (
            "; ".join(
                f"{m}: {len(ns)} node(s), {_fmt(sum(n.free for n in ns))} free, at most {_fmt(max(n.free for n in ns))} on one"
                for m, ns in sorted(by_model.items())
            )
            or "no node has that resource"
        )
        on = f" on {model}" if model else ""
        tail = "" if fit else f" — free {resource} by GPU model: {free}"
        return f"a GPU shortage: it needs {_fmt(need)} {resource}{on} on one node{tail}"
    if binding.kind == "taint":
        return f"{binding.count} node(s) have a taint it does not tolerate ({binding.reason})"
    if binding.kind == "selector":
        selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
        text = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        evidence.append(
            Evidence("node selector", Source.OBJECT_FIELD, "spec.nodeSelector", text or "(node affinity)")
        )
        have = _label_values(snapshot, selector)
        if have:
            evidence.append(Evidence("node labels", Source.OBJECT_FIELD, "Node metadata.labels", have))
        tail = f" (the nodes have {have})" if have else ""
        return f"no node matches its node selector/affinity {text or '(spec.affinity.nodeAffinity)'}{tail}"
    if binding.kind == "storage":
        return f"its volumes cannot be bound or placed ({binding.reason})"
    return binding.reason


def _label_values(snapshot: Snapshot, selector: Mapping[str, str]) -> str:
    """What the nodes have for each key of ``selector`` that no node matches: ``accelerator=a100 ×4, none ×8``."""
    parts = []
    nodes = snapshot.of("Node")
    for key, value in sorted(selector.items()):
        counts: dict[str, int] = {}
        for n in nodes:
            labels = (n.get("metadata") or {}).get("labels") or {}
            got = f"{key}={labels[key]}" if key in labels else f"no {key}"
            counts[got] = counts.get(got, 0) + 1
        if nodes and f"{key}={value}" not in counts:
            parts.append(", ".join(f"{k} ×{c}" for k, c in sorted(counts.items())))
    return "; ".join(parts)


def _next_check(binding: NodeReason | None, ref: ObjectRef) -> str:
    if binding is None:
        return f"kubectl describe pod -n {ref.namespace} {ref.name}"
    if binding.kind == "resource":
        return f"kubectl describe nodes | grep -A8 'Allocated resources' (who holds the {binding.resource})"
    if binding.kind == "taint":
        return "kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints"
    if binding.kind == "selector":
        return "kubectl get nodes --show-labels, against the pod's nodeSelector and nodeAffinity"
    if binding.kind == "storage":
        return f"kubectl get pvc -n {ref.namespace}; kubectl describe pvc (provisioner, StorageClass, zone)"
    return f"kubectl describe pod -n {ref.namespace} {ref.name}"


def reasons_text(reasons: Sequence[NodeReason]) -> str:
    return ", ".join(f"{r.count} {r.reason}" if r.count is not None else r.reason for r in reasons)
