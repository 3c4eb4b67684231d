"""The ``logs`` tool against the real control plane: a crash-looping pod whose previous container logged an error
and a password, read through the pod-log API (kwok serves it from files) by the MCP server over the SDK's in-memory
client: the error line is served, the password never."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from capstan.faults import Kubelet, Termination
from capstan.kube import KubeClient, resources
from capstan.mcp import ClusterLogs, LiveSource, create_server
from capstan.redact import Redactor
from capstan.sandbox import Sandbox

pytestmark = pytest.mark.integration

PLANTED_PASSWORD = "Pl4nted-logs-pw-8Rv2"


async def running(kube: KubeClient, namespace: str, name: str) -> None:
    await kube.create(
        resources.PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": {"containers": [{"name": "app", "image": "example.com/worker:1"}]},
        },
    )
    for _ in range(1200):  # bounded: 60 s (the shared sandbox may be busy with earlier tests' objects)
        pod = await kube.get(resources.PODS, name, namespace)
        if (pod.get("status") or {}).get("phase") == "Running":
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"pod {name} never ran on a kwok node")


def payload(result: Any) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, TextContent)
    data: dict[str, Any] = json.loads(block.text)
    return data


async def test_the_previous_log_of_a_crash_looping_pod_is_served_without_its_secret(
    kube: KubeClient, namespace: str, sandbox: Sandbox
) -> None:
    kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
    await running(kube, namespace, "worker")
    for _ in range(2):
        await kubelet.restart_container(
            namespace,
            "worker",
            "app",
            Termination.error(1),
            previous_log=[
                "INFO starting worker",
                f"INFO connecting to postgres://admin:{PLANTED_PASSWORD}@db:5432/shop",
                f"FATAL: password authentication failed for user admin (password={PLANTED_PASSWORD})",
            ],
        )
    server = create_server(LiveSource(kube, redactor=Redactor()), ClusterLogs(kube), redactor=Redactor())
    async with Client(server) as client:
        previous = await client.call_tool(
            "logs", {"name": "worker", "namespace": namespace, "previous": True}
        )
        everything = await client.call_tool(
            "logs", {"name": "worker", "namespace": namespace, "previous": True, "errors_only": False}
        )
        ghost = await client.call_tool("logs", {"name": "ghost", "namespace": namespace})

    answer = payload(previous)
    assert not previous.is_error and answer["pods"] == 1
    (entry,) = answer["containers"]
    assert "unreadable" not in entry, entry
    assert (entry["pod"], entry["container"], entry["matched"]) == ("worker", "app", 1)
    (line,) = entry["lines"]
    assert "FATAL: password authentication failed for user admin" in line
    assert len(payload(everything)["containers"][0]["lines"]) == 3  # the whole previous log, read live
    for result in (previous, everything):
        text = json.dumps(payload(result)) + json.dumps(result.structured_content)
        assert PLANTED_PASSWORD not in text
    assert (
        ghost.is_error and payload(ghost)["error"] == f"logs: no Pod {namespace}/ghost in the cluster state"
    )
