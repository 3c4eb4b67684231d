"""What bench/_autoscalers.py installs for the real Karpenter and cluster-autoscaler, built from Capstan node types:
the per-type labels, GPU capacity and taints reach both peers' configuration, in a fixed order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench._autoscalers import (
    CA_DURATION_FLAGS,
    CA_GROUP_LABEL,
    CA_MAX_ANNOTATION,
    CA_MIN_ANNOTATION,
    PeerError,
    ca_capacity_buffer,
    ca_flags_for_speed,
    ca_provider_config,
    ca_templates,
    find_karpenter,
    karpenter_flags_for_speed,
    karpenter_instance_types,
    karpenter_node_pools,
)

from capstan.capacity import NodeType, Taint

pytestmark = pytest.mark.unit

GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
TYPES = (
    NodeType("l4-1", 8000, 32768, gpu=1, gpu_model="NVIDIA-L4", price_per_hour=0.8, taints=(GPU_TAINT,)),
    NodeType(
        "h100-8", 96000, 1048576, gpu=8, gpu_model="NVIDIA-H100", price_per_hour=98.0, taints=(GPU_TAINT,),
        capacity_type="spot", labels=(("team", "ml"),), max_count=3,
    ),
    NodeType("cpu-16", 16500, 65536, price_per_hour=0.77),
)  # fmt: skip


def test_karpenter_instance_types_carry_capacity_and_per_type_labels() -> None:
    types = {t["name"]: t for t in karpenter_instance_types(TYPES)}
    assert list(types) == ["l4-1", "h100-8", "cpu-16"]
    assert types["l4-1"]["resources"] == {
        "cpu": "8", "memory": "32768Mi", "pods": "110", "nvidia.com/gpu": "1", "ephemeral-storage": "200Gi",
    }  # fmt: skip
    assert types["cpu-16"]["resources"]["cpu"] == "16500m"
    assert "nvidia.com/gpu" not in types["cpu-16"]["resources"]
    (offer,) = types["h100-8"]["offerings"]
    assert offer["Price"] == 98.0 and offer["Available"] is True
    reqs = {r["key"]: r["values"] for r in offer["Requirements"]}
    assert reqs == {
        "karpenter.sh/capacity-type": ["spot"],
        "topology.kubernetes.io/zone": ["test-zone-a"],
        "nvidia.com/gpu.product": ["NVIDIA-H100"],
        "nvidia.com/gpu.present": ["true"],
        "nvidia.com/gpu.count": ["8"],
        "team": ["ml"],
    }
    # the instance type is Karpenter's own label; it is not repeated as an offering requirement
    assert all(r["key"] != "node.kubernetes.io/instance-type" for r in offer["Requirements"])
    json.dumps(types)  # the file is JSON


def test_karpenter_gets_one_node_pool_per_taint_set() -> None:
    pools = karpenter_node_pools(TYPES, consolidate_after="10s")
    assert [p["metadata"]["name"] for p in pools] == ["capstan-0", "capstan-1"]
    by_types = {
        tuple(p["spec"]["template"]["spec"]["requirements"][0]["values"]): p["spec"]["template"]["spec"]
        for p in pools
    }
    assert set(by_types) == {("cpu-16",), ("h100-8", "l4-1")}
    assert "taints" not in by_types[("cpu-16",)]
    assert by_types[("h100-8", "l4-1")]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert pools[0]["spec"]["disruption"]["consolidateAfter"] == "10s"
    assert pools == karpenter_node_pools(TYPES, consolidate_after="10s")


def test_cluster_autoscaler_templates_and_config() -> None:
    config = json.loads(ca_provider_config(TYPES, "ns")["data"]["config"])
    assert config["readNodesFrom"] == "configmap"
    assert config["nodegroups"] == {"fromNodeLabelKey": CA_GROUP_LABEL}
    assert config["nodes"]["skipTaint"] is True
    assert config["nodes"]["gpuConfig"] == {
        "gpuLabelKey": "nvidia.com/gpu.product",
        "availableGPUTypes": {"NVIDIA-H100": {}, "NVIDIA-L4": {}},
    }
    cm = ca_templates(TYPES, "ns", max_count=7)
    assert cm["metadata"] == {"name": "kwok-provider-templates", "namespace": "ns"}
    listing = json.loads(cm["data"]["templates"])
    assert listing["kind"] == "List"
    nodes = {n["metadata"]["name"]: n for n in listing["items"]}
    h100 = nodes["h100-8"]
    assert h100["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "h100-8"
    assert h100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100"
    assert h100["metadata"]["labels"][CA_GROUP_LABEL] == "h100-8"
    assert h100["metadata"]["labels"]["team"] == "ml"
    assert h100["metadata"]["annotations"] == {CA_MIN_ANNOTATION: "0", CA_MAX_ANNOTATION: "3"}
    assert nodes["l4-1"]["metadata"]["annotations"][CA_MAX_ANNOTATION] == "7"
    assert h100["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert h100["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert "taints" not in nodes["cpu-16"]["spec"]


def test_cpu_only_types_have_no_gpu_config() -> None:
    config = json.loads(ca_provider_config(TYPES[2:])["data"]["config"])
    assert "gpuConfig" not in config["nodes"]


@pytest.mark.parametrize(
    "types, message",
    [
        ((), "no node types"),
        ((TYPES[0], TYPES[0]), "repeated: l4-1"),
        ((NodeType("g", 1000, 1024, gpu=1),), "no gpu_model"),
    ],
)
def test_bad_node_types_are_one_line_errors(types: tuple[NodeType, ...], message: str) -> None:
    for build in (karpenter_instance_types, karpenter_node_pools, ca_provider_config, ca_templates):
        with pytest.raises(PeerError, match=message):
            build(types)


def test_find_binary_takes_an_executable_path_or_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CAPSTAN_KARPENTER", "/nonexistent/karpenter-kwok")
    assert find_karpenter() is None
    binary = tmp_path / "karpenter-kwok"
    binary.write_text("#!/bin/sh\n")
    assert find_karpenter(binary) is None  # not executable
    binary.chmod(0o755)
    assert find_karpenter(binary) == binary
    monkeypatch.setenv("CAPSTAN_KARPENTER", str(binary))
    assert find_karpenter() == binary


def test_capacity_buffer_is_a_pod_template_and_a_buffer_of_it() -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    template, buffer = ca_capacity_buffer(
        "room", "ns", 2, cpu_milli=1500, memory_mib=1024, gpu=1, tolerations=[toleration]
    )
    (container,) = template["template"]["spec"]["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "1500m", "memory": "1024Mi", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    assert template["template"]["spec"]["tolerations"] == [toleration]
    assert buffer["apiVersion"] == "autoscaling.x-k8s.io/v1beta1"
    assert buffer["metadata"] == {"name": "room", "namespace": "ns"}
    assert buffer["spec"] == {"podTemplateRef": {"name": "room"}, "replicas": 2}
    with pytest.raises(PeerError, match="replicas >= 0"):
        ca_capacity_buffer("room", "ns", -1, cpu_milli=1000, memory_mib=1024)


def test_startup_taints_reach_both_peers() -> None:
    """The boot emulation's taint is a NodePool startup taint for Karpenter and a template taint (ignored by
    ``--startup-taint``) for cluster-autoscaler; without it neither carries one."""
    booting = {"key": "capstan.io/booting", "value": "true", "effect": "NoSchedule"}
    pools = karpenter_node_pools(TYPES, startup_taints=["capstan.io/booting"])
    assert all(p["spec"]["template"]["spec"]["startupTaints"] == [booting] for p in pools)
    assert all("startupTaints" not in p["spec"]["template"]["spec"] for p in karpenter_node_pools(TYPES))
    items = json.loads(ca_templates(TYPES, startup_taints=["capstan.io/booting"])["data"]["templates"])[
        "items"
    ]
    by_name = {n["metadata"]["name"]: n for n in items}
    assert by_name["cpu-16"]["spec"]["taints"] == [booting]
    assert by_name["l4-1"]["spec"]["taints"][-1] == booting and len(by_name["l4-1"]["spec"]["taints"]) == 2
    assert "taints" not in {n["metadata"]["name"]: n for n in json.loads(ca_templates(TYPES)["data"][
        "templates"])["items"]}["cpu-16"]["spec"]  # fmt: skip


def test_peer_timers_are_divided_by_the_speed_up() -> None:
    flags = ca_flags_for_speed(20.0, startup_taints=["capstan.io/booting"])
    values = dict(f[2:].split("=", 1) for f in flags)
    assert set(CA_DURATION_FLAGS) <= set(values)
    assert values["scan-interval"] == "500ms" and values["scale-down-unneeded-time"] == "30000ms"
    assert values["startup-taint"] == "capstan.io/booting"
    assert values["bypassed-scheduler-names"] == "default-scheduler"
    assert ca_flags_for_speed(1.0)[0] == "--scan-interval=10000ms"
    assert karpenter_flags_for_speed(10.0) == ["--batch-idle-duration=100ms", "--batch-max-duration=1000ms"]
