"""What the end-to-end MCP tests share: one call per tool (:data:`SAMPLES`, sample arguments over a :class:`Scene`
made in the test's namespace), the scene itself (a Deployment whose pod crash-loops, logging), the server as a
subprocess (``capstan mcp serve`` with this checkout's sources) and the check that every tool answered.

A tool in ``capstan.mcp.TOOLS`` without a sample fails :func:`samples_for` (whoever adds a tool adds its sample
here); a sample of a tool the catalog does not have is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.types import CallToolResult, TextContent

from capstan.faults import Kubelet, Termination
from capstan.kube import KubeClient, resources
from capstan.mcp import TOOLS, ToolSpec

CONTAINER = "app"
CRASH_LOG = ["starting web", "FATAL: cannot reach db.shop.svc:5432: connection refused"]


@dataclass(frozen=True)
class Scene:
    """The objects the sample calls name: a Deployment ``workload`` in ``namespace`` and its crash-looping pod."""

    namespace: str
    workload: str
    pod: str
    container: str = CONTAINER


Sample = Callable[[Scene], dict[str, Any]]

SAMPLES: Mapping[str, Sample] = {
    "overview": lambda s: {"namespace": s.namespace},
    "problems": lambda s: {"namespace": s.namespace},
    "events": lambda s: {"namespace": s.namespace, "kind": "Pod", "name": s.pod},
    "get_resource": lambda s: {"kind": "Deployment", "name": s.workload, "namespace": s.namespace},
    "list_resources": lambda s: {
        "kind": "Pod",
        "namespace": s.namespace,
        "label_selector": f"app={s.workload}",
    },
    "search": lambda s: {"query": s.workload},
    "neighborhood": lambda s: {"kind": "Pod", "name": s.pod, "namespace": s.namespace},
    "logs": lambda s: {
        "kind": "Pod",
        "name": s.pod,
        "namespace": s.namespace,
        "container": s.container,
        "previous": True,
    },
    "changes": lambda s: {"kind": "Deployment", "name": s.workload, "namespace": s.namespace},
    "timeline": lambda s: {"namespace": s.namespace},
    "restarts": lambda s: {"namespace": s.namespace},
    "engine_events": lambda s: {},
    "gpu_capacity": lambda s: {},
    "diagnose": lambda s: {"kind": "Deployment", "name": s.workload, "namespace": s.namespace},
}


def samples_for(scene: Scene, tools: tuple[ToolSpec, ...] = TOOLS) -> list[tuple[ToolSpec, dict[str, Any]]]:
    """Every catalog tool with its sample arguments over ``scene``, in catalog order. A tool without a sample is
    an AssertionError naming it."""
    missing = [spec.name for spec in tools if spec.name not in SAMPLES]
    assert not missing, f"tests/integration/mcp/calls.py: add a sample call for {', '.join(missing)}"
    return [(spec, SAMPLES[spec.name](scene)) for spec in tools]


# ---- the scene --------------------------------------------------------------------------------------------------
async def crashing_deployment(kube: KubeClient, kubelet: Kubelet, namespace: str, name: str = "web") -> Scene:
    """A one-replica Deployment whose pod, once running on a kwok node, crashes twice with an error in its log."""
    labels = {"app": name}
    await kube.create(resources.DEPLOYMENTS, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": CONTAINER, "image": "example.com/web:1"}]},
        }},
    })  # fmt: skip
    pod = ""
    for _ in range(600):  # bounded: 30 s for the controllers and kwok
        pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector=f"app={name}")
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if running:
            pod = str(running[0]["metadata"]["name"])
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"deployment {namespace}/{name}: no pod ever ran on a kwok node")
    for _ in range(2):
        await kubelet.restart_container(
            namespace, pod, CONTAINER, Termination.error(1), previous_log=CRASH_LOG
        )
    return Scene(namespace, name, pod)


# ---- the server as a subprocess ---------------------------------------------------------------------------------
_MAIN = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
_LISTENING = re.compile(r"listening on (http://\S+/mcp)")


def server_command(*args: str) -> list[str]:
    """``capstan mcp serve ARGS`` run by this interpreter (this checkout's sources: see :func:`server_env`)."""
    return [sys.executable, "-c", _MAIN, "mcp", "serve", *args]


def server_env(**extra: str) -> dict[str, str]:
    """The test's environment (its PYTHONPATH names this checkout), without a KUBECONFIG or store to fall back
    on."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "CAPSTAN_HISTORY_STORE")}
    return env | extra


@dataclass
class HttpServer:
    """A running ``capstan mcp serve --transport http``: its URL and what it printed on stderr."""

    url: str
    process: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)


@contextlib.contextmanager
def http_server(*args: str, timeout_s: float = 60.0) -> Iterator[HttpServer]:
    """Start the HTTP transport on a free loopback port (``--port 0``), wait for its listening line on stderr,
    and stop it afterwards."""
    proc = subprocess.Popen(
        server_command("--transport", "http", "--port", "0", *args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(),
    )
    assert proc.stderr is not None
    lines: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def drain() -> None:  # reads stderr to its end so the server never blocks on a full pipe
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            m = _LISTENING.search(line)
            if m and not url:
                url.append(m.group(1))
                found.set()
        found.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout_s
        while not found.wait(0.1):
            if time.monotonic() > deadline:
                raise AssertionError(f"mcp serve printed no listening line in {timeout_s:g} s: {lines}")
        if not url:
            raise AssertionError(f"mcp serve exited ({proc.wait()}) before listening: {lines}")
        yield HttpServer(url[0], proc, lines)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        reader.join(5)


# ---- calling every tool ----------------------------------------------------------------------------------------
def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call_every_tool(client: Client, scene: Scene, *, store: bool) -> dict[str, dict[str, Any]]:
    """Call every catalog tool with its sample over ``scene`` and check the answer: no error, except the history
    tools when the server has no store (one line naming the store); every answer JSON with its token count.
    Returns the answers by tool name."""
    listed = {t.name for t in (await client.list_tools()).tools}
    assert listed == {spec.name for spec in TOOLS}
    answers: dict[str, dict[str, Any]] = {}
    for spec, arguments in samples_for(scene):
        result = await client.call_tool(spec.name, arguments)
        text = text_of(result)
        body: dict[str, Any] = json.loads(text)
        if spec.history and not store:
            assert result.is_error, f"{spec.name} answered without a store: {text[:300]}"
            assert "store" in body["error"] and "\n" not in body["error"], body
        else:
            assert not result.is_error, f"{spec.name}({arguments}): {text[:500]}"
            assert isinstance(body.get("tokens"), int) and body["tokens"] > 0, f"{spec.name}: {text[:300]}"
        answers[spec.name] = body
    return answers


def kubeconfig_with_token(kubeconfig: Path, token: str, out: Path, user: str = "capstan-mcp") -> Path:
    """``kubeconfig``'s cluster and CA with a bearer ``token`` as its only user."""
    import yaml

    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    config["users"] = [{"name": user, "user": {"token": token}}]
    context["user"] = user
    out.write_text(yaml.safe_dump(config))
    return out
