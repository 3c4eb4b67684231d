"""Planted secrets on the real sandbox: the MCP server reading a live cluster and a real SQLite history, every
tool called with every argument shape its schema allows, answers without one of them.

The secrets of tests/unit/mcp/test_planted_secrets.py are planted in real objects this time: a Deployment (its
annotations and pod template: env values by name and by shape, an args flag, a URL, a bearer header in the
command, the last-applied annotation), the pods the controllers make from it, a ConfigMap, a Secret, a Warning
Event, the crashed container's termination message and previous log (served by the pod-log API), and the store's
recorded rows. The server reads them through ``LiveSource`` and ``ClusterLogs`` as ``capstan mcp serve`` does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from capstan.faults import Kubelet, Termination
from capstan.kube import KubeClient, resources
from capstan.mcp import TOOLS, ClusterLogs, LiveSource, ToolSpec, create_server
from capstan.sandbox import Sandbox
from tests.unit.mcp.test_planted_secrets import NS, Plants, argument_shapes, planted_history, text_of

pytestmark = pytest.mark.integration


async def plant(kube: KubeClient, kubelet: Kubelet, namespace: str, p: Plants) -> str:
    """The planted objects in ``namespace``; returns the crash-looping pod's name."""
    last_applied = json.dumps({"kind": "Deployment", "data": {"token": p.core("last-applied")}})
    await kube.create(resources.CONFIGMAPS, {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shop-config", "namespace": namespace},
        "data": {"password": p.core("configmap key by name"), "dsn": p.url("configmap value by shape")},
    })  # fmt: skip
    await kube.create(resources.SECRETS, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shop-db", "namespace": namespace},
        "stringData": {"password": p.core("secret data")},
    })  # fmt: skip
    container = {
        "name": "app",
        "image": "example.com/shop:1",
        "command": ["sh", "-c", f"curl -H '{p.bearer('pod command')}' http://api"],
        "args": [f"--db-password={p.core('pod args flag')}", p.url("pod args url")],
        "env": [
            {"name": "DB_PASSWORD", "value": p.core("pod env by name")},
            {"name": "NOTES", "value": p.kv("pod env by shape")},
        ],
        "envFrom": [{"configMapRef": {"name": "shop-config"}}],
    }
    await kube.create(resources.DEPLOYMENTS, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace, "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": last_applied,
            "example.com/api-token": p.core("annotation by name"),
            "example.com/ci": p.github("annotation by shape"),
        }},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container]}}},
    })  # fmt: skip
    await kube.create(resources.SERVICES, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    })  # fmt: skip
    pod = None
    for _ in range(2400):  # bounded: 120 s for the controllers and kwok (30 s ran out under load)
        pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector="app=web")
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if running:
            pod = running[0]
            break
        await asyncio.sleep(0.05)
    assert pod is not None, "the planted Deployment's pod never ran on a kwok node"
    name = str(pod["metadata"]["name"])
    log = [
        "starting",
        f"ERROR cannot connect: {p.url('log url')}",
        f"ERROR request failed with {p.bearer('log bearer')}",
        f"FATAL {p.kv('log kv')}",
        f"WARN token {p.github('log github')}",
    ]
    for _ in range(2):
        await kubelet.restart_container(
            namespace, name, "app", Termination.error(1, p.url("termination message")), previous_log=log
        )
    await kubelet.event(pod, "Unhealthy", f"probe failed: {p.kv('event message')}", type_="Warning")
    return name


def live_shapes(spec: ToolSpec, namespace: str, pod: str) -> list[dict[str, Any]]:
    """The unit test's argument shapes, pointed at the live namespace and pod."""
    out = []
    for args in argument_shapes(spec):
        live = {k: (namespace if v == NS else v) for k, v in args.items()}
        if live.get("name") == "web-5d9c-0" or live.get("pod") == "web-5d9c-0":
            live = {k: (pod if v == "web-5d9c-0" else v) for k, v in live.items()}
        out.append(live)
    return out


async def test_no_planted_secret_reaches_an_answer_from_the_live_cluster(
    kube: KubeClient, namespace: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    p = Plants()
    pod = await plant(kube, Kubelet(kube, sandbox.directory / "pod-logs"), namespace, p)
    store = planted_history(p, tmp_path / "history.db")
    try:
        redactor = store.history.redactor(create_key=True)
        server = create_server(
            LiveSource(kube, redactor=redactor, history=store.history, namespace=namespace),
            ClusterLogs(kube),
            redactor=redactor,
        )
        answers: dict[str, str] = {}
        async with Client(server) as client:
            for spec in TOOLS:
                for args in live_shapes(spec, namespace, pod):
                    try:
                        result = await client.call_tool(spec.name, args)
                    except MCPError as err:
                        answers[f"{spec.name}({args}) error"] = err.message
                        continue
                    answers[f"{spec.name}({args})"] = text_of(result)
        leaks = {where: [c for c, t in answers.items() if core in t] for core, where in p.where.items()}
        assert {w: calls for w, calls in leaks.items() if calls} == {}
        named = {
            tool: any(pod in t or "shop-config" in t for c, t in answers.items() if c.startswith(f"{tool}("))
            for tool in ("problems", "diagnose", "get_resource", "logs", "events")
        }
        assert all(named.values()), f"the planted objects must reach the answers: {named}"
        assert any("ERROR cannot connect" in t for c, t in answers.items() if c.startswith("logs(")), (
            "the previous log's error lines reach the logs tool (redacted)"
        )
    finally:
        store.close()
