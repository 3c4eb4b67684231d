"""The kwok provider: nodes for the sandbox, launched, booted and deleted the way a cloud and a device plugin would.

A launch creates the Node at once, labelled like a node of its type (instance type, GPU product, the type's own
labels and taints), carrying kwok's annotation so kwok runs it, Capstan's boot taint, and ``nvidia.com/gpu``
capacity with none of it allocatable. The node's boot and GPU-ready times (drawn from its type's delays) are
annotations on it, so a restarted controller carries on where the last one stopped: once the boot time has
passed the boot taint comes off (the node takes CPU pods), once the GPU-ready time has passed its GPUs become
allocatable (as NVIDIA's device plugin makes them), and a node Capstan drains is deleted once no pod runs on it.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from capstan.capacity.live._objects import (
    BOOTING_TAINT,
    DRAINING_TAINT,
    GPU_AT_ANNOTATION,
    GPU_RESOURCE,
    PURPOSE_LABEL,
    READY_AT_ANNOTATION,
)
from capstan.capacity.model import NodeType
from capstan.capacity.placement import node_labels
from capstan.capacity.planner import PLANNED_NODE_LABEL
from capstan.kube import KubeClient, resources

KWOK_ANNOTATION = "kwok.x-k8s.io/node"


def _taint_keys(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


class KwokProvider:
    """Launches and deletes kwok Nodes; :meth:`advance` moves them through boot and GPU readiness."""

    name = "kwok"

    def __init__(self, client: KubeClient, *, seed: int = 0) -> None:
        self.client = client
        self._rng = random.Random(seed)

    async def check(self) -> None:
        """Nothing to check: kwok runs every Node that carries its annotation."""
        return None

    def node_manifest(self, nt: NodeType, name: str, purpose: str, now: float) -> dict[str, Any]:
        ready_at = now + nt.boot_delay.sample(self._rng)
        gpu_at = ready_at + (nt.gpu_ready_delay.sample(self._rng) if nt.gpu else 0.0)
        labels = {
            **node_labels(nt),
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            PURPOSE_LABEL: purpose,
            PLANNED_NODE_LABEL: name,
        }
        capacity = {"cpu": f"{nt.cpu_milli}m", "memory": f"{nt.memory_mib}Mi", "pods": "110"}
        allocatable = dict(capacity)
        if nt.gpu:
            labels["nvidia.com/gpu.present"] = "true"
            labels["nvidia.com/gpu.count"] = str(nt.gpu)
            capacity[GPU_RESOURCE] = str(nt.gpu)
            allocatable[GPU_RESOURCE] = "0"
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in nt.taints]
        taints.append({"key": BOOTING_TAINT, "value": "true", "effect": "NoSchedule"})
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    KWOK_ANNOTATION: "fake",
                    READY_AT_ANNOTATION: f"{ready_at:.3f}",
                    GPU_AT_ANNOTATION: f"{gpu_at:.3f}",
                },
            },
            "spec": {"taints": taints},
            "status": {
                "capacity": capacity,
                "allocatable": allocatable,
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": name},
                ],
            },
        }

    async def launch(self, nt: NodeType, name: str, purpose: str, now: float) -> None:
        await self.client.create(resources.NODES, self.node_manifest(nt, name, purpose, now))

    async def drain(self, name: str, node: Mapping[str, Any]) -> None:
        """Taint and cordon the Node; :meth:`advance` deletes it once no pod runs there."""
        taints = [t for t in _taint_keys(node) if t.get("key") != DRAINING_TAINT]
        taints.append({"key": DRAINING_TAINT, "value": "true", "effect": "NoSchedule"})
        node_name = str((node.get("metadata") or {}).get("name") or name)
        await self.client.patch(
            resources.NODES, node_name, {"spec": {"taints": taints, "unschedulable": True}}
        )

    async def in_flight(self) -> dict[str, tuple[str, str, float]]:
        """Nothing: a kwok launch is a Node at once."""
        return {}

    async def advance(self, nodes: Iterable[Mapping[str, Any]], busy: set[str], now: float) -> int:
        """Move Capstan's kwok nodes on: boot taints off, GPUs allocatable, drained nodes without pods deleted.
        ``busy`` names the nodes pods run on. Returns how many nodes changed."""
        changed = 0
        for node in nodes:
            meta = node.get("metadata") or {}
            labels = meta.get("labels") or {}
            annotations = meta.get("annotations") or {}
            if PURPOSE_LABEL not in labels or annotations.get(KWOK_ANNOTATION) is None:
                continue
            name = str(meta.get("name"))
            keys = {t.get("key") for t in _taint_keys(node)}
            if DRAINING_TAINT in keys:
                if name not in busy and not meta.get("deletionTimestamp"):
                    await self.client.delete(resources.NODES, name)
                    changed += 1
                continue
            if BOOTING_TAINT in keys:
                if now >= float(annotations.get(READY_AT_ANNOTATION, 0.0)):
                    taints = [t for t in _taint_keys(node) if t.get("key") != BOOTING_TAINT]
                    await self.client.patch(resources.NODES, name, {"spec": {"taints": taints}})
                    changed += 1
                continue
            status = node.get("status") or {}
            have = str((status.get("capacity") or {}).get(GPU_RESOURCE, "0"))
            usable = str((status.get("allocatable") or {}).get(GPU_RESOURCE, "0"))
            if have != usable and now >= float(annotations.get(GPU_AT_ANNOTATION, 0.0)):
                await self.client.patch(
                    resources.NODES,
                    name,
                    {"status": {"allocatable": {GPU_RESOURCE: have}}},
                    subresource="status",
                )
                changed += 1
        return changed
