"""The real Karpenter and cluster-autoscaler, each with its kwok cloud provider, on a Capstan sandbox: what each
needs installed (built from a list of Capstan node types), how it is started and how it is stopped.

The peers are never in this repository. They are built outside it by bench/peers/build_autoscalers.sh (the
commands, versions and build times are in docs/benchmarks.md, "Real autoscalers on the sandbox: how they were
built"); a bench takes their binary paths (:func:`find_karpenter`, :func:`find_cluster_autoscaler`: an explicit
path, else ``$CAPSTAN_KARPENTER`` / ``$CAPSTAN_CLUSTER_AUTOSCALER``, else ``../peers/bin/karpenter-kwok`` and
``../peers/bin/cluster-autoscaler-kwok`` beside the repository).

Both peers create Node objects annotated ``kwok.x-k8s.io/node=fake``, which the sandbox's kwok runs (Ready, pods
Running). Their nodes carry what Capstan's own kwok nodes carry for the same node type (capstan.capacity.live's
KwokProvider): ``node.kubernetes.io/instance-type=<name>``, ``karpenter.sh/capacity-type``, for GPU types
``nvidia.com/gpu.product=<gpu_model>``, ``nvidia.com/gpu.present`` and ``nvidia.com/gpu.count`` and
``nvidia.com/gpu`` capacity, the node type's own labels and its taints.

**Karpenter** (``sigs.k8s.io/karpenter/kwok``): :func:`install_karpenter` applies its CRDs from the Go module cache
(:func:`karpenter_module_dir`: ``$(go env GOMODCACHE)/sigs.k8s.io/karpenter@<version>``), one KWOKNodeClass and one
NodePool per distinct taint set of the node types (a NodePool's taints apply to every node it launches, so GPU types
tainted ``nvidia.com/gpu`` and untainted CPU types need two), each limited to its own instance types;
:func:`write_karpenter_instance_types` writes the instance-types file (:func:`karpenter_instance_types`) that
replaces kwok's built-in list of 144: one offering per
type (its capacity type, its price, zone ``test-zone-a``) whose requirements carry the per-type labels (Karpenter's
kwok provider copies single-valued offering requirements onto the Node). Karpenter subtracts its kube-reserved
overhead (100m CPU, 10Mi memory) from each type's allocatable, and its kwok provider sets a Node's *capacity* to
the NodeClaim's requests (its allocatable is the whole type's): read ``nvidia.com/gpu`` from allocatable.
:func:`start_karpenter` runs it with ``KUBECONFIG`` in the environment (it has no flag), ``--disable-leader-election``,
free ``--metrics-port`` and ``--health-probe-port`` (it binds them on all interfaces; it has no address flag) and
``--instance-types-file-path``. :func:`karpenter_teardown` deletes the NodePools while it runs, so that it removes its
NodeClaims and Nodes (their finalizers need it) before it is stopped.

**cluster-autoscaler** (``sigs.k8s.io/cluster-autoscaler/kwok``): :func:`install_cluster_autoscaler` creates, in its
namespace, the ConfigMaps ``kwok-provider-config`` (:func:`ca_provider_config`: templates from a ConfigMap, node
groups by the label :data:`CA_GROUP_LABEL`, ``skipTaint: true`` so its nodes carry only the node types' taints, the
GPU label ``nvidia.com/gpu.product`` with the node types' GPU models) and ``kwok-provider-templates``
(:func:`ca_templates`: one template Node per node type, node group min 0 and max ``max_count``, or the node type's
own ``max_count``). :func:`start_cluster_autoscaler` runs it with ``KWOK_PROVIDER_MODE=local``, ``POD_NAMESPACE``
and ``KUBECONFIG`` and ``--cloud-provider=kwok --kubeconfig … --namespace … --leader-elect=false
--address=127.0.0.1:<free port>`` plus the caller's flags (its scale-down waits are 10 minutes by default;
:data:`CA_FAST_SCALE_DOWN` shortens them). On SIGTERM it deletes the nodes it created. Its CapacityBuffer support
(the real counterpart of the simulator's ``ca-buffer``): install with ``crds=load_crds(ca_crd_files(apis_dir))``,
start with :data:`CA_BUFFER_FLAGS`, and apply :func:`ca_capacity_buffer`'s PodTemplate and CapacityBuffer
(:func:`apply_capacity_buffer`).

:meth:`PeerProcess.wait_ready` polls its health URL (bounded); :meth:`PeerProcess.stop` sends SIGTERM, waits
(bounded), then SIGKILL; both write their logs to a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from capstan.capacity import NodeType
from capstan.kube import ApiError, KubeClient, resources
from capstan.kube.resources import Resource
from capstan.sandbox import GPU_RESOURCE, free_port

KARPENTER_VERSION = "v1.15.0"
"""The Karpenter module version the docs' build used (``sigs.k8s.io/karpenter/kwok@v1.15.0``)."""

KARPENTER_BINARY = "karpenter-kwok"
CA_BINARY = "cluster-autoscaler-kwok"

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONE = "test-zone-a"

CA_NAMESPACE = "capstan-ca"
CA_GROUP_LABEL = "kwok-nodegroup"
"""The label the kwok provider groups template nodes by (its chart's default key); its value is the node type's
name. A dedicated key, not the instance type: the provider counts every Node carrying the key towards a group's size,
so Capstan's own nodes (``node.kubernetes.io/instance-type``) would be counted as cluster-autoscaler's."""
CA_MIN_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/min-count"
CA_MAX_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/max-count"
CA_DEFAULT_MAX = 20

CA_FAST_SCALE_DOWN: tuple[str, ...] = (
    "--scale-down-delay-after-add=0s",
    "--scale-down-unneeded-time=20s",
    "--scale-down-delay-after-delete=0s",
    "--scale-down-delay-after-failure=10s",
    "--scan-interval=5s",
)
"""cluster-autoscaler flags that shorten its scale-down waits (10 minutes each by default) for a seconds-long run."""

NODEPOOLS = Resource("karpenter.sh", "v1", "nodepools", "NodePool", namespaced=False)
NODECLAIMS = Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", namespaced=False)
KWOK_NODE_CLASSES = Resource(
    "karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses", "KWOKNodeClass", namespaced=False
)
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
KARPENTER_NODE_CLASS = "capstan"

_APPLY_AS = "capstan-bench-autoscalers"
_STOP_GRACE_S = 20.0
_CRD_WAIT_S = 60.0


class PeerError(RuntimeError):
    """A peer could not be installed or started (one line: what and why)."""


# --- finding the binaries -------------------------------------------------------------------------------------


def _find(name: str, env_var: str, explicit: str | Path | None) -> Path | None:
    given = explicit or os.environ.get(env_var)
    path = Path(given) if given else Path(__file__).resolve().parents[2] / "peers" / "bin" / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def find_karpenter(explicit: str | Path | None = None) -> Path | None:
    """Karpenter's kwok binary: ``explicit``, else ``$CAPSTAN_KARPENTER``, else ../peers/bin/karpenter-kwok."""
    return _find(KARPENTER_BINARY, "CAPSTAN_KARPENTER", explicit)


def find_cluster_autoscaler(explicit: str | Path | None = None) -> Path | None:
    """cluster-autoscaler's kwok binary: ``explicit``, else ``$CAPSTAN_CLUSTER_AUTOSCALER``, else
    ../peers/bin/cluster-autoscaler-kwok."""
    return _find(CA_BINARY, "CAPSTAN_CLUSTER_AUTOSCALER", explicit)


# --- what both peers put on a node ----------------------------------------------------------------------------


def _cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def node_type_labels(nt: NodeType) -> dict[str, str]:
    """The labels Capstan's kwok nodes of this type carry (besides hostname, os, arch and Capstan's own)."""
    labels = {INSTANCE_TYPE_LABEL: nt.name, CAPACITY_TYPE_LABEL: nt.capacity_type}
    if nt.gpu:
        labels[GPU_PRODUCT_LABEL] = nt.gpu_model
        labels["nvidia.com/gpu.present"] = "true"
        labels["nvidia.com/gpu.count"] = str(nt.gpu)
    labels.update(nt.labels)
    return labels


def node_type_capacity(nt: NodeType) -> dict[str, str]:
    capacity = {"cpu": _cpu(nt.cpu_milli), "memory": f"{nt.memory_mib}Mi", "pods": "110"}
    if nt.gpu:
        capacity[GPU_RESOURCE] = str(nt.gpu)
    return capacity


def _taints(nt: NodeType) -> list[dict[str, str]]:
    return [{"key": t.key, "value": t.value, "effect": t.effect} for t in nt.taints]


def _check_types(node_types: Sequence[NodeType]) -> None:
    if not node_types:
        raise PeerError("no node types given")
    names = [nt.name for nt in node_types]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PeerError(f"node type names must be unique; repeated: {', '.join(dupes)}")
    for nt in node_types:
        if nt.gpu and not nt.gpu_model:
            raise PeerError(f"node type {nt.name}: {nt.gpu} GPUs but no gpu_model")


# --- Karpenter ------------------------------------------------------------------------------------------------


def karpenter_instance_types(node_types: Sequence[NodeType]) -> list[dict[str, Any]]:
    """The ``--instance-types-file-path`` JSON for Karpenter's kwok provider: one instance type per node type."""
    _check_types(node_types)
    out: list[dict[str, Any]] = []
    for nt in node_types:
        requirements = [
            {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [nt.capacity_type]},
            {"key": ZONE_LABEL, "operator": "In", "values": [ZONE]},
        ]
        for key, value in sorted(node_type_labels(nt).items()):
            if key not in (INSTANCE_TYPE_LABEL, CAPACITY_TYPE_LABEL):
                requirements.append({"key": key, "operator": "In", "values": [value]})
        out.append(
            {
                "name": nt.name,
                "offerings": [{"Price": nt.price_per_hour, "Available": True, "Requirements": requirements}],
                "architecture": "amd64",
                "operatingSystems": ["linux"],
                "resources": {**node_type_capacity(nt), "ephemeral-storage": "200Gi"},
            }
        )
    return out


def _taint_groups(node_types: Sequence[NodeType]) -> list[tuple[tuple[tuple[str, str, str], ...], list[str]]]:
    groups: dict[tuple[tuple[str, str, str], ...], list[str]] = {}
    for nt in node_types:
        key = tuple(sorted((t.key, t.value, t.effect) for t in nt.taints))
        groups.setdefault(key, []).append(nt.name)
    return sorted(groups.items())


def karpenter_node_pools(
    node_types: Sequence[NodeType],
    *,
    consolidate_after: str = "30s",
    consolidation_policy: str = "WhenEmptyOrUnderutilized",
    cpu_limit: int = 100_000,
    startup_taints: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """One NodePool per distinct taint set (``capstan-0``, ``capstan-1``, … in a fixed order), each allowed only its
    node types (``node.kubernetes.io/instance-type In [...]``) and both capacity types. ``startup_taints`` (keys,
    ``NoSchedule``) go on each new node and stay until something else removes them (:func:`emulate_boot`):
    Karpenter counts such a node as launched capacity but not initialized."""
    _check_types(node_types)
    pools: list[dict[str, Any]] = []
    for i, (taints, names) in enumerate(_taint_groups(node_types)):
        spec: dict[str, Any] = {
            "requirements": [
                {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": sorted(names)},
                {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand", "spot"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
            ],
            "nodeClassRef": {
                "group": "karpenter.kwok.sh",
                "kind": "KWOKNodeClass",
                "name": KARPENTER_NODE_CLASS,
            },
            "expireAfter": "Never",
        }
        if taints:
            spec["taints"] = [{"key": k, "value": v, "effect": e} for k, v, e in taints]
        if startup_taints:
            spec["startupTaints"] = [
                {"key": k, "value": "true", "effect": "NoSchedule"} for k in startup_taints
            ]
        pools.append(
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": f"capstan-{i}"},
                "spec": {
                    "template": {"spec": spec},
                    "limits": {"cpu": str(cpu_limit)},
                    "disruption": {
                        "consolidationPolicy": consolidation_policy,
                        "consolidateAfter": consolidate_after,
                    },
                },
            }
        )
    return pools


def karpenter_node_class() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": KARPENTER_NODE_CLASS},
    }


def karpenter_module_dir(version: str = KARPENTER_VERSION, *, go: str = "go") -> Path:
    """``$(go env GOMODCACHE)/sigs.k8s.io/karpenter@<version>``, where ``go install …/kwok@<version>`` left the
    module's sources (and its CRDs)."""
    try:
        proc = subprocess.run(
            [go, "env", "GOMODCACHE"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerError(f"`{go} env GOMODCACHE` failed: {exc}") from None
    cache = proc.stdout.strip()
    if proc.returncode != 0 or not cache:
        raise PeerError(f"`{go} env GOMODCACHE` exited {proc.returncode}: {proc.stderr.strip()[:200]}")
    path = Path(cache) / "sigs.k8s.io" / f"karpenter@{version}"
    if not path.is_dir():
        raise PeerError(f"{path} does not exist: build Karpenter first (bench/peers/build_autoscalers.sh)")
    return path


def karpenter_crd_files(module_dir: Path) -> list[Path]:
    """NodePool, NodeClaim, NodeOverlay, CapacityBuffer (``kwok/charts/crds``) and KWOKNodeClass."""
    files = sorted((module_dir / "kwok" / "charts" / "crds").glob("*.yaml"))
    files.append(module_dir / "kwok" / "apis" / "crds" / "karpenter.kwok.sh_kwoknodeclasses.yaml")
    missing = [str(f) for f in files if not f.is_file()]
    if missing or len(files) < 2:
        raise PeerError(
            f"Karpenter CRDs missing under {module_dir}: {', '.join(missing) or 'kwok/charts/crds'}"
        )
    return files


async def _apply(kube: KubeClient, resource: Resource, body: dict[str, Any]) -> None:
    await kube.apply(resource, body, field_manager=_APPLY_AS)


def load_crds(files: Iterable[Path]) -> list[dict[str, Any]]:
    """The CustomResourceDefinition documents in these YAML files."""
    docs: list[dict[str, Any]] = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                docs.append(doc)
    return docs


async def apply_crds(
    kube: KubeClient, crds: Iterable[Mapping[str, Any]], *, timeout: float = _CRD_WAIT_S
) -> list[str]:
    """Apply CRDs (server-side) and wait, bounded, until every one is Established; their names."""
    names: list[str] = []
    for doc in crds:
        await _apply(kube, CRDS, dict(doc))
        names.append(str(doc["metadata"]["name"]))
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = await kube.get(CRDS, name)
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise PeerError(f"CRD {name} not Established after {timeout:g} s")
            await asyncio.sleep(0.2)
    return names


def write_karpenter_instance_types(node_types: Sequence[NodeType], path: Path) -> Path:
    """Write :func:`karpenter_instance_types` to ``path`` (for ``--instance-types-file-path``); ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(karpenter_instance_types(node_types), indent=1) + "\n")
    return path


async def install_karpenter(
    kube: KubeClient,
    node_types: Sequence[NodeType],
    *,
    crds: Sequence[Mapping[str, Any]] | None = None,
    consolidate_after: str = "30s",
    consolidation_policy: str = "WhenEmptyOrUnderutilized",
    startup_taints: Sequence[str] = (),
) -> None:
    """Karpenter's CRDs (``crds``, else :func:`load_crds` of :func:`karpenter_crd_files` of
    :func:`karpenter_module_dir`), the KWOKNodeClass and the NodePools on the cluster. The instance-types file is
    written apart (:func:`write_karpenter_instance_types`) and given to :func:`start_karpenter`."""
    if crds is None:
        crds = await asyncio.to_thread(lambda: load_crds(karpenter_crd_files(karpenter_module_dir())))
    pools = karpenter_node_pools(
        node_types,
        consolidate_after=consolidate_after,
        consolidation_policy=consolidation_policy,
        startup_taints=startup_taints,
    )
    await apply_crds(kube, crds)
    await _apply(kube, KWOK_NODE_CLASSES, karpenter_node_class())
    for pool in pools:
        await _apply(kube, NODEPOOLS, pool)


# --- cluster-autoscaler ---------------------------------------------------------------------------------------


def ca_provider_config(node_types: Sequence[NodeType], namespace: str = CA_NAMESPACE) -> dict[str, Any]:
    """The ``kwok-provider-config`` ConfigMap."""
    _check_types(node_types)
    config: dict[str, Any] = {
        "apiVersion": "v1alpha1",
        "readNodesFrom": "configmap",
        "nodegroups": {"fromNodeLabelKey": CA_GROUP_LABEL},
        "nodes": {"skipTaint": True},
        "configmap": {"name": "kwok-provider-templates"},
    }
    models = sorted({nt.gpu_model for nt in node_types if nt.gpu})
    if models:
        config["nodes"]["gpuConfig"] = {
            "gpuLabelKey": GPU_PRODUCT_LABEL,
            "availableGPUTypes": {m: {} for m in models},
        }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kwok-provider-config", "namespace": namespace},
        "data": {"config": json.dumps(config, indent=1)},
    }


def ca_template_nodes(
    node_types: Sequence[NodeType], *, max_count: int = CA_DEFAULT_MAX, startup_taints: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """One template Node per node type; its node group (named after the type) sized 0 to ``max_count`` (or the
    type's own ``max_count``). ``startup_taints`` (keys, ``NoSchedule``) are on the template, so on every node
    the kwok provider creates from it; cluster-autoscaler must be started with ``--startup-taint=KEY`` for each
    (:func:`ca_flags_for_speed`) so it ignores them when it simulates a new node and treats a node carrying one
    as not ready yet."""
    _check_types(node_types)
    nodes: list[dict[str, Any]] = []
    for nt in node_types:
        labels = {
            **node_type_labels(nt),
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            CA_GROUP_LABEL: nt.name,
        }
        capacity = {**node_type_capacity(nt), "ephemeral-storage": "200Gi"}
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": nt.name,
                "labels": labels,
                "annotations": {
                    CA_MIN_ANNOTATION: "0",
                    CA_MAX_ANNOTATION: str(nt.max_count if nt.max_count is not None else max_count),
                },
            },
            "spec": {},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            },
        }
        taints = _taints(nt) + [{"key": k, "value": "true", "effect": "NoSchedule"} for k in startup_taints]
        if taints:
            node["spec"]["taints"] = taints
        nodes.append(node)
    return nodes


def ca_templates(
    node_types: Sequence[NodeType],
    namespace: str = CA_NAMESPACE,
    *,
    max_count: int = CA_DEFAULT_MAX,
    startup_taints: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``kwok-provider-templates`` ConfigMap (key ``templates``: a v1 List of template Nodes, as JSON)."""
    items = ca_template_nodes(node_types, max_count=max_count, startup_taints=startup_taints)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kwok-provider-templates", "namespace": namespace},
        "data": {"templates": json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1)},
    }


CA_DURATION_FLAGS: dict[str, float] = {
    "scan-interval": 10.0,
    "scale-down-unneeded-time": 600.0,
    "scale-down-unready-time": 1200.0,
    "scale-down-delay-after-add": 600.0,
    "scale-down-delay-after-failure": 180.0,
    "max-node-provision-time": 900.0,
    "max-node-startup-time": 900.0,
    "unremovable-node-recheck-timeout": 300.0,
    "node-deletion-delay-timeout": 120.0,
    "max-pod-eviction-time": 120.0,
}
"""cluster-autoscaler's flags that are durations, at their defaults (seconds; ``scale-down-delay-after-delete`` and
``new-pod-scale-up-delay`` default to 0 and stay so)."""


def _go_duration(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def ca_flags_for_speed(speed: float, *, startup_taints: Sequence[str] = ()) -> list[str]:
    """cluster-autoscaler on the clock of a replay ``speed`` times faster than its trace: every duration flag of
    :data:`CA_DURATION_FLAGS` divided by ``speed``; ``--startup-taint`` for each of ``startup_taints``; and
    ``--bypassed-scheduler-names=default-scheduler``, which turns off the one wait that is no flag (it scales up
    only once the oldest pending GPU pod is 30 s old, hard-coded as ``unschedulablePodWithGpuTimeBuffer``; at
    ``speed`` it would be ``30 × speed`` trace seconds, so it is dropped rather than stretched)."""
    flags = [f"--{name}={_go_duration(default / speed)}" for name, default in CA_DURATION_FLAGS.items()]
    flags += [f"--startup-taint={key}" for key in startup_taints]
    flags.append("--bypassed-scheduler-names=default-scheduler")
    return flags


KARPENTER_FIXED_S: dict[str, float] = {"disruption polling": 10.0, "consolidation command validation": 15.0}
"""Karpenter's waits that no flag sets (``pollingPeriod`` and ``commandValidationDelay`` in
``pkg/controllers/disruption``): on a replay ``speed`` times faster they last ``speed`` times longer in trace time."""


def karpenter_flags_for_speed(speed: float) -> list[str]:
    """Karpenter's provisioning batch windows (idle 1 s, at most 10 s) divided by ``speed``."""
    return [
        f"--batch-idle-duration={_go_duration(1.0 / speed)}",
        f"--batch-max-duration={_go_duration(10.0 / speed)}",
    ]


@dataclass
class BootedNode:
    first_seen: float
    ready_at: float
    gpu_at: float
    gpus: str = "0"
    """The allocatable GPUs its autoscaler gave it, held back until ``gpu_at``."""
    booted: float | None = None
    gpus_given: float | None = None


async def emulate_boot(
    kube: KubeClient,
    label_selector: str,
    boot_s: float,
    gpu_ready_s: float,
    stop: asyncio.Event,
    *,
    taint: str,
    skip_label: str,
    poll_s: float = 0.2,
) -> dict[str, BootedNode]:
    """Boot the nodes a real autoscaler creates the way Capstan's kwok provider boots its own: each node matching
    ``label_selector`` (and not carrying ``skip_label``: Capstan's nodes boot themselves) is created by its
    autoscaler with the startup taint ``taint``; from the first poll that sees it, its allocatable
    ``nvidia.com/gpu`` is held at 0, the taint comes off ``boot_s`` later and the GPUs become allocatable
    ``gpu_ready_s`` after that, as NVIDIA's device plugin would make them. Polls every ``poll_s`` until ``stop``;
    returns what it did per node."""
    seen: dict[str, BootedNode] = {}
    while not stop.is_set():
        nodes, _ = await kube.list(resources.NODES, label_selector=label_selector)
        now = time.time()
        for node in nodes:
            meta = node.get("metadata") or {}
            if skip_label in (meta.get("labels") or {}) or meta.get("deletionTimestamp"):
                continue
            name = str(meta.get("name"))
            status = node.get("status") or {}
            usable = str((status.get("allocatable") or {}).get(GPU_RESOURCE, "0"))
            state = seen.get(name)
            if state is None:
                state = seen[name] = BootedNode(now, now + boot_s, now + boot_s + gpu_ready_s, usable)
                if usable != "0":
                    await _patch_status(kube, name, "0")
                continue
            taints = list((node.get("spec") or {}).get("taints") or [])
            if any(t.get("key") == taint for t in taints):
                if now >= state.ready_at:
                    rest = [t for t in taints if t.get("key") != taint]
                    await _patch_node(kube, name, {"spec": {"taints": rest}})
                    state.booted = now
                continue
            if state.booted is None:
                continue  # Karpenter puts the startup taint on at registration: not there yet
            if state.gpus_given is None and now >= max(state.gpu_at, state.booted + gpu_ready_s):
                if state.gpus != "0":
                    await _patch_status(kube, name, state.gpus)
                state.gpus_given = now
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=poll_s)
    return seen


async def _patch_status(kube: KubeClient, name: str, gpus: str) -> None:
    await _patch_node(kube, name, {"status": {"allocatable": {GPU_RESOURCE: gpus}}}, subresource="status")


async def _patch_node(
    kube: KubeClient, name: str, body: dict[str, Any], *, subresource: str | None = None
) -> None:
    try:
        if subresource:
            await kube.patch(resources.NODES, name, body, subresource=subresource)
        else:
            await kube.patch(resources.NODES, name, body)
    except ApiError as exc:
        if not exc.not_found:
            raise


CA_BUFFER_FLAGS: tuple[str, ...] = (
    "--capacity-buffer-controller-enabled=true",
    "--capacity-buffer-pod-injection-enabled=true",
)
"""cluster-autoscaler flags that turn on its CapacityBuffer controller and the fake pods it injects (both off by
default); the CRD comes from :func:`ca_crd_files`."""
CAPACITY_BUFFERS = Resource("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers", "CapacityBuffer")
POD_TEMPLATES = Resource("", "v1", "podtemplates", "PodTemplate")


def ca_crd_files(apis_dir: Path) -> list[Path]:
    """The CapacityBuffer CRD in kubernetes/autoscaler's ``cluster-autoscaler/apis`` (``config/crd``), the directory
    the build replaces the apis module with (bench/peers/build_autoscalers.sh: ``$CA_SRC/autoscaler/...``)."""
    path = apis_dir / "config" / "crd" / "autoscaling.x-k8s.io_capacitybuffers.yaml"
    if not path.is_file():
        raise PeerError(f"no CapacityBuffer CRD at {path}")
    return [path]


def ca_capacity_buffer(
    name: str,
    namespace: str,
    replicas: int,
    *,
    cpu_milli: int,
    memory_mib: int,
    gpu: int = 0,
    tolerations: Sequence[Mapping[str, str]] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A PodTemplate of one chunk (these requests and tolerations) and a CapacityBuffer of ``replicas`` chunks of it
    (the default strategy, ``buffer.x-k8s.io/active-capacity``: cluster-autoscaler keeps room for them)."""
    if replicas < 0:
        raise PeerError(f"a CapacityBuffer needs replicas >= 0, not {replicas}")
    requests = {"cpu": _cpu(cpu_milli), "memory": f"{memory_mib}Mi"}
    if gpu:
        requests[GPU_RESOURCE] = str(gpu)
    container: dict[str, Any] = {"name": "chunk", "image": "registry.k8s.io/pause:3.10"}
    container["resources"] = {"requests": requests, **({"limits": {GPU_RESOURCE: str(gpu)}} if gpu else {})}
    template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "template": {"spec": {"containers": [container], "tolerations": [dict(t) for t in tolerations]}},
    }
    buffer = {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podTemplateRef": {"name": name}, "replicas": replicas},
    }
    return template, buffer


async def install_cluster_autoscaler(
    kube: KubeClient,
    node_types: Sequence[NodeType],
    *,
    namespace: str = CA_NAMESPACE,
    max_count: int = CA_DEFAULT_MAX,
    crds: Sequence[Mapping[str, Any]] = (),
    startup_taints: Sequence[str] = (),
) -> None:
    """The namespace and the kwok provider's two ConfigMaps; with ``crds`` (:func:`load_crds` of
    :func:`ca_crd_files`), those CRDs too (for :data:`CA_BUFFER_FLAGS`)."""
    config = ca_provider_config(node_types, namespace)
    templates = ca_templates(node_types, namespace, max_count=max_count, startup_taints=startup_taints)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    if crds:
        await apply_crds(kube, crds)
    await _apply(kube, resources.NAMESPACES, ns)
    await _apply(kube, resources.CONFIGMAPS, config)
    await _apply(kube, resources.CONFIGMAPS, templates)


async def apply_capacity_buffer(kube: KubeClient, template: dict[str, Any], buffer: dict[str, Any]) -> None:
    """Apply :func:`ca_capacity_buffer`'s PodTemplate and CapacityBuffer (the CRD must be installed)."""
    await _apply(kube, POD_TEMPLATES, template)
    await _apply(kube, CAPACITY_BUFFERS, buffer)


# --- processes ------------------------------------------------------------------------------------------------


@dataclass
class PeerProcess:
    """A running peer: its argv, ports and log file."""

    name: str
    proc: subprocess.Popen[bytes]
    argv: tuple[str, ...]
    log_path: Path
    ports: Mapping[str, int] = field(default_factory=dict)
    health_url: str = ""

    def running(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Poll its health URL (Karpenter ``/readyz``, cluster-autoscaler ``/health-check``) until it answers 200;
        the seconds that took. Raises :class:`PeerError` (with its log's tail) if it exits or ``timeout`` passes."""
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise PeerError(f"{self.name} exited {self.proc.returncode}: {self.log_tail(800)}")
            try:
                if self.health_url and httpx.get(self.health_url, timeout=2.0).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout:
                raise PeerError(f"{self.name} not ready at {self.health_url} after {timeout:g} s")
            time.sleep(0.2)

    def stop(self, grace: float = _STOP_GRACE_S) -> int:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; its exit code (negative: the signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return int(self.proc.returncode)


def _start(
    name: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    ports: Mapping[str, int],
    health_url: str,
) -> PeerProcess:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                start_new_session=True,
            )
        except OSError as exc:
            raise PeerError(f"cannot start {name} ({argv[0]}): {exc}") from None
    return PeerProcess(name, proc, tuple(argv), log_path, dict(ports), health_url)


def _env(kubeconfig: Path, extra: Mapping[str, str]) -> dict[str, str]:
    keep = ("PATH", "HOME", "TMPDIR", "LANG")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["KUBECONFIG"] = str(kubeconfig)
    env.update(extra)
    return env


def start_karpenter(
    binary: Path,
    kubeconfig: Path,
    instance_types_file: Path,
    log_path: Path,
    *,
    extra_args: Sequence[str] = (),
    log_level: str = "info",
) -> PeerProcess:
    """Run Karpenter's kwok binary against the cluster (after :func:`install_karpenter`)."""
    ports = {"metrics": free_port(), "health": free_port()}
    argv = [
        str(binary),
        "--disable-leader-election",
        f"--metrics-port={ports['metrics']}",
        f"--health-probe-port={ports['health']}",
        f"--instance-types-file-path={instance_types_file}",
        f"--log-level={log_level}",
        *extra_args,
    ]
    health = f"http://127.0.0.1:{ports['health']}/readyz"
    return _start("karpenter", argv, _env(kubeconfig, {}), log_path, ports, health)


def start_cluster_autoscaler(
    binary: Path,
    kubeconfig: Path,
    log_path: Path,
    *,
    namespace: str = CA_NAMESPACE,
    extra_args: Sequence[str] = (),
    expander: str = "least-waste",
    verbosity: int = 2,
) -> PeerProcess:
    """Run cluster-autoscaler's kwok binary against the cluster (after :func:`install_cluster_autoscaler`).
    ``expander`` defaults to least-waste (its default, random, differs from run to run; the kwok provider has no
    pricing, so ``price`` fails)."""
    ports = {"address": free_port()}
    argv = [
        str(binary),
        "--cloud-provider=kwok",
        f"--kubeconfig={kubeconfig}",
        f"--namespace={namespace}",
        "--leader-elect=false",
        f"--address=127.0.0.1:{ports['address']}",
        f"--expander={expander}",
        f"--v={verbosity}",
        *extra_args,
    ]
    env = _env(kubeconfig, {"KWOK_PROVIDER_MODE": "local", "POD_NAMESPACE": namespace})
    health = f"http://127.0.0.1:{ports['address']}/health-check"
    return _start("cluster-autoscaler", argv, env, log_path, ports, health)


async def wait_karpenter_pools_ready(
    kube: KubeClient, *, timeout: float = 60.0, poll_s: float = 0.25
) -> float:
    """Wait, bounded, until every NodePool reports the condition ``Ready`` True; seconds waited.

    Karpenter's provisioner ignores a NodePool that is not ready yet ("ignoring nodepool, not ready") and looks again
    only on its next trigger, about 10 s later: pods created before then wait that long for their first NodeClaim,
    which a replay compressed 20× would count as 200 trace seconds Karpenter never costs a cluster it runs in."""
    start = time.monotonic()
    while True:
        pools, _ = await kube.list(NODEPOOLS)
        waiting = [
            str(p["metadata"]["name"])
            for p in pools
            if not any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        ]
        if pools and not waiting:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise PeerError(
                f"karpenter: NodePools not Ready after {timeout:g} s: {', '.join(waiting) or 'none found'}"
            )
        await asyncio.sleep(poll_s)


async def karpenter_teardown(kube: KubeClient, *, timeout: float = 60.0) -> int:
    """Delete the NodePools (Karpenter, still running, then removes its NodeClaims and their Nodes) and wait,
    bounded, until no NodeClaim is left; how many were left at the end (0 when all are gone)."""
    pools, _ = await kube.list(NODEPOOLS)
    for pool in pools:
        await kube.delete(NODEPOOLS, str(pool["metadata"]["name"]))
    deadline = time.monotonic() + timeout
    while True:
        try:
            claims, _ = await kube.list(NODECLAIMS)
        except ApiError as exc:
            if exc.not_found:
                return 0
            raise
        if not claims or time.monotonic() > deadline:
            return len(claims)
        await asyncio.sleep(0.5)
