"""The router discovering its endpoints in Kubernetes: serving pods picked by labels on the real control plane.

kwok pods have no reachable IP, so each pod carries the ``capstan.io/url`` annotation pointing at a real upstream
on loopback; everything else — the informer, readiness, labels, deletion — is the cluster's.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import zmq

from capstan.config import load_model
from capstan.kube import KubeClient, KubeConnect, resources
from capstan.kvcache import BlockStored, block_hashes, encode_kv_batch
from capstan.route import (
    KubernetesEndpointSource,
    RouteConfig,
    Router,
    upstream_for,
)

from ._servers import ServerThread, Upstream

pytestmark = pytest.mark.integration


def connect_to(kubeconfig: Path) -> KubeConnect:
    return functools.partial(KubeClient.from_kubeconfig, kubeconfig)


@pytest.fixture(scope="module")
def upstreams() -> Iterator[list[tuple[Upstream, ServerThread]]]:
    ups = [Upstream("a"), Upstream("b")]
    servers = [ServerThread(u.app).__enter__() for u in ups]
    yield list(zip(ups, servers, strict=True))
    for s in servers:
        s.__exit__()


async def serving_pod(
    kube: KubeClient,
    namespace: str,
    name: str,
    url: str,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> None:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {"capstan.io/url": url, **(annotations or {})},
        },
        "spec": {"containers": [{"name": "vllm", "image": "example.com/vllm:1"}]},
    }
    await kube.create(resources.PODS, body)


async def wait_for(cond: Any, what: str, timeout: float = 60) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:  # bounded by the deadline
        if cond():
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"timed out waiting {what}")


async def test_serving_pods_become_endpoints_and_leave_when_deleted(
    kube: KubeClient, namespace: str, kubeconfig: Path, upstreams: list[tuple[Upstream, ServerThread]]
) -> None:
    (_, srv_a), (up_b, srv_b) = upstreams
    await serving_pod(kube, namespace, "llm-a", srv_a.url, {"app": "llm", "capstan.io/model": "m"})
    await serving_pod(kube, namespace, "llm-b", srv_b.url, {"app": "llm", "capstan.io/model": "m"})
    await serving_pod(kube, namespace, "other", srv_b.url, {"app": "not-llm"})  # not selected
    cfg = load_model(
        RouteConfig,
        {
            "discovery": {"kubernetes": {"namespace": namespace, "selector": "app=llm"}},
            "proxy": {"poll_interval_s": 0.05},
        },
        "test",
    )
    assert cfg.discovery is not None
    source = KubernetesEndpointSource(cfg.discovery.kubernetes, connect=connect_to(kubeconfig))
    router = Router(cfg, source, upstream=upstream_for(cfg.proxy))
    with ServerThread(router.app) as gateway:
        await wait_for(
            lambda: (
                sorted(e.endpoint.name for e in router.snapshot(set()) if e.healthy)
                == [f"{namespace}/llm-a", f"{namespace}/llm-b"]
            ),
            "for both serving pods to be healthy endpoints",
        )
        async with httpx.AsyncClient(timeout=30) as client:
            models = (await client.get(f"{gateway.url}/v1/models")).json()
            assert [m["id"] for m in models["data"]] == ["m"]
            reply = await client.post(
                f"{gateway.url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hello"}]},
            )
            assert reply.status_code == 200, reply.text
        await kube.delete(resources.PODS, "llm-a", namespace)
        await wait_for(
            lambda: [e.endpoint.name for e in router.snapshot(set())] == [f"{namespace}/llm-b"],
            "for the deleted pod to leave the rotation",
        )
        served_before = len(up_b.requests)
        async with httpx.AsyncClient(timeout=30) as client:
            for i in range(3):
                reply = await client.post(
                    f"{gateway.url}/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": f"again {i}"}]},
                )
                assert reply.status_code == 200
        assert len(up_b.requests) == served_before + 3  # everything goes to the one left


async def test_kv_events_of_discovered_pods_feed_the_precise_index_until_the_pod_leaves(
    kube: KubeClient, namespace: str, kubeconfig: Path, upstreams: list[tuple[Upstream, ServerThread]]
) -> None:
    """A serving pod that names its KV-event publisher is subscribed to when it joins and dropped when it goes."""
    (_, srv_a), _ = upstreams
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    address = f"tcp://127.0.0.1:{pub.bind_to_random_port('tcp://127.0.0.1')}"
    labels = {"app": "llm-kv", "capstan.io/model": "m"}
    await serving_pod(kube, namespace, "kv-a", srv_a.url, labels, {"capstan.io/kv-events": address})
    cfg = load_model(
        RouteConfig,
        {
            "discovery": {"kubernetes": {"namespace": namespace, "selector": "app=llm-kv"}},
            "scheduler": {"prefix": {"kind": "precise"}},
            "proxy": {"poll_interval_s": 0.05},
        },
        "test",
    )
    assert cfg.discovery is not None
    source = KubernetesEndpointSource(cfg.discovery.kubernetes, connect=connect_to(kubeconfig))
    router = Router(cfg, source, upstream=upstream_for(cfg.proxy))
    tokens = list(range(64))
    seq = 0
    try:
        with ServerThread(router.app):
            await wait_for(
                lambda: any(e.healthy for e in router.snapshot(set())), "for the pod to be healthy"
            )
            precise = router.scheduler.precise
            assert precise is not None

            def published() -> bool:  # PUB/SUB joins asynchronously: publish until the router has applied it
                nonlocal seq
                batch = encode_kv_batch([BlockStored(block_hashes(tokens, 16), None, tokens, 16)], 1.0)
                pub.send_multipart([b"kv@pod@m", seq.to_bytes(8, "big"), batch])
                seq += 1
                return precise.size > 0

            await wait_for(published, "for the pod's KV events to reach the index")
            assert precise.match(block_hashes(tokens, 16), [f"{namespace}/kv-a"]) == {f"{namespace}/kv-a": 4}
            await kube.delete(resources.PODS, "kv-a", namespace)
            await wait_for(lambda: precise.size == 0, "for the departed pod's blocks to be dropped")
    finally:
        pub.close(linger=0)
        ctx.term()
