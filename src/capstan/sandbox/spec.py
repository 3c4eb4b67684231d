"""Declarative description of a sandbox cluster: control-plane settings and kwok node pools.

A node pool becomes ``count`` Node objects managed by kwok. GPU pools carry ``nvidia.com/gpu`` capacity and
allocatable and the labels NVIDIA's GPU feature discovery sets (``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory``,
``nvidia.com/gpu.count``), so schedulers, planners and analyzers see what they would see on a real GPU cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from capstan.config import StrictModel, load_file

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
GPU_RESOURCE = "nvidia.com/gpu"
POOL_LABEL = "capstan.io/node-pool"

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h))+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class Taint(StrictModel):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodePool(StrictModel):
    """``count`` identical kwok nodes."""

    name: str
    count: int = Field(ge=0, le=20000)
    cpu: str = "16"
    memory: str = "64Gi"
    pods: int = Field(default=110, ge=1)
    ephemeral_storage: str = "200Gi"
    gpu: int = Field(default=0, ge=0, le=64)
    gpu_product: str | None = None
    gpu_memory_mib: int | None = Field(default=None, ge=1)
    instance_type: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, v: str) -> str:
        if not _DNS_LABEL.match(v) or len(v) > 50:
            raise ValueError(
                f"{v!r} is not a DNS label (lower-case letters, digits, '-'; at most 50 characters)"
            )
        return v

    @field_validator("cpu", "memory", "ephemeral_storage")
    @classmethod
    def _quantity(cls, v: str) -> str:
        if not _QUANTITY.match(v):
            raise ValueError(f"{v!r} is not a Kubernetes quantity such as '16', '500m' or '64Gi'")
        return v


class SandboxSpec(StrictModel):
    """Everything ``capstan sandbox up`` needs to know besides the binaries."""

    name: str = "default"
    event_ttl: str = "1h"
    etcd_compaction_interval: str = "5m"
    # Client QPS of kube-scheduler and kube-controller-manager (their defaults, 50 and 20, throttle a cluster of
    # thousands of pods created at once; real control planes at scale raise them too).
    client_qps: int = Field(default=500, ge=1, le=10_000)
    # How long kwok's node Leases last; kwok renews each one every quarter of it, as the kubelet does (its default:
    # 40 s, renewed every 10 s). Thousands of nodes make that the control plane's heaviest write load, which a
    # 2-core machine cannot carry beside the rest: a scale run lengthens it (kube-controller-manager's grace period
    # follows), which leaves every other object's churn as it is.
    node_lease_duration_s: int = Field(default=40, ge=10, le=3600)
    # kube-scheduler's backoff for a pod it could not place (its defaults: 1 s, doubling to 10 s). A replay that
    # runs the clock faster than its trace lowers the maximum, which would otherwise stretch with the speed-up.
    scheduler_pod_initial_backoff_s: int = Field(default=1, ge=1, le=600)
    scheduler_pod_max_backoff_s: int = Field(default=10, ge=1, le=600)
    node_pools: list[NodePool] = Field(
        default_factory=lambda: [
            NodePool(name="cpu", count=2, cpu="16", memory="64Gi", instance_type="m6i.4xlarge"),
            NodePool(
                name="gpu-h100",
                count=2,
                cpu="96",
                memory="1024Gi",
                gpu=8,
                gpu_product="NVIDIA-H100-80GB-HBM3",
                gpu_memory_mib=81559,
                instance_type="p5.48xlarge",
                taints=[Taint(key=GPU_RESOURCE, value="present", effect="NoSchedule")],
            ),
            NodePool(
                name="gpu-l4",
                count=1,
                cpu="48",
                memory="192Gi",
                gpu=4,
                gpu_product="NVIDIA-L4",
                gpu_memory_mib=23034,
                instance_type="g6.12xlarge",
                taints=[Taint(key=GPU_RESOURCE, value="present", effect="NoSchedule")],
            ),
        ]
    )

    @field_validator("event_ttl", "etcd_compaction_interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not _DURATION.match(v):
            raise ValueError(f"{v!r} is not a duration such as '90s', '5m' or '1h'")
        return v

    @model_validator(mode="after")
    def _backoff_order(self) -> SandboxSpec:
        if self.scheduler_pod_max_backoff_s < self.scheduler_pod_initial_backoff_s:
            raise ValueError(
                f"scheduler_pod_max_backoff_s ({self.scheduler_pod_max_backoff_s}) is below "
                f"scheduler_pod_initial_backoff_s ({self.scheduler_pod_initial_backoff_s})"
            )
        return self

    @field_validator("node_pools")
    @classmethod
    def _unique_pools(cls, v: list[NodePool]) -> list[NodePool]:
        names = [p.name for p in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"node pool names must be unique; repeated: {', '.join(dupes)}")
        return v


def load_spec(path: Path | None, environ: Mapping[str, str] | None = None) -> SandboxSpec:
    """The spec file (or the defaults), with ``CAPSTAN_SANDBOX__EVENT_TTL=2m``-style overrides from the environment."""
    return load_file(SandboxSpec, path, env_prefix="CAPSTAN_SANDBOX__", environ=environ)


def node_manifests(spec: SandboxSpec) -> list[dict[str, Any]]:
    """Node objects (with status) for every pool; kwok takes over the ones carrying its annotation."""
    nodes: list[dict[str, Any]] = []
    for pool in spec.node_pools:
        for i in range(pool.count):
            name = f"{pool.name}-{i}"
            capacity: dict[str, str] = {
                "cpu": pool.cpu,
                "memory": pool.memory,
                "pods": str(pool.pods),
                "ephemeral-storage": pool.ephemeral_storage,
            }
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                POOL_LABEL: pool.name,
            }
            if pool.instance_type:
                labels["node.kubernetes.io/instance-type"] = pool.instance_type
            if pool.gpu:
                capacity[GPU_RESOURCE] = str(pool.gpu)
                labels["nvidia.com/gpu.present"] = "true"
                labels["nvidia.com/gpu.count"] = str(pool.gpu)
                if pool.gpu_product:
                    labels["nvidia.com/gpu.product"] = pool.gpu_product
                if pool.gpu_memory_mib:
                    labels["nvidia.com/gpu.memory"] = str(pool.gpu_memory_mib)
            labels.update(pool.labels)
            node: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": labels,
                    "annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE},
                },
                "spec": {},
                # Both address types up front: kwok's node-initialize stage rewrites `addresses` to only the
                # missing types when one is absent, which would drop the InternalIP the pod-log API dials.
                "status": {
                    "capacity": capacity,
                    "allocatable": dict(capacity),
                    "addresses": [
                        {"type": "InternalIP", "address": "127.0.0.1"},
                        {"type": "Hostname", "address": name},
                    ],
                },
            }
            if pool.taints:
                node["spec"]["taints"] = [t.model_dump() for t in pool.taints]
            nodes.append(node)
    return nodes
