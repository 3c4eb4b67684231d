"""``capstan demo``: bring up the local cluster and show every capability that has landed, then say where to look.

Each step is independent: one that fails is reported and the demo goes on with the next. The sandbox is left running
so that what the demo made can be inspected (``capstan sandbox down`` stops it).
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from capstan.faults import Kubelet, Termination
from capstan.kube import ApiError, KubeClient, resources
from capstan.sandbox import Sandbox, SandboxSpec, build_toolchain, default_state_dir, find_toolchain

NAMESPACE = "capstan-demo"

app = typer.Typer(help="Run the demo.", invoke_without_command=True)


def _deployment(name: str, replicas: int, *, gpu: int = 0, image: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "server" if gpu else "web",
        "image": image,
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
    }
    spec: dict[str, Any] = {"containers": [container]}
    if gpu:
        container["resources"]["requests"]["nvidia.com/gpu"] = str(gpu)
        container["resources"]["limits"]["nvidia.com/gpu"] = str(gpu)
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        spec["containers"].append({"name": "metrics-proxy", "image": "example.com/metrics-proxy:0.3"})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


async def _wait_running(kube: KubeClient, selector: str, want: int) -> list[dict[str, Any]]:
    for _ in range(600):
        pods, _ = await kube.list(resources.PODS, namespace=NAMESPACE, label_selector=selector)
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if len(running) >= want:
            return sorted(running, key=lambda p: p["metadata"]["name"])
        await asyncio.sleep(0.1)
    raise RuntimeError(f"pods {selector} did not become Running")


async def cluster_step(console: Console, kubeconfig: Path, log_dir: Path) -> None:
    """Workloads on CPU and GPU nodes, then kubelet-like failures on them."""
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        try:
            await kube.create(
                resources.NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
        except ApiError as exc:
            if not exc.conflict:
                raise
        for _ in range(200):
            try:
                await kube.get(resources.SERVICE_ACCOUNTS, "default", NAMESPACE)
                break
            except ApiError:
                await asyncio.sleep(0.05)
        await kube.apply(resources.DEPLOYMENTS, _deployment("web", 3, image="example.com/web:1.4"))
        await kube.apply(
            resources.DEPLOYMENTS, _deployment("llm", 4, gpu=2, image="vllm/vllm-openai:v0.11.0")
        )
        web = await _wait_running(kube, "app=web", 3)
        llm = await _wait_running(kube, "app=llm", 4)

        kubelet = Kubelet(kube, log_dir)
        oom_pod = llm[0]["metadata"]["name"]
        await kubelet.restart_container(
            NAMESPACE,
            oom_pod,
            "server",
            Termination.oom_killed(),
            previous_log=[
                "INFO Loading model weights took 18.2 GiB",
                "INFO KV cache: 310,000 tokens",
                "WARNING Allocating 6.0 GiB for CUDA graphs",
            ],
        )
        await kubelet.restart_container(
            NAMESPACE,
            llm[1]["metadata"]["name"],
            "metrics-proxy",
            Termination.error(1, "config file /etc/proxy.yaml: no such file"),
            previous_log=["fatal: open /etc/proxy.yaml: no such file or directory"],
        )
        await kubelet.probe_failure(NAMESPACE, web[0]["metadata"]["name"], "web", "Liveness", failures=3)
        await kubelet.set_waiting(NAMESPACE, web[1]["metadata"]["name"], "web", "ImagePullBackOff")
        await kubelet.node_condition("gpu-l4-0", "MemoryPressure", "True", "KubeletHasInsufficientMemory")

        nodes, _ = await kube.list(resources.NODES)
        table = Table(title="kwok nodes (kubectl get nodes)")
        for col in ("node", "ready", "GPU", "allocatable GPU", "product", "conditions"):
            table.add_column(col)
        for n in nodes:
            status = n.get("status") or {}
            conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
            bad = [t for t, s in conds.items() if t != "Ready" and s == "True"]
            table.add_row(
                n["metadata"]["name"],
                conds.get("Ready", "?"),
                status.get("capacity", {}).get("nvidia.com/gpu", "-"),
                status.get("allocatable", {}).get("nvidia.com/gpu", "-"),
                n["metadata"].get("labels", {}).get("nvidia.com/gpu.product", "-"),
                ", ".join(bad) or "healthy",
            )
        console.print(table)

        pods, _ = await kube.list(resources.PODS, namespace=NAMESPACE)
        table = Table(title=f"pods in {NAMESPACE} after injected failures")
        for col in ("pod", "node", "container", "restarts", "state", "last termination"):
            table.add_column(col)
        for p in sorted(pods, key=lambda p: p["metadata"]["name"]):
            for cs in (p.get("status") or {}).get("containerStatuses") or []:
                state = next(iter(cs.get("state") or {"?": {}}))
                reason = (cs.get("state") or {}).get(state, {}).get("reason", "")
                term = (cs.get("lastState") or {}).get("terminated") or {}
                table.add_row(
                    p["metadata"]["name"],
                    p["spec"].get("nodeName", ""),
                    cs["name"],
                    str(cs.get("restartCount", 0)),
                    f"{state} {reason}".strip(),
                    f"{term.get('reason')} exit {term.get('exitCode')}" if term else "",
                )
        console.print(table)
        previous = await kube.pod_log(NAMESPACE, oom_pod, "server", previous=True)
        console.print(f"[bold]kubectl logs --previous {oom_pod} -c server[/] (served by kwok):")
        console.print(previous.rstrip(), markup=False, highlight=False)


@app.callback()
def demo(
    directory: Path | None = typer.Option(None, "--dir", help="Sandbox state directory."),
) -> None:
    """Bring up the local cluster and run every capability that has landed."""
    console = Console()
    toolchain = find_toolchain()
    if toolchain is None:
        console.print("building the control plane (first run only)…")
        toolchain = build_toolchain()
    box = Sandbox(directory or default_state_dir("default"), toolchain)
    state = box.up(SandboxSpec(), timeout=240, on_step=lambda msg: console.print(f"[dim]•[/] {msg}"))
    kubeconfig = Path(state.kubeconfig)

    steps: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = [
        (
            "cluster: workloads and kubelet-like failures",
            lambda: cluster_step(console, kubeconfig, box.directory / "pod-logs"),
        ),
    ]
    failed = []
    for title, step in steps:
        console.rule(title)
        try:
            asyncio.run(step())
        except Exception as exc:  # one failing step never stops the others
            failed.append(title)
            console.print(f"[red]step failed:[/] {exc}")
            console.print(traceback.format_exc(limit=3), markup=False)
    console.rule("where to look")
    console.print(f"export KUBECONFIG={kubeconfig}")
    console.print(f"kubectl binary: {toolchain.binary('kubectl')}")
    console.print("capstan sandbox status | capstan sandbox down")
    if failed:
        console.print(f"[red]{len(failed)} step(s) failed:[/] {', '.join(failed)}")
        raise typer.Exit(1)
