"""Fault primitives against the real control plane: what a collector reads must look like a kubelet wrote it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from capstan.faults import Kubelet, Termination
from capstan.kube import ApiError, KubeClient, resources
from capstan.sandbox import Sandbox

pytestmark = pytest.mark.integration


@pytest.fixture
def kubelet(kube: KubeClient, sandbox: Sandbox) -> Kubelet:
    return Kubelet(kube, sandbox.directory / "pod-logs")


async def running_pod(kube: KubeClient, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    await kube.create(resources.PODS, body)
    for _ in range(300):
        pod = await kube.get(resources.PODS, name, namespace)
        if (pod.get("status") or {}).get("phase") == "Running":
            return pod
        await asyncio.sleep(0.05)
    pytest.fail(f"pod {name} never became Running on a kwok node")


def containers(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "image": f"example.com/{n}:1"} for n in names]


async def events_for(kube: KubeClient, namespace: str, uid: str) -> list[dict[str, Any]]:
    items, _ = await kube.list(
        resources.EVENTS, namespace=namespace, field_selector=f"involvedObject.uid={uid}"
    )
    return items


async def test_oomkilled_restart_with_previous_log(
    kube: KubeClient, kubelet: Kubelet, namespace: str
) -> None:
    pod = await running_pod(kube, namespace, "app", {"containers": containers("main", "proxy")})
    await kubelet.restart_container(
        namespace,
        "app",
        "proxy",
        Termination.oom_killed(),
        previous_log=["starting", "allocating 4Gi", "killed"],
    )
    pod = await kubelet.restart_container(
        namespace, "app", "proxy", Termination.oom_killed(), previous_log=["again"]
    )
    statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    assert statuses["main"]["restartCount"] == 0
    proxy = statuses["proxy"]
    assert proxy["restartCount"] == 2
    term = proxy["lastState"]["terminated"]
    assert (term["reason"], term["exitCode"], term["signal"]) == ("OOMKilled", 137, 9)
    assert term["startedAt"] <= term["finishedAt"]
    assert proxy["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    previous = await kube.pod_log(namespace, "app", "proxy", previous=True)
    assert previous.strip() == "again"
    events = await events_for(kube, namespace, pod["metadata"]["uid"])
    backoff = [e for e in events if e["reason"] == "BackOff"]
    assert len(backoff) == 1 and backoff[0]["count"] == 2  # the repeat bumped count, as the kubelet does
    assert backoff[0]["source"] == {"component": "kubelet", "host": pod["spec"]["nodeName"]}
    assert backoff[0]["involvedObject"]["fieldPath"] == "spec.containers{proxy}"


async def test_no_previous_log(kube: KubeClient, kubelet: Kubelet, namespace: str) -> None:
    await running_pod(kube, namespace, "nolog", {"containers": containers("main")})
    await kubelet.restart_container(namespace, "nolog", "main", Termination.error(2), previous_log=None)
    with pytest.raises(ApiError) as info:
        await kube.pod_log(namespace, "nolog", "main", previous=True)
    assert info.value.status >= 400


async def test_init_container_and_native_sidecar(kube: KubeClient, kubelet: Kubelet, namespace: str) -> None:
    spec = {
        "initContainers": [
            {"name": "migrate", "image": "example.com/migrate:1"},
            {"name": "mesh", "image": "example.com/mesh:1", "restartPolicy": "Always"},
        ],
        "containers": containers("main"),
    }
    await running_pod(kube, namespace, "withinit", spec)
    await kubelet.restart_container(
        namespace, "withinit", "mesh", Termination.killed("SIGTERM"), then="running"
    )
    pod = await kubelet.restart_container(
        namespace, "withinit", "migrate", Termination.error(3), previous_log=["x"]
    )
    init = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
    assert init["mesh"]["restartCount"] == 1 and "running" in init["mesh"]["state"]
    assert init["mesh"]["lastState"]["terminated"]["exitCode"] == 143
    assert init["migrate"]["restartCount"] == 1
    assert (await kube.pod_log(namespace, "withinit", "migrate", previous=True)).strip() == "x"


async def test_waiting_reasons_and_probe_failures(kube: KubeClient, kubelet: Kubelet, namespace: str) -> None:
    pod = await running_pod(kube, namespace, "probed", {"containers": containers("main", "side")})
    await kubelet.set_waiting(namespace, "probed", "side", "ImagePullBackOff")
    pod = await kubelet.probe_failure(namespace, "probed", "main", "Liveness", failures=3)
    statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    assert statuses["side"]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    assert statuses["main"]["restartCount"] == 1
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    events = await events_for(kube, namespace, pod["metadata"]["uid"])
    unhealthy = [e for e in events if e["reason"] == "Unhealthy"]
    assert len(unhealthy) == 1 and unhealthy[0]["count"] == 3 and unhealthy[0]["type"] == "Warning"
    assert any(e["reason"] == "Killing" for e in events)
    assert any(e["reason"] == "Failed" and "ErrImagePull" in e["message"] for e in events)
    with pytest.raises(ValueError, match="unknown waiting reason"):
        await kubelet.set_waiting(namespace, "probed", "main", "Sleepy")


async def test_node_pressure_and_gpu_loss(kube: KubeClient, kubelet: Kubelet) -> None:
    node = await kubelet.node_condition(
        "gpu-l4-0", "MemoryPressure", "True", "KubeletHasInsufficientMemory", "low"
    )
    try:
        cond = next(c for c in node["status"]["conditions"] if c["type"] == "MemoryPressure")
        assert cond["status"] == "True"
        node = await kubelet.set_gpu_allocatable("gpu-l4-0", 0)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    finally:
        await kubelet.set_gpu_allocatable("gpu-l4-0", 4)
        await kubelet.node_condition("gpu-l4-0", "MemoryPressure", "False", "KubeletHasSufficientMemory")


async def test_node_not_ready_and_restore(kube: KubeClient, kubelet: Kubelet) -> None:
    await kubelet.node_condition("cpu-1", "Ready", "False", "KubeletNotReady", "container runtime is down")
    node = await kube.get(resources.NODES, "cpu-1")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    await kubelet.restore_node("cpu-1")
    for _ in range(200):
        node = await kube.get(resources.NODES, "cpu-1")
        conds = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        if conds.get("Ready") == "True":
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("kwok did not take the node back")


def test_log_dir_is_the_sandbox_one(sandbox: Sandbox) -> None:
    assert Path(sandbox.directory / "pod-logs").is_dir()
