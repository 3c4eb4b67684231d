"""The gateway in a pod (the chart's identity for it, deploy/helm/capstan: templates/gateway.yaml): `capstan route
serve` with `discovery.kubernetes` and no kubeconfig reaches the API server with its ServiceAccount's token,
discovers the serving pods of its namespace and relays to them; the account may list and watch pods there, and
nothing else, nowhere else (403)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from capstan.kube import KubeClient, resources
from capstan.sandbox import Sandbox
from tests.fixtures.identity import assert_forbidden, in_cluster_identity

from ._servers import ServerThread, Upstream
from .test_discovery import serving_pod

pytestmark = pytest.mark.integration


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, ServerThread]]:
    up = Upstream("a")
    with ServerThread(up.app) as server:
        yield up, server


async def test_route_serve_in_a_pod_discovers_its_namespace_s_pods_and_may_read_nothing_else(
    sandbox: Sandbox,
    kube: KubeClient,
    namespace: str,
    kubeconfig: Path,
    tmp_path: Path,
    upstream: tuple[Upstream, ServerThread],
) -> None:
    up, server = upstream
    discovery = {"kubernetes": {"namespace": namespace, "selector": "app=llm", "models": ["m"]}}
    values = ("--set-json", f"gateway.config={json.dumps({'discovery': discovery})}")
    async with in_cluster_identity(
        "gateway", sandbox, kube, kubeconfig, tmp_path / "account", *values
    ) as env:
        await serving_pod(kube, namespace, "llm-a", server.url, {"app": "llm"})
        config = tmp_path / "route.yaml"
        config.write_text(json.dumps({"discovery": discovery, "proxy": {"poll_interval_s": 0.1}}))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [sys.executable, "-m", "capstan.cli.main", "route", "serve", "--config", str(config),
                "--port", str(port)]  # fmt: skip
        pod_env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | env
        log = tmp_path / "gateway.log"
        proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=pod_env)
        try:
            url = f"http://127.0.0.1:{port}"
            healthy: list[str] = []
            async with httpx.AsyncClient(timeout=10) as http:
                for _ in range(300):  # bounded: 60 s
                    assert proc.poll() is None, log.read_text()[-2000:]
                    try:
                        answer = await http.get(f"{url}/health")
                        healthy = answer.json().get("healthy_endpoints", [])
                    except httpx.HTTPError:
                        healthy = []
                    if healthy:
                        break
                    await asyncio.sleep(0.2)
                assert healthy == [f"{namespace}/llm-a"], log.read_text()[-2000:]
                assert (await http.get(f"{url}/healthz")).text == "ok\n"
                reply = await http.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "hello"}]},
                )
                assert reply.status_code == 200 and len(up.requests) == 1, reply.text
            async with await KubeClient.in_cluster(environ=env) as account:
                await account.list(resources.PODS, namespace=namespace)  # granted
                await assert_forbidden(
                    "list pods elsewhere", account.list(resources.PODS, namespace="default")
                )
                await assert_forbidden("list every pod", account.list(resources.PODS))
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": namespace},
                       "spec": {"containers": [{"name": "c", "image": "example.com/x:1"}]}}  # fmt: skip
                await assert_forbidden("create a pod", account.create(resources.PODS, pod))
                await assert_forbidden(
                    "delete the serving pod", account.delete(resources.PODS, "llm-a", namespace)
                )
                await assert_forbidden("list Services", account.list(resources.SERVICES, namespace=namespace))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
