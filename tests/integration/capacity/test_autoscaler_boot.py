"""The boot emulation the live bench gives the real Karpenter and cluster-autoscaler, on the sandbox's API server
and kube-scheduler: a node created the way a peer's kwok provider creates it (its startup taint on, all its GPUs
allocatable) has its GPUs held at 0 at once, loses the taint after the boot delay and gets its GPUs back after the
GPU-ready delay; a GPU pod waiting for it is bound only then."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from bench._autoscalers import emulate_boot

from capstan.capacity.live import BOOTING_TAINT, PURPOSE_LABEL
from capstan.kube import KubeClient, resources

pytestmark = pytest.mark.integration

POOL = "capstan.io/boot-test"


def peer_node(name: str, pool: str) -> dict[str, Any]:
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {POOL: pool, "kubernetes.io/hostname": name, "nvidia.com/gpu.count": "4"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [{"key": BOOTING_TAINT, "value": "true", "effect": "NoSchedule"}]},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def gpu_pod(name: str, namespace: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {POOL: pool},
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "c",
                    "image": "fake",
                    "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
                }
            ],
        },
    }


async def test_peer_nodes_boot_then_get_their_gpus(kube: KubeClient, namespace: str) -> None:
    pool = namespace
    name = f"boot-{namespace}"[:60]
    stop = asyncio.Event()
    await kube.create(resources.NODES, peer_node(name, pool))
    # a node of Capstan's own (it boots itself) is left alone
    own = peer_node(f"own-{namespace}"[:60], pool)
    own["metadata"]["labels"][PURPOSE_LABEL] = "pods"
    await kube.create(resources.NODES, own)
    await kube.create(resources.PODS, gpu_pod("waits", namespace, pool))
    t0 = time.time()
    task = asyncio.create_task(
        emulate_boot(
            kube, f"{POOL}={pool}", 1.5, 1.5, stop, taint=BOOTING_TAINT, skip_label=PURPOSE_LABEL, poll_s=0.1
        )
    )
    seen: list[tuple[bool, str, str]] = []  # (tainted, allocatable GPUs, pod's node) in order, deduplicated
    try:
        for _ in range(200):  # bounded: 200 × 0.05 s
            node = await kube.get(resources.NODES, name)
            pod = await kube.get(resources.PODS, "waits", namespace)
            state = (
                any(t["key"] == BOOTING_TAINT for t in node["spec"].get("taints") or []),
                node["status"]["allocatable"]["nvidia.com/gpu"],
                pod["spec"].get("nodeName", ""),
            )
            if not seen or seen[-1] != state:
                seen.append(state)
            if state[2]:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        booted = await asyncio.wait_for(task, 10)
        untouched = await kube.get(resources.NODES, own["metadata"]["name"])
        for n in (name, own["metadata"]["name"]):
            await kube.delete(resources.NODES, n)
    # the first poll may still see the GPUs the peer gave the node; then: held at 0, untainted, GPUs, bound
    assert seen[-1] == (False, "4", name)
    states = [s for s in seen if s != (True, "4", "")]
    assert states[0] == (True, "0", "") and (False, "0", "") in states
    assert list(booted) == [name]  # not Capstan's own node
    b = booted[name]
    assert b.booted is not None and b.gpus_given is not None
    assert b.booted - b.first_seen >= 1.5 and b.gpus_given - b.booted >= 1.5
    assert b.first_seen >= t0 - 1.0
    assert untouched["status"]["allocatable"]["nvidia.com/gpu"] == "4" and untouched["spec"]["taints"]
