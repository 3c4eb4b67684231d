"""The Karpenter provider: Capstan decides, Karpenter launches.

Capstan creates one ``karpenter.sh/v1`` NodeClaim per node it plans, named as the plan names it, requiring exactly
the planned instance type and capacity type, labelled with its NodePool, its purpose and the planned-node label
(Karpenter puts a NodeClaim's labels on the Node it registers, so the Node, whatever the cloud names it, carries
the plan's id and Capstan's pods are pinned to it by that label). Karpenter's cloud provider (AWS, Azure, GCP,
kwok…) launches the instance, Karpenter registers the Node, and a drain deletes the NodeClaim: Karpenter cordons,
drains and terminates it. NodeClaims carry ``karpenter.sh/do-not-disrupt`` so Karpenter's own consolidation leaves
Capstan's nodes to Capstan. A NodeClaim without a Node yet is reported by :meth:`in_flight`, so a restarted
controller counts it as launched.

A Cluster API provider would plug in the same way, with a MachineDeployment per node type: ``launch`` raises its
``replicas`` (or creates a Machine from its template with the planned-node label), ``drain`` sets the
``cluster.x-k8s.io/delete-machine`` annotation on the Machine and lowers ``replicas``, and ``in_flight`` lists the
Machines whose ``status.nodeRef`` is not set yet.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from capstan.capacity.live._objects import GPU_RESOURCE, PURPOSE_LABEL, epoch
from capstan.capacity.model import NodeType
from capstan.capacity.placement import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL
from capstan.capacity.planner import PLANNED_NODE_LABEL
from capstan.errors import UserError
from capstan.kube import ApiError, KubeClient, Resource

NODECLAIMS = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", namespaced=False)
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
NODEPOOL_LABEL = "karpenter.sh/nodepool"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


class KarpenterProvider:
    """NodeClaims for the planned nodes. ``nodepool`` is the NodePool they belong to (its limits and the
    disruption budget apply); ``node_class`` is the ``nodeClassRef`` (group, kind, name) of the cloud."""

    name = "karpenter"

    def __init__(self, client: KubeClient, *, nodepool: str, node_class: tuple[str, str, str]) -> None:
        self.client = client
        self.nodepool = nodepool
        self.node_class = node_class

    async def check(self) -> None:
        try:
            await self.client.get(CRDS, "nodeclaims.karpenter.sh")
        except ApiError as exc:
            if exc.not_found:
                raise UserError(
                    "--provider karpenter: the cluster has no NodeClaim CRD (nodeclaims.karpenter.sh): install "
                    "Karpenter first"
                ) from None
            raise

    def claim_manifest(self, nt: NodeType, name: str, purpose: str) -> dict[str, Any]:
        group, kind, class_name = self.node_class
        requests = {"cpu": f"{nt.cpu_milli}m", "memory": f"{nt.memory_mib}Mi"}
        if nt.gpu:
            requests[GPU_RESOURCE] = str(nt.gpu)
        return {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": name,
                "labels": {
                    NODEPOOL_LABEL: self.nodepool,
                    PURPOSE_LABEL: purpose,
                    PLANNED_NODE_LABEL: name,
                    **dict(nt.labels),
                },
                "annotations": {DO_NOT_DISRUPT: "true"},
            },
            "spec": {
                "nodeClassRef": {"group": group, "kind": kind, "name": class_name},
                "requirements": [
                    {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [nt.name]},
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [nt.capacity_type]},
                    {"key": NODEPOOL_LABEL, "operator": "In", "values": [self.nodepool]},
                ],
                "resources": {"requests": requests},
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in nt.taints],
            },
        }

    async def launch(self, nt: NodeType, name: str, purpose: str, now: float) -> None:
        await self.client.create(NODECLAIMS, self.claim_manifest(nt, name, purpose))

    async def drain(self, name: str, node: Mapping[str, Any]) -> None:
        """Delete the NodeClaim: Karpenter taints, drains and terminates the node."""
        try:
            await self.client.delete(NODECLAIMS, name)
        except ApiError as exc:
            if not exc.not_found:
                raise

    async def advance(self, nodes: Collection[Mapping[str, Any]], busy: set[str], now: float) -> int:
        """Nothing: Karpenter moves its NodeClaims on itself."""
        return 0

    async def in_flight(self) -> dict[str, tuple[str, str, float]]:
        """Capstan's NodeClaims that have no Node yet."""
        claims, _ = await self.client.list(NODECLAIMS, label_selector=PURPOSE_LABEL)
        out: dict[str, tuple[str, str, float]] = {}
        for claim in claims:
            meta = claim.get("metadata") or {}
            if meta.get("deletionTimestamp") or (claim.get("status") or {}).get("nodeName"):
                continue
            wanted = [
                r
                for r in (claim.get("spec") or {}).get("requirements") or []
                if r.get("key") == INSTANCE_TYPE_LABEL
            ]
            type_name = str((wanted[0].get("values") or [""])[0]) if wanted else ""
            purpose = str((meta.get("labels") or {}).get(PURPOSE_LABEL, "pods"))
            out[str(meta.get("name"))] = (type_name, purpose, epoch(meta.get("creationTimestamp")))
        return out
