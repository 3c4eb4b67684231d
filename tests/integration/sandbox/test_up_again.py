"""A sandbox brought down and up again on its data keeps serving pod logs, even when kwok gets another port."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from capstan.faults import Kubelet, Termination
from capstan.kube import ApiError, KubeClient, resources
from capstan.sandbox import NodePool, Sandbox, SandboxSpec, find_toolchain

pytestmark = pytest.mark.integration


async def _pod_with_previous_log(kube: KubeClient, log_dir: Path) -> None:
    await kube.create(
        resources.PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "example.com/app:1"}]},
        },
    )
    for _ in range(400):
        pod = await kube.get(resources.PODS, "web", "default")
        if (pod.get("status") or {}).get("phase") == "Running":
            break
    await Kubelet(kube, log_dir).restart_container(
        "default", "web", "app", Termination.error(1), previous_log=["before the restart"]
    )


async def _previous_log(kube: KubeClient) -> str:
    """The previous log of web/app. kwok learns which logs it serves from its own watch after it starts, so right
    after ``up`` the first requests may find none: retried, bounded (~30 s), and the last error is raised."""
    for attempt in range(60):
        try:
            return await kube.pod_log("default", "web", "app", previous=True)
        except ApiError as exc:
            if exc.status != 400 or attempt == 59:
                raise
            await asyncio.sleep(0.5)
    raise AssertionError("unreachable")


async def test_logs_are_served_after_the_sandbox_comes_up_again_on_another_kwok_port(tmp_path: Path) -> None:
    toolchain = find_toolchain()
    assert toolchain is not None
    box = Sandbox(tmp_path / "sandbox", toolchain)
    spec = SandboxSpec(name="again", node_pools=[NodePool(name="cpu", count=1)])
    state = box.up(spec, timeout=240)
    try:
        async with await KubeClient.from_kubeconfig(state.kubeconfig) as kube:
            await _pod_with_previous_log(kube, box.directory / "pod-logs")
        old_kwok = state.ports["kwok"]
    finally:
        box.down()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", old_kwok))  # kwok cannot have its old port back
    try:
        state = box.up(spec, timeout=240)
        try:
            assert state.ports["kwok"] != old_kwok
            async with await KubeClient.from_kubeconfig(state.kubeconfig) as kube:
                text = await _previous_log(kube)
                assert "before the restart" in text
        finally:
            box.down()
    finally:
        blocker.close()
