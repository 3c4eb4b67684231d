"""GPUs as an agent needs them: by model, how many are allocatable, allocated to running or bound pods, and idle,
and the GPU pods still pending: :func:`gpu_summary` (the ``overview``'s GPU part) and the ``gpu_capacity`` tool
(per node state, why each pending GPU pod waits, and the capacity in flight: the planner's view, nodes not Ready
yet, cluster-autoscaler and Karpenter signals).

A node's model is its ``nvidia.com/gpu.product`` label (GPU Feature Discovery's), else ``unknown``; its GPUs are
the allocatable amounts of its GPU resources (``nvidia.com/gpu``, ``amd.com/gpu``, MIG profiles). A pod holds GPUs
when it is bound to a node and not finished. Pure over a snapshot; ``gpu_capacity`` pages its pending pods and
nodes with ``call.page``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import Field

from capstan.diagnose import Snapshot
from capstan.jsontext import dumps
from capstan.kube import event_time, parse_timestamp
from capstan.mcp._shape import Budget, tokens
from capstan.mcp._tool import MAX_TEXT, Call, ListArgs, ToolSpec

MODEL_LABEL: Final = "nvidia.com/gpu.product"


def is_gpu_resource(resource: str) -> bool:
    """``nvidia.com/gpu``, ``amd.com/gpu``, ``nvidia.com/mig-1g.5gb``…"""
    return resource.endswith("/gpu") or "/mig-" in resource


def quantity(value: Any) -> float:
    try:
        return float(str(value))
    except ValueError:
        return 0.0


def pod_gpus(pod: Mapping[str, Any]) -> dict[str, float]:
    """The GPU resources a pod requests (requests, else limits), summed over its app containers; an init
    container's request counts when it is larger (as the scheduler computes it)."""
    spec = pod.get("spec") or {}

    def of(containers: Any) -> list[dict[str, float]]:
        out = []
        for c in containers or []:
            res = (c or {}).get("resources") or {}
            asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
            out.append(
                {str(r): quantity(v) for r, v in asked.items() if is_gpu_resource(str(r)) and quantity(v) > 0}
            )
        return out

    total: dict[str, float] = {}
    for asked in of(spec.get("containers")):
        for r, v in asked.items():
            total[r] = total.get(r, 0.0) + v
    for asked in of(spec.get("initContainers")):
        for r, v in asked.items():
            total[r] = max(total.get(r, 0.0), v)
    return total


def _finished(pod: Mapping[str, Any]) -> bool:
    return str((pod.get("status") or {}).get("phase") or "") in ("Succeeded", "Failed")


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def node_model(node: Mapping[str, Any]) -> str:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return str(labels.get(MODEL_LABEL) or "unknown")


def node_gpus(node: Mapping[str, Any]) -> dict[str, float]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {
        str(r): quantity(v) for r, v in allocatable.items() if is_gpu_resource(str(r)) and quantity(v) > 0
    }


def gpu_summary(snapshot: Snapshot, namespace: str | None = None) -> dict[str, Any]:
    """GPUs by model (nodes, allocatable, allocated, idle) and the count of pending GPU pods (in ``namespace``
    when given; the nodes are always the cluster's)."""
    models: dict[str, dict[str, float]] = {}
    node_to_model: dict[str, str] = {}
    for node in snapshot.of("Node"):
        gpus = sum(node_gpus(node).values())
        if not gpus and MODEL_LABEL not in ((node.get("metadata") or {}).get("labels") or {}):
            continue
        model = node_model(node)
        node_to_model[_name(node)[1]] = model
        row = models.setdefault(model, {"nodes": 0, "allocatable": 0.0, "allocated": 0.0})
        row["nodes"] += 1
        row["allocatable"] += gpus
    pending = 0
    for pod in snapshot.of("Pod"):
        gpus = sum(pod_gpus(pod).values())
        if not gpus or _finished(pod):
            continue
        bound = str((pod.get("spec") or {}).get("nodeName") or "")
        if bound and bound in node_to_model:
            models[node_to_model[bound]]["allocated"] += gpus
        elif not bound and (namespace is None or _name(pod)[0] == namespace):
            pending += 1
    by_model = [
        {
            "model": model,
            "nodes": int(row["nodes"]),
            "allocatable": _num(row["allocatable"]),
            "allocated": _num(row["allocated"]),
            "idle": _num(max(0.0, row["allocatable"] - row["allocated"])),
        }
        for model, row in sorted(models.items())
    ]
    return {"by_model": by_model, "pending_gpu_pods": pending}


def _num(value: float) -> float | int:
    return int(value) if value == int(value) else round(value, 3)


# ---------------------------------------------------------------------------------------------------- gpu_capacity
NOT_ALLOCATABLE: Final = "GPU not yet allocatable"
SCALING_REASONS: Final = (
    "TriggeredScaleUp",
    "NotTriggerScaleUp",
    "FailedScaleUp",
    "ScaleUpFailed",
    "Nominated",
    "Launched",
    "Registered",
    "Initialized",
)
"""The Event reasons of cluster-autoscaler and Karpenter that say capacity is coming, or why not."""
SIGNALS_LISTED: Final = 10
PLANNER_TOKENS: Final = 300
"""The most tokens of the planner's view shown whole; past that it is cut as compact JSON."""
SIGNALS_SMALL: Final = 2
"""How many autoscaler signals and NodeClaims an answer lists (under 1000 tokens of budget: the smaller)."""
MESSAGE_CHARS: Final = 300


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _gpu_total(amounts: Mapping[str, Any]) -> float:
    return sum(quantity(v) for r, v in amounts.items() if is_gpu_resource(str(r)))


def node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if (cond or {}).get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    status = node.get("status") or {}
    return (
        _gpu_total(status.get("capacity") or {}) > 0
        or _gpu_total(status.get("allocatable") or {}) > 0
        or MODEL_LABEL in _labels(node)
    )


def node_states(node: Mapping[str, Any]) -> list[str]:
    """``ready`` or ``not ready``, ``cordoned``, and :data:`NOT_ALLOCATABLE` when the node has fewer
    allocatable GPUs than its capacity, or is labelled a GPU node and offers none."""
    status = node.get("status") or {}
    states = ["ready" if node_ready(node) else "not ready"]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("cordoned")
    capacity, allocatable = (
        _gpu_total(status.get("capacity") or {}),
        _gpu_total(status.get("allocatable") or {}),
    )
    if capacity > allocatable or (allocatable == 0 and MODEL_LABEL in _labels(node)):
        states.append(NOT_ALLOCATABLE)
    return states


def _short(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}…"


def _pod_events(snapshot: Snapshot) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """Events about pods by (namespace, name), oldest first."""
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for event in snapshot.events:
        s = event.get("involvedObject") or event.get("regarding") or {}
        if str(s.get("kind") or "") != "Pod":
            continue
        out.setdefault((str(s.get("namespace") or ""), str(s.get("name") or "")), []).append(event)
    for events in out.values():
        events.sort(key=lambda e: event_time(e) or 0.0)
    return out


def _message(event: Mapping[str, Any]) -> str:
    return str(event.get("message") or event.get("note") or "")


def _selector_terms(pod: Mapping[str, Any]) -> list[str]:
    """The required node-affinity expressions of a pod, as ``key op values``."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    out = []
    for term in required.get("nodeSelectorTerms") or []:
        for expr in (term or {}).get("matchExpressions") or []:
            values = ",".join(str(v) for v in expr.get("values") or [])
            out.append(f"{expr.get('key')} {expr.get('operator')} {values}".strip())
    return out


def _tolerations(pod: Mapping[str, Any]) -> list[str]:
    out = []
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        t = t or {}
        key = str(t.get("key") or "*")
        value = f"={t['value']}" if t.get("value") else ""
        effect = f":{t['effect']}" if t.get("effect") else ""
        out.append(f"{key}{value}{effect}")
    return out


def _wants_model(pod: Mapping[str, Any], model: str) -> bool:
    """Whether a pending pod could take a GPU of ``model``: it names that model, or names none."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    if MODEL_LABEL in selector:
        return str(selector[MODEL_LABEL]) == model
    terms = [t for t in _selector_terms(pod) if t.startswith(f"{MODEL_LABEL} ")]
    return not terms or any(model in t.split(" ", 2)[-1].split(",") for t in terms)


def pending_gpu_pod(
    pod: Mapping[str, Any], events: Sequence[Mapping[str, Any]], now: float
) -> dict[str, Any]:
    """One pending GPU pod: what it asks, why the scheduler has not placed it (its newest FailedScheduling
    Event, else its PodScheduled condition), what constrains it, and the autoscaler's newest word on it."""
    ns, name = _name(pod)
    spec = pod.get("spec") or {}
    out: dict[str, Any] = {
        "pod": f"{ns}/{name}",
        "requests": {r: _num(v) for r, v in sorted(pod_gpus(pod).items())},
    }
    failed = [e for e in events if str(e.get("reason")) == "FailedScheduling"]
    why = _message(failed[-1]) if failed else ""
    if not why:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if (cond or {}).get("type") == "PodScheduled" and cond.get("status") == "False":
                why = str(cond.get("message") or cond.get("reason") or "")
    out["why"] = _short(why) if why else "no FailedScheduling Event or PodScheduled condition yet"
    if spec.get("nodeSelector"):
        out["node_selector"] = {str(k): str(v) for k, v in sorted(spec["nodeSelector"].items())}
    if terms := _selector_terms(pod):
        out["node_affinity"] = terms
    if tolerations := _tolerations(pod):
        out["tolerations"] = tolerations
    scaling = [e for e in events if str(e.get("reason")) in SCALING_REASONS]
    if scaling:
        out["autoscaler"] = f"{scaling[-1].get('reason')}: {_short(_message(scaling[-1]))}"
    created = parse_timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
    if created is not None and now >= created:
        out["pending_seconds"] = int(now - created)
    return out


def gpu_nodes(snapshot: Snapshot) -> list[dict[str, Any]]:
    """Every GPU node: model, GPUs allocatable, allocated to bound unfinished pods, idle, its states and taints;
    by model, then name."""
    allocated: dict[str, float] = {}
    for pod in snapshot.of("Pod"):
        bound = str((pod.get("spec") or {}).get("nodeName") or "")
        if bound and not _finished(pod):
            allocated[bound] = allocated.get(bound, 0.0) + sum(pod_gpus(pod).values())
    rows = []
    for node in snapshot.of("Node"):
        if not is_gpu_node(node):
            continue
        name = _name(node)[1]
        gpus = sum(node_gpus(node).values())
        used = allocated.get(name, 0.0)
        row: dict[str, Any] = {
            "node": name,
            "model": node_model(node),
            "allocatable": _num(gpus),
            "allocated": _num(used),
            "idle": _num(max(0.0, gpus - used)),
            "state": node_states(node),
        }
        taints = [
            f"{t.get('key')}{'=' + str(t['value']) if t.get('value') else ''}:{t.get('effect')}"
            for t in (node.get("spec") or {}).get("taints") or []
            if isinstance(t, Mapping)
        ]
        if taints:
            row["taints"] = taints
        rows.append(row)
    return sorted(rows, key=lambda r: (r["model"], r["node"]))


def by_model(nodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per model: nodes, GPUs allocatable/allocated/idle, idle on nodes a pod can land on now (ready, not
    cordoned), and how many nodes are not ready, cordoned, or not yet offering their GPUs (left out when 0)."""
    models: dict[str, dict[str, float]] = {}
    for n in nodes:
        row = models.setdefault(
            str(n["model"]),
            dict.fromkeys(
                ("nodes", "allocatable", "allocated", "idle", "schedulable_idle", "not_ready", "cordoned"),
                0.0,
            )
            | {"not_allocatable": 0.0},
        )
        states = n["state"]
        row["nodes"] += 1
        for k in ("allocatable", "allocated", "idle"):
            row[k] += float(n[k])
        if "ready" in states and "cordoned" not in states:
            row["schedulable_idle"] += float(n["idle"])
        row["not_ready"] += "not ready" in states
        row["cordoned"] += "cordoned" in states
        row["not_allocatable"] += NOT_ALLOCATABLE in states
    always = ("nodes", "allocatable", "allocated", "idle", "schedulable_idle")
    return [
        {"model": m, **{k: _num(v) for k, v in row.items() if v or k in always}}
        for m, row in sorted(models.items())
    ]


def in_flight(
    snapshot: Snapshot, nodes: Sequence[Mapping[str, Any]], listed: int = SIGNALS_LISTED
) -> dict[str, Any]:
    """Capacity on its way: the planner's view (``Snapshot.capacity``), GPU nodes that exist but are not Ready,
    the autoscalers' Events (newest first, by reason) and Karpenter NodeClaims not yet initialized (at most
    ``listed`` of each)."""
    planner: Any = "no planner is connected"
    if snapshot.capacity is not None:
        planner = dict(snapshot.capacity)
        if tokens(planner) > PLANNER_TOKENS:
            text = dumps(planner)
            planner = f"{text[: PLANNER_TOKENS * 3]}…(+{len(text) - PLANNER_TOKENS * 3} chars)"
    out: dict[str, Any] = {
        "planner": planner,
        "nodes_not_ready": [n["node"] for n in nodes if "not ready" in n["state"]],
    }
    signals: dict[tuple[str, str], dict[str, Any]] = {}
    for event in snapshot.events:
        reason = str(event.get("reason") or "")
        if reason not in SCALING_REASONS:
            continue
        s = event.get("involvedObject") or event.get("regarding") or {}
        subject = "/".join(p for p in (str(s.get("kind") or ""), str(s.get("name") or "")) if p)
        key = (reason, subject if reason in ("Launched", "Registered", "Initialized") else "")
        at = event_time(event) or 0.0
        row = signals.get(key)
        if row is None or at >= row["_at"]:
            signals[key] = {"reason": reason, "message": _short(_message(event)), "_at": at, "count": 0}
            if row is not None:
                signals[key]["count"] = row["count"]
        signals[key]["count"] += 1
    ordered = sorted(signals.values(), key=lambda r: (-r["_at"], r["reason"], r["message"]))
    out["autoscaler"] = [{k: v for k, v in r.items() if k != "_at"} for r in ordered[:listed]]
    if len(ordered) > listed:
        out["more_autoscaler"] = len(ordered) - listed
    claims: list[dict[str, Any]] = []
    for claim in snapshot.of("NodeClaim"):
        conditions = {
            str(c.get("type")): str(c.get("status"))
            for c in (claim.get("status") or {}).get("conditions") or []
            if isinstance(c, Mapping)
        }
        if conditions.get("Initialized") == "True":
            continue
        labels = _labels(claim)
        claims.append(
            {
                "nodeclaim": _name(claim)[1],
                "nodepool": str(labels.get("karpenter.sh/nodepool") or ""),
                "instance_type": str(labels.get("node.kubernetes.io/instance-type") or ""),
                "launched": conditions.get("Launched") == "True",
                "registered": conditions.get("Registered") == "True",
                "gpus": _num(_gpu_total((claim.get("status") or {}).get("capacity") or {})),
            }
        )
    if claims:
        out["nodeclaims"] = sorted(claims, key=lambda c: str(c["nodeclaim"]))[:listed]
        if len(claims) > listed:
            out["more_nodeclaims"] = len(claims) - listed
    return out


class GpuCapacityArgs(ListArgs):
    model: str | None = Field(
        None,
        max_length=MAX_TEXT,
        description="One GPU model, as the nvidia.com/gpu.product label names it (default: every model).",
    )


async def _gpu_capacity(call: Call, args: GpuCapacityArgs) -> dict[str, Any]:
    snapshot = call.state.snapshot
    nodes = gpu_nodes(snapshot)
    if args.model is not None:
        nodes = [n for n in nodes if n["model"] == args.model]
    events = _pod_events(snapshot)
    pending = []
    for pod in snapshot.of("Pod"):
        if not pod_gpus(pod) or _finished(pod) or (pod.get("spec") or {}).get("nodeName"):
            continue
        if args.model is not None and not _wants_model(pod, args.model):
            continue
        pending.append(pending_gpu_pod(pod, events.get(_name(pod), ()), call.now))
    pending.sort(key=lambda p: (-int(p.get("pending_seconds", 0)), p["pod"]))
    flight = in_flight(snapshot, nodes, SIGNALS_LISTED if call.budget >= 1000 else SIGNALS_SMALL)
    out: dict[str, Any] = {
        "observed_at": round(snapshot.observed_at, 3),
        "by_model": by_model(nodes),
        "pending_gpu_pods": len(pending),
        "in_flight": flight,
    }
    # a small budget loses the in-flight details before the summary by model (left to the server's cut)
    for detail in ("nodeclaims", "autoscaler"):
        if tokens(out) <= call.budget // 2 or detail not in flight:
            break
        flight[f"{detail}_left_out"] = len(flight.pop(detail)) + int(flight.pop(f"more_{detail}", 0) or 0)
    # one listing: the pending pods (what the agent asks about), then the nodes
    page = call.page([*pending, *nodes], args, reserve=120 + tokens(out))
    out["pending"] = [item for item in page.items if "pod" in item]
    out["nodes"] = [item for item in page.items if "node" in item]
    out["listed"] = page.total
    if page.next_cursor is not None:
        out["next_cursor"] = page.next_cursor
    if not nodes and args.model is None:
        out["note"] = (
            "no GPU node: no node has a */gpu or */mig-* resource or the nvidia.com/gpu.product label"
        )
    return out


GPU_CAPACITY = ToolSpec(
    name="gpu_capacity",
    title="GPU capacity",
    description=(
        "GPUs by model (nodes, allocatable, allocated, idle, idle where a pod can land now) and per node (ready, "
        "cordoned, GPU not yet allocatable, taints); pending GPU pods and why (the scheduler's FailedScheduling "
        "message, requested GPUs, node selector, affinity, tolerations, the autoscaler's word); capacity in "
        "flight (the planner's view, nodes not Ready yet, cluster-autoscaler and Karpenter signals, NodeClaims). "
        "Filter by model; page with cursor."
    ),
    args=GpuCapacityArgs,
    run=_gpu_capacity,
    budget=Budget(1500, 6000),
    reads=("Node", "Pod", "Event"),
)
