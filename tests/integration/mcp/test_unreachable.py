"""An API server that cannot be reached, or that refuses these credentials: every tool still answers (saying what
could not be read), the server never crashes, and once the cluster is back the same server serves it."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client
from mcp.types import TextContent

from capstan.kube import KubeClient
from capstan.mcp import TOOLS, ClusterLogs, LiveSource, create_server
from capstan.redact import Redactor
from tests.integration.mcp.calls import Scene, kubeconfig_with_token, samples_for

pytestmark = pytest.mark.integration

SCENE = Scene(namespace="shop", workload="web", pod="web-0")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pointing_at(kubeconfig: Path, server: str, out: Path) -> Path:
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = server
    out.write_text(yaml.safe_dump(config))
    return out


async def answers(kubeconfig: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        kube.timeout = 3.0
        server = create_server(
            LiveSource(kube, redactor=Redactor(), max_age_s=0.0), ClusterLogs(kube), redactor=Redactor()
        )
        async with Client(server) as client:
            for spec, args in samples_for(SCENE):
                result = await client.call_tool(spec.name, args)
                block = result.content[0]
                assert isinstance(block, TextContent)
                body = json.loads(block.text)
                assert "internal error" not in str(body.get("error", "")), (spec.name, body)
                out[spec.name] = body
    return out


async def test_an_unreachable_cluster_is_an_answer_not_a_crash(kubeconfig: Path, tmp_path: Path) -> None:
    dead = pointing_at(kubeconfig, f"https://127.0.0.1:{closed_port()}", tmp_path / "dead.kubeconfig")
    got = await answers(dead)
    assert set(got) == {s.name for s in TOOLS}
    assert any("Node" in line for line in got["overview"]["cannot_read"])
    assert got["overview"]["counts"] == {"nodes": {"total": 0, "ready": 0}, "pods": {"total": 0}}
    assert got["problems"]["blind"], "problems says which kinds the analyzers could not read"


async def test_refused_credentials_are_an_answer_not_a_crash(kubeconfig: Path, tmp_path: Path) -> None:
    refused = kubeconfig_with_token(kubeconfig, "not-a-token-the-server-knows-0123456789", tmp_path / "k")
    got = await answers(refused)
    assert set(got) == {s.name for s in TOOLS}
    reasons = " ".join(got["overview"]["cannot_read"])
    assert "Unauthorized" in reasons or "401" in reasons or "unauthorized" in reasons.lower()
