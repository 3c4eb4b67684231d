"""Events outlive the API server's --event-ttl in the history store (a sandbox of its own with a 15 s TTL)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from capstan.faults import Kubelet
from capstan.kube import KubeClient, resources
from capstan.record import KubeCollector, KubernetesConfig
from capstan.sandbox import NodePool, Sandbox, SandboxSpec, find_toolchain
from capstan.store import open_store

pytestmark = pytest.mark.integration


@pytest.fixture
def short_ttl_sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    toolchain = find_toolchain()
    assert toolchain is not None
    box = Sandbox(tmp_path / "sandbox", toolchain)
    box.up(SandboxSpec(name="ttl", event_ttl="15s", node_pools=[NodePool(name="cpu", count=1)]), timeout=240)
    try:
        yield box
    finally:
        box.down()


async def test_events_are_queryable_after_the_api_server_expired_them(
    short_ttl_sandbox: Sandbox, tmp_path: Path
) -> None:
    state = short_ttl_sandbox.load_state()
    assert state is not None
    store = open_store(str(tmp_path / "history.db"))
    async with await KubeClient.from_kubeconfig(state.kubeconfig) as kube:
        collector = KubeCollector(
            KubernetesConfig(kinds=["Pod"], flush_interval_s=0.05),
            store.history,
            connect=functools.partial(KubeClient.from_kubeconfig, state.kubeconfig),
            source="ttl",
        )
        stop = asyncio.Event()
        task = asyncio.create_task(collector.run(stop))
        try:
            pod = await kube.create(
                resources.PODS,
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                 "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]}},
            )  # fmt: skip
            kubelet = Kubelet(kube, short_ttl_sandbox.directory / "pod-logs")
            await kubelet.event(pod, "BackOff", "Back-off restarting failed container c", type_="Warning")
            uid = pod["metadata"]["uid"]
            loop = asyncio.get_running_loop()
            end = loop.time() + 60
            while not [e for e in store.history.events(involved_uid=uid) if e.reason == "BackOff"]:
                assert loop.time() < end, "the event was never recorded"
                await asyncio.sleep(0.1)
            # Wait until the API server has expired it.
            end = loop.time() + 180
            while True:
                items, _ = await kube.list(
                    resources.EVENTS, namespace="default", field_selector=f"involvedObject.uid={uid}"
                )
                if not [e for e in items if e["reason"] == "BackOff"]:
                    break
                assert loop.time() < end, "the API server never expired the event"
                await asyncio.sleep(1)
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
    kept = [e for e in store.history.events(involved_uid=uid) if e.reason == "BackOff"]
    store.close()
    assert kept and kept[0].message == "Back-off restarting failed container c"
