"""Kubernetes objects (plain dicts, as the informer hands them on) in the planner's vocabulary: pure functions.

What the live cluster reads and writes, in one place:

* a pod is **managed** while it carries the scheduling gate :data:`GATE` and has no node: the scheduler leaves it
  alone until Capstan removes the gate (a mutating admission policy, or the workload's template, adds the gate);
* a pod Capstan has promised to a node that cannot take it yet carries the annotation :data:`PROMISED_ANNOTATION`
  (the node's name) and keeps its gate; when the node takes pods, Capstan adds required node affinity to that
  node's hostname and removes the gate, and kube-scheduler binds it. A restarted controller reads its promises
  back from these annotations, not from memory;
* a node Capstan launched carries :data:`PURPOSE_LABEL` and, while it boots, the taint :data:`BOOTING_TAINT`;
  its GPUs are allocatable once ``status.allocatable`` shows as many as ``status.capacity``; a node being drained
  carries :data:`DRAINING_TAINT`. Its node type is the ``node.kubernetes.io/instance-type`` label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from lightkube.utils.quantity import parse_quantity

from capstan.capacity.model import GPU_MILLI, NodeState, NodeType, Pod, Toleration
from capstan.capacity.placement import GPU_PRODUCT_LABEL, INSTANCE_TYPE_LABEL
from capstan.kube import parse_timestamp

GATE = "capstan.io/capacity"
"""The scheduling gate that hands a pod's placement to Capstan."""
PROMISED_ANNOTATION = "capstan.io/promised-node"
PURPOSE_LABEL = "capstan.io/purpose"
"""Why Capstan launched a node: ``pods``, ``headroom`` or ``repack`` (nodes without it were not launched by
Capstan and are never drained by it)."""
BOOTING_TAINT = "capstan.io/booting"
DRAINING_TAINT = "capstan.io/draining"
READY_AT_ANNOTATION = "capstan.io/ready-at"
"""Epoch seconds at which the provider says the node has booted (its boot taint comes off)."""
GPU_AT_ANNOTATION = "capstan.io/gpu-ready-at"
"""Epoch seconds at which the provider says the node's GPUs are allocatable (as a device plugin would make them)."""
GPU_RESOURCE = "nvidia.com/gpu"
PLACEHOLDER_LABEL = "capstan.io/placeholder"
"""On the placeholder pods that hold a headroom node's free GPUs (they are not the cluster's load)."""
PLACEHOLDER_PRIORITY_CLASS = "capstan-headroom"
"""Their PriorityClass: value -10, never preempting, so any real pod preempts them."""
SERVICE_LABEL = "capstan.io/service"
"""Names the inference service a pod is a replica of, where no Deployment or StatefulSet controls it (a replayed
trace's replicas): the planner forecasts service replicas apart from batch pods."""
GANG_LABEL = "capstan.io/gang"
GANG_SIZE_LABEL = "capstan.io/gang-size"
SAFE_TO_EVICT = ("cluster-autoscaler.kubernetes.io/safe-to-evict", "karpenter.sh/do-not-disrupt")


def epoch(timestamp: Any, default: float = 0.0) -> float:
    """A Kubernetes timestamp in epoch seconds (:func:`capstan.kube.parse_timestamp`), ``default`` if unreadable."""
    at = parse_timestamp(timestamp)
    return default if at is None else at


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _milli(value: Any) -> int:
    try:
        q = parse_quantity(str(value))
    except ValueError:
        return 0
    return int(q * 1000) if q is not None else 0


def _mib(value: Any) -> int:
    try:
        q = parse_quantity(str(value))
    except ValueError:
        return 0
    return int(q / (1024 * 1024)) if q is not None else 0


def _requests(spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """CPU (milli), memory (MiB) and whole GPUs a pod asks for, as the scheduler sums them: app containers
    added up, an init container counting when it alone asks for more."""

    def one(c: Mapping[str, Any]) -> tuple[int, int, int]:
        res = c.get("resources") or {}
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        gpu = int(_milli(asked.get(GPU_RESOURCE, 0)) // 1000)
        return _milli(asked.get("cpu", 0)), _mib(asked.get("memory", 0)), gpu

    apps = [one(c) for c in spec.get("containers") or []]
    inits = [one(c) for c in spec.get("initContainers") or []]
    total = [sum(a[i] for a in apps) for i in range(3)]
    for i in range(3):
        total[i] = max([total[i], *(a[i] for a in inits)])
    return total[0], total[1], total[2]


def _gpu_models(spec: Mapping[str, Any]) -> frozenset[str]:
    """GPU models a pod's required node affinity allows (``nvidia.com/gpu.product In [...]``, every term)."""
    terms = (
        (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
        )
        or {}
    ).get("nodeSelectorTerms") or []
    models: set[str] = set()
    for term in terms:
        for expr in (term or {}).get("matchExpressions") or []:
            if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In":
                models.update(str(v) for v in expr.get("values") or [])
    return frozenset(models)


def pod_from_object(obj: Mapping[str, Any]) -> Pod:
    """A pod as the planner sees it: named ``namespace/name``, arriving at its creation time."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    cpu, mem, gpus = _requests(spec)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    tolerations = tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator="Exists" if t.get("operator") == "Exists" else "Equal",
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or []
    )
    try:
        gang_size = max(1, int(labels.get(GANG_SIZE_LABEL, 1)))
    except ValueError:
        gang_size = 1
    safe = not (
        str(annotations.get(SAFE_TO_EVICT[0], "")).lower() == "false"
        or str(annotations.get(SAFE_TO_EVICT[1], "")).lower() == "true"
    )
    return Pod(
        pod_key(obj),
        epoch(meta.get("creationTimestamp")),
        cpu,
        mem,
        gpus,
        GPU_MILLI if gpus else 0,
        gpu_models=_gpu_models(spec),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())),
        tolerations=tolerations,
        priority=int(spec.get("priority") or 0),
        gang=str(labels.get(GANG_LABEL, "")),
        gang_size=gang_size if labels.get(GANG_LABEL) else 1,
        safe_to_evict=safe,
        service=service_of(obj),
    )


def service_of(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of the service a pod is a replica of: its :data:`SERVICE_LABEL`, else the Deployment
    whose ReplicaSet controls it (the ReplicaSet is named ``<deployment>-<pod-template-hash>``) or the StatefulSet
    that does; "" for any other pod (a Job's, a bare pod's)."""
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    labels = meta.get("labels") or {}
    named = str(labels.get(SERVICE_LABEL) or "")
    if named:
        return f"{namespace}/{named}"
    for ref in meta.get("ownerReferences") or []:
        if not ref.get("controller"):
            continue
        kind, owner = ref.get("kind"), str(ref.get("name") or "")
        if kind == "StatefulSet" and owner:
            return f"{namespace}/{owner}"
        suffix = f"-{labels.get('pod-template-hash', '')}"
        if kind == "ReplicaSet" and len(suffix) > 1 and owner.endswith(suffix) and len(owner) > len(suffix):
            return f"{namespace}/{owner[: -len(suffix)]}"
    return ""


def template_pods(
    template: Mapping[str, Any], name: str, namespace: str, count: int, now: float, *, service: str = ""
) -> tuple[Pod, ...]:
    """``count`` pods a controller would make from ``template`` (a Job's or a Deployment's pod template), named
    ``name-0``, ``name-1``, …, expected at ``now``: demand announced before its pods exist."""
    tmeta = template.get("metadata") or {}
    pods = []
    for i in range(count):
        obj = {
            "metadata": {
                "name": f"{name}-{i}",
                "namespace": namespace,
                "labels": tmeta.get("labels") or {},
                "annotations": tmeta.get("annotations") or {},
            },
            "spec": template.get("spec") or {},
        }
        pods.append(replace(pod_from_object(obj), arrival=now, service=service))
    return tuple(pods)


def is_managed(obj: Mapping[str, Any]) -> bool:
    """Pending, unbound and gated by :data:`GATE`: its placement is Capstan's to decide."""
    spec = obj.get("spec") or {}
    if spec.get("nodeName") or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any((g or {}).get("name") == GATE for g in spec.get("schedulingGates") or [])


def is_placeholder(obj: Mapping[str, Any]) -> bool:
    return PLACEHOLDER_LABEL in ((obj.get("metadata") or {}).get("labels") or {})


def is_running_on(obj: Mapping[str, Any]) -> str:
    """The node a pod holds resources on ('' for none: unbound, finished, or one of Capstan's placeholders)."""
    if is_placeholder(obj):
        return ""
    phase = (obj.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return ""
    return str((obj.get("spec") or {}).get("nodeName") or "")


def node_type_of(node: Mapping[str, Any], types: Mapping[str, NodeType]) -> NodeType | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return types.get(str(labels.get(INSTANCE_TYPE_LABEL, "")))


def _taints(node: Mapping[str, Any]) -> set[str]:
    return {str((t or {}).get("key")) for t in (node.get("spec") or {}).get("taints") or []}


def node_state(node: Mapping[str, Any]) -> NodeState:
    """Where a node is: booting (Capstan's boot taint, or not Ready), ready (GPUs not yet allocatable),
    GPU-allocatable, or draining (Capstan's drain taint, being deleted, or cordoned)."""
    meta = node.get("metadata") or {}
    taints = _taints(node)
    if (
        meta.get("deletionTimestamp")
        or DRAINING_TAINT in taints
        or (node.get("spec") or {}).get("unschedulable")
    ):
        return NodeState.DRAINING
    if BOOTING_TAINT in taints:
        return NodeState.BOOTING
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    if not ready:
        return NodeState.BOOTING
    status = node.get("status") or {}
    have = _milli((status.get("capacity") or {}).get(GPU_RESOURCE, 0))
    usable = _milli((status.get("allocatable") or {}).get(GPU_RESOURCE, 0))
    if have and usable < have:
        return NodeState.READY
    return NodeState.GPU_ALLOCATABLE


def free_resources(
    node: Mapping[str, Any], nt: NodeType, pods: Iterable[Pod]
) -> tuple[int, int, tuple[int, ...]]:
    """CPU (milli), memory (MiB) and per-device free GPU thousandths once ``pods`` are placed on ``node``.
    Before its GPUs are allocatable a node offers its type's GPUs (a promise waits for them)."""
    status = node.get("status") or {}
    alloc = status.get("allocatable") or {}
    cpu = _milli(alloc["cpu"]) if "cpu" in alloc else nt.cpu_milli
    mem = _mib(alloc["memory"]) if "memory" in alloc else nt.memory_mib
    gpus = nt.gpu
    for p in pods:
        cpu -= p.cpu_milli
        mem -= p.memory_mib
        gpus -= p.num_gpu
    free = max(0, gpus)
    return max(0, cpu), max(0, mem), tuple([GPU_MILLI] * free + [0] * (nt.gpu - free))
