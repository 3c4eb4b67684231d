"""GPUs as an agent needs them: by model, how many are allocatable, allocated to running or bound pods, and idle,
and the GPU pods still pending.

A node's model is its ``nvidia.com/gpu.product`` label (GPU Feature Discovery's), else ``unknown``; its GPUs are
the allocatable amounts of its GPU resources (``nvidia.com/gpu``, ``amd.com/gpu``, MIG profiles). A pod holds GPUs
when it is bound to a node and not finished. Pure over a snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from capstan.diagnose import Snapshot

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
