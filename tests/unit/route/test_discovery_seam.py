"""Endpoint discovery over its client seam: KubernetesEndpointSource given the scripted API server's client
(``tests/unit/kube/fakeapi``) through ``connect``. The same on the real control plane is
tests/integration/route/test_discovery.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from capstan.kube import resources
from capstan.route import Endpoint, KubernetesDiscoveryConfig, KubernetesEndpointSource
from tests.unit.kube.fakeapi import FakeApiServer, Watch

pytestmark = pytest.mark.unit

NS = "serving"


def serving(ready: bool, ip: str) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"status": {"phase": "Running", "podIP": ip, "conditions": conditions}}


async def test_ready_pods_are_endpoints_and_a_pod_that_turns_unready_leaves() -> None:
    fake = FakeApiServer(resources.PODS, namespace=NS)
    labels = {"labels": {"app": "llm", "capstan.io/model": "m"}}
    fake.put("p0", fields=serving(True, "10.0.0.1"), metadata=labels)
    fake.put("p1", fields=serving(False, "10.0.0.2"), metadata=labels)
    left = asyncio.Event()

    def events() -> list[dict[str, Any]]:
        left.set()
        return [fake.put("p0", fields=serving(False, "10.0.0.1"), metadata=labels)]

    fake.script(Watch(events, end="hold"))
    cfg = KubernetesDiscoveryConfig(namespace=NS, selector="app=llm")
    source = KubernetesEndpointSource(cfg, connect=fake.connect)
    await source.start()  # returns once the first list is in
    try:
        assert list(await source.endpoints()) == [Endpoint(f"{NS}/p0", "http://10.0.0.1:8000", ("m",))]
        async with asyncio.timeout(30):  # a guard against a hang, never a measurement
            await left.wait()
            for _ in range(1000):  # the change is applied within a few loop steps
                if not await source.endpoints():
                    break
                await asyncio.sleep(0)
        assert list(await source.endpoints()) == []
    finally:
        await source.stop()
    (first, watch) = fake.requests
    assert first.verb == "list" and first.query["labelSelector"] == "app=llm"
    assert watch.verb == "watch" and watch.query["labelSelector"] == "app=llm"
