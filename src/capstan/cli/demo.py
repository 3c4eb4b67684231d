"""``capstan demo``: bring up the local cluster and show every capability that has landed, then say where to look.

Each step is independent: one that fails is reported and the demo goes on with the next. The sandbox is left running
so that what the demo made can be inspected (``capstan sandbox down`` stops it).
"""

from __future__ import annotations

import asyncio
import functools
import time
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from capstan.kube import KubeClient

# NOTE: the capabilities (sandbox, cluster client, faults…) are imported inside the steps, so `capstan demo --help`
# answers without loading them.

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
    from capstan.kube import resources

    for _ in range(600):
        pods, _ = await kube.list(resources.PODS, namespace=NAMESPACE, label_selector=selector)
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if len(running) >= want:
            return sorted(running, key=lambda p: p["metadata"]["name"])
        await asyncio.sleep(0.1)
    raise RuntimeError(f"pods {selector} did not become Running")


async def cluster_step(console: Console, kubeconfig: Path, log_dir: Path) -> None:
    """Workloads on CPU and GPU nodes, then kubelet-like failures on them."""
    from capstan.faults import Kubelet, Termination
    from capstan.kube import ApiError, KubeClient, resources

    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        # Start clean: a previous demo's namespace is deleted (and waited for), its node condition healed.
        if await kube.delete(resources.NAMESPACES, NAMESPACE) is not None:
            console.print(f"[dim]•[/] removing the previous demo's namespace {NAMESPACE}")
            for _ in range(1200):
                try:
                    await kube.get(resources.NAMESPACES, NAMESPACE)
                except ApiError as exc:
                    if exc.not_found:
                        break
                    raise
                await asyncio.sleep(0.1)
        await Kubelet(kube, log_dir).node_condition(
            "gpu-l4-0", "MemoryPressure", "False", "KubeletHasSufficientMemory"
        )
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


async def restarts_and_history_step(
    console: Console, kubeconfig: Path, log_dir: Path, state_dir: Path
) -> None:
    """Record the demo namespace, then restart containers and deliver reports to a local Slack receiver."""
    from capstan.faults import Kubelet, Termination
    from capstan.kube import KubeClient, resources
    from capstan.notify import DEV_TOKEN, SlackReceiver, serve_in_thread
    from capstan.record import KubeCollector, KubernetesConfig
    from capstan.restarts import RestartsConfig, RestartWatcher
    from capstan.store import open_store

    db = state_dir / "history.db"
    store = open_store(str(db))
    receiver = SlackReceiver()
    with serve_in_thread(receiver.app) as server:
        receiver.base_url = server.url
        config = RestartsConfig.model_validate(
            {
                "cluster_name": "capstan-sandbox",
                "sinks": [
                    {"name": "slack", "type": "slack_bot", "token": DEV_TOKEN, "channel": "C0ALERTS",
                     "base_url": f"{server.url}/api/"}
                ],
                "mute_seconds": 0,
                "delivery": {"rate_per_second": 20, "burst": 20},
            }
        )  # fmt: skip
        async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
            recorder = KubeCollector(
                KubernetesConfig(kinds=["Deployment", "ReplicaSet", "Pod", "ConfigMap", "Node"]),
                store.history,
                connect=functools.partial(KubeClient.from_kubeconfig, kubeconfig),
                source="default",
            )
            watcher = RestartWatcher.over_store(config, kube, store, namespace=NAMESPACE)
            stop = asyncio.Event()
            tasks = [asyncio.create_task(recorder.run(stop)), asyncio.create_task(watcher.run(stop))]
            await asyncio.wait_for(watcher.synced.wait(), 60)
            # A change worth citing: someone edits the llm Deployment just before its pod crashes.
            await kube.patch(
                resources.DEPLOYMENTS,
                "llm",
                {"metadata": {"annotations": {"capstan.io/demo-edit": str(int(time.time()))}}},
                namespace=NAMESPACE,
            )
            await asyncio.sleep(1)
            pods = await _wait_running(kube, "app=llm", 4)
            kubelet = Kubelet(kube, log_dir)
            await kubelet.restart_container(
                NAMESPACE, pods[-1]["metadata"]["name"], "server", Termination.oom_killed(),
                previous_log=["INFO loading weights", "ERROR CUDA out of memory while allocating KV cache"],
            )  # fmt: skip
            for _ in range(300):
                if receiver.messages:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(2)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        for message in receiver.messages:
            if message.text:
                console.print(
                    f"[bold]Slack ({message.channel})[/]: {message.text}", markup=True, highlight=False
                )
    changes = store.history.timeline(source="default", namespace=NAMESPACE, limit=100_000)
    table = Table(title=f"recorded history ({db}): {len(changes)} changes in {NAMESPACE}")
    for col in ("kind", "changes", "via watch", "via relist"):
        table.add_column(col)
    kinds = sorted({c.kind for c in changes})
    for kind in kinds:
        rows = [c for c in changes if c.kind == kind]
        table.add_row(kind, str(len(rows)), str(sum(c.observed_via == "watch" for c in rows)),
                      str(sum(c.observed_via == "relist" for c in rows)))  # fmt: skip
    console.print(table)
    console.print(f"capstan history timeline --store {db} --namespace {NAMESPACE}")
    store.close()


async def diagnosis_step(console: Console, kubeconfig: Path, state_dir: Path) -> None:
    """`capstan diagnose` over the demo namespace: root causes of the injected failures, citing the recorded
    history (the Deployment edit made just before the llm pod's crash)."""
    _run_cli(console, ["diagnose", "--namespace", NAMESPACE, "--kubeconfig", str(kubeconfig),
                       "--store", str(state_dir / "history.db"), "--source", "default"], state_dir / "demo.log")  # fmt: skip


async def mcp_step(console: Console, kubeconfig: Path, state_dir: Path) -> None:
    """One MCP session as an agent would hold it: the official SDK's client starts `capstan mcp serve` over stdio
    with the demo's store, calls `problems` for the demo namespace, then `diagnose` on the top problem's object;
    each call's answer size (its own token count) and time, and what it names."""
    import json
    import sys

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from mcp.types import TextContent

    args = ["-m", "capstan.cli.main", "mcp", "serve", "--transport", "stdio", "--kubeconfig", str(kubeconfig),
            "--store", str(state_dir / "history.db"), "--source", "default", "--namespace", NAMESPACE]  # fmt: skip
    console.print(f"[dim]$ capstan {' '.join(args[2:])}  (an MCP client on its stdin/stdout)[/]")
    params = StdioServerParameters(command=sys.executable, args=args)
    table = Table(title="one MCP session (official SDK client over stdio)")
    for col in ("call", "tokens", "ms", "answer"):
        table.add_column(col)

    async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        result = await client.call_tool(tool, arguments)
        ms = (time.perf_counter() - start) * 1000
        block = result.content[0]
        body: dict[str, Any] = json.loads(block.text) if isinstance(block, TextContent) else {}
        findings = body.get("findings") or []
        said = findings[0]["root_cause"] if findings else str(body.get("error") or "no findings")
        shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        table.add_row(f"{tool}({shown})", str(body.get("tokens", "?")), f"{ms:.0f}", said[:110])
        return body

    async with Client(params, read_timeout_seconds=120) as client:
        tools = (await client.list_tools()).tools
        console.print(f"{len(tools)} read-only tools: {', '.join(t.name for t in tools)}")
        problems = await call(client, "problems", {"namespace": NAMESPACE})
        top = (problems.get("findings") or [{}])[0].get("objects") or []
        if top:
            subject = top[0]
            await call(client, "diagnose", {"kind": subject["kind"], "name": subject["name"],
                                            "namespace": subject["namespace"] or NAMESPACE})  # fmt: skip
    console.print(table)


def _run_cli(console: Console, args: list[str], log: Path) -> None:
    """Runs ``capstan ARGS`` as a child process: its tables on the console, its log lines appended to ``log``."""
    import subprocess
    import sys

    console.print(f"[dim]$ capstan {' '.join(args)}[/]")
    with log.open("a", encoding="utf-8") as stderr:
        proc = subprocess.run(
            [sys.executable, "-m", "capstan.cli.main", *args], check=False, timeout=900, stderr=stderr
        )
    if proc.returncode != 0:
        raise RuntimeError(f"capstan {args[0]} {args[1]} exited with {proc.returncode} (its log: {log})")


async def chart_step(
    console: Console,
    kubeconfig: Path,
    state_dir: Path,
    *,
    release: str = "capstan",
    namespace: str = "capstan",
) -> None:
    """`helm install` of the chart's default values into the sandbox: the recorder, one pod writing SQLite on a
    volume claim (bound here to a hostPath volume the demo provides, as a cluster's default StorageClass would),
    under its least-privilege ServiceAccount; what the release created, read back from the API server. kwok runs no
    containers and the image is not built here: the pods are Running in kwok's sense only."""
    import subprocess

    from capstan.kube import ApiError, KubeClient, resources
    from capstan.sandbox import build_helm, chart_dir

    helm = build_helm()  # cached by `capstan sandbox build` (make bootstrap)
    chart = chart_dir()
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        volume = {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{release}-demo-store"},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": str(state_dir / "chart-volume")}},
        }  # fmt: skip
        try:
            await kube.create(resources.PVS, volume)
        except ApiError as exc:
            if not exc.conflict:
                raise
        args = [str(helm), "upgrade", "--install", release, str(chart), "--namespace", namespace,
                "--create-namespace", "--kubeconfig", str(kubeconfig), "--wait", "--timeout", "180s"]  # fmt: skip
        console.print(f"[dim]$ helm upgrade --install {release} deploy/helm/capstan -n {namespace} --wait[/]")
        proc = await asyncio.to_thread(
            subprocess.run, args, capture_output=True, text=True, timeout=240, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"helm install: {proc.stderr.strip().splitlines()[-1:]}")
        selector = f"app.kubernetes.io/instance={release}"
        table = Table(title=f"what `helm install` of the defaults created ({namespace})")
        for col in ("object", "name", "state"):
            table.add_column(col)
        deployments, _ = await kube.list(resources.DEPLOYMENTS, namespace=namespace, label_selector=selector)
        for d in deployments:
            status = d.get("status") or {}
            state = f"{status.get('availableReplicas', 0)}/{d['spec']['replicas']} available"
            table.add_row("Deployment", d["metadata"]["name"], state)
        claims, _ = await kube.list(resources.PVCS, namespace=namespace, label_selector=selector)
        for c in claims:
            table.add_row(
                "PersistentVolumeClaim", c["metadata"]["name"], str((c.get("status") or {}).get("phase"))
            )
        roles, _ = await kube.list(resources.CLUSTER_ROLES, label_selector=selector)
        for r in roles:
            verbs = sorted({v for rule in r.get("rules") or [] for v in rule["verbs"]})
            table.add_row(
                "ClusterRole", r["metadata"]["name"], f"{len(r.get('rules') or [])} rules, verbs {verbs}"
            )
        accounts, _ = await kube.list(
            resources.SERVICE_ACCOUNTS, namespace=namespace, label_selector=selector
        )
        for a in accounts:
            table.add_row("ServiceAccount", a["metadata"]["name"], "the recorder's identity")
    console.print(table)
    console.print(
        "[dim]kwok runs no containers: these pods are Running in name only (docs/deploy.md says what is tested).[/]"
    )


CAPACITY_TRACE = Path("alibaba-openb-2023", "openb_pod_list_default.csv")
ROUTING_TRACE = Path("mooncake-fast25", "conversation_trace.jsonl")


def packaged_data_dir() -> Path:
    """The samples shipped with Capstan (``capstan/_demo_data``: the head of each public trace, PROVENANCE.md)."""
    return Path(__file__).resolve().parents[1] / "_demo_data"


def demo_traces(data_dir: Path) -> tuple[Path, Path]:
    """The capacity and routing traces under ``data_dir``, or a :class:`UserError` naming the first one missing."""
    from capstan.errors import UserError

    found = []
    for rel in (CAPACITY_TRACE, ROUTING_TRACE):
        path = data_dir / rel
        if not path.is_file():
            raise UserError(f"--data-dir {data_dir}: no {rel} (the layout of capstan/_demo_data)")
        found.append(path)
    return found[0], found[1]


async def capacity_step(console: Console, trace: Path, out: Path, log: Path) -> None:
    _run_cli(console, ["capacity", "simulate", "--trace", str(trace), "--max-pods", "1500",
                       "--policy", "capstan", "--policy", "cluster-autoscaler", "--policy", "oracle",
                       "--out", str(out)], log)  # fmt: skip


CAPACITY_NAMESPACE = "capstan-capacity-demo"


async def capacity_live_step(console: Console, kubeconfig: Path, trace: Path) -> None:
    """The capacity controller on the sandbox: the first GPU tasks of the openb trace, time-compressed, are created
    gated for Capstan; it launches kwok GPU nodes for them, kube-scheduler binds them, and the nodes are drained
    once the tasks end."""
    from dataclasses import replace

    from capstan.capacity import Controller, Delay, NodeType, PlannerConfig, Taint, load_trace
    from capstan.capacity.live import (
        POOL_LABEL,
        ControllerMetrics,
        EventRecorder,
        live_config,
        replay_under_controller,
    )
    from capstan.kube import KubeClient
    from capstan.percentile import percentile

    gpu_taint = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    pool = ((POOL_LABEL, "demo"),)
    types = (
        NodeType("demo-l4x4", 48000, 196608, 4, "NVIDIA-L4", 3.35, boot_delay=Delay("fixed", 6.0),
                 gpu_ready_delay=Delay("fixed", 3.0), taints=gpu_taint, labels=pool),
        NodeType("demo-h100x8", 96000, 786432, 8, "NVIDIA-H100", 55.04, boot_delay=Delay("fixed", 6.0),
                 gpu_ready_delay=Delay("fixed", 3.0), taints=gpu_taint, labels=pool),
    )  # fmt: skip
    workload = load_trace(str(trace))
    tasks = [p for p in workload.pods if p.wants_gpu and p.num_gpu <= 8 and not p.gang][:16]
    span = max(tasks[-1].arrival - tasks[0].arrival, 1.0)
    speed = span / 30.0  # the slice's arrivals over 30 s
    tasks = [replace(p, duration=min(p.duration, 20.0 * speed), node_selector=()) for p in tasks]
    metrics = ControllerMetrics()
    controller = Controller(live_config(PlannerConfig(headroom=False, min_idle_s=3.0)), react=0.5,
                            review_interval=2.0)  # fmt: skip
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        run = await replay_under_controller(kube, tasks, CAPACITY_NAMESPACE, controller, types, speed=speed,
                                            pool="demo", drain_wait_s=60.0, metrics=metrics,
                                            events=EventRecorder(kube), max_duration_s=180.0)  # fmt: skip
    result, stats = run.replay, run.stats
    waits = [w / speed for w in result.pending_s(speed)]

    def count(name: str, **labels: str) -> int:
        return int(sum(
            s.value for m in metrics.registry.collect() for s in m.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ))  # fmt: skip

    table = Table(
        title=f"capstan capacity run on the sandbox: {len(tasks)} openb GPU tasks, {speed:.0f}x faster"
    )
    for col in ("pods bound", "pending p50 s", "pending p99 s", "nodes launched", "nodes drained",
                "decisions", "decision p99 ms", "left over"):  # fmt: skip
        table.add_column(col, justify="right")
    table.add_row(
        f"{len(result.bound)}/{len(tasks)}",
        f"{percentile(waits, 50, empty=0.0):.1f}",
        f"{percentile(waits, 99, empty=0.0):.1f}",
        str(count("capstan_capacity_launches_total")),
        str(count("capstan_capacity_drains_total")),
        str(stats.decisions),
        f"{percentile(sorted(stats.decision_s), 99, empty=0.0) * 1000:.0f}",
        str(run.left_over),
    )
    console.print(table)
    console.print(
        f"[dim]nodes boot in 6 s and their GPUs are allocatable 3 s later (kwok provider); "
        f"kubectl get events -n {CAPACITY_NAMESPACE} shows CapstanLaunched / CapstanPromised / CapstanPlaced[/]"
    )
    if result.unbound():
        raise RuntimeError(
            f"{len(result.unbound())} replayed pods were never bound: {', '.join(result.unbound()[:5])}"
        )


async def routing_step(console: Console, trace: Path, log: Path) -> None:
    _run_cli(console, ["route", "simulate", "--trace", str(trace), "--limit", "400", "--replicas", "8"], log)


@app.callback()
def demo(
    directory: Path | None = typer.Option(None, "--dir", help="Sandbox state directory."),
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        envvar="CAPSTAN_DEMO_DATA",
        help="Directory of the demo's traces (alibaba-openb-2023/openb_pod_list_default.csv, "
        "mooncake-fast25/conversation_trace.jsonl); default: the samples shipped with Capstan.",
    ),
) -> None:
    """Bring up the local cluster and run every capability that has landed."""
    from capstan.logs import logging_to_file
    from capstan.sandbox import Sandbox, SandboxSpec, build_toolchain, default_state_dir, find_toolchain

    capacity_trace, routing_trace = demo_traces(data_dir or packaged_data_dir())

    console = Console()
    toolchain = find_toolchain()
    if toolchain is None:
        console.print("building the control plane (first run only)…")
        toolchain = build_toolchain()
    box = Sandbox(directory or default_state_dir("default"), toolchain)
    state = box.up(SandboxSpec(), timeout=240, on_step=lambda msg: console.print(f"[dim]•[/] {msg}"))
    kubeconfig = Path(state.kubeconfig)

    log_dir = box.directory / "pod-logs"
    log = box.directory / "demo.log"
    log.write_text("")
    steps: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = [
        ("cluster: workloads and kubelet-like failures", lambda: cluster_step(console, kubeconfig, log_dir)),
        (
            "restart reports to a local Slack, and the recorded history they cite",
            lambda: restarts_and_history_step(console, kubeconfig, log_dir, box.directory),
        ),
        (
            "diagnosis: root causes with their evidence and the recorded changes before them",
            lambda: diagnosis_step(console, kubeconfig, box.directory),
        ),
        (
            "MCP: an agent's session with the read-only server (problems, then diagnose)",
            lambda: mcp_step(console, kubeconfig, box.directory),
        ),
        (
            "GPU capacity: the planner against the cluster-autoscaler on the Alibaba trace",
            lambda: capacity_step(console, capacity_trace, box.directory / "capacity-out", log),
        ),
        (
            "GPU capacity live: capstan capacity run scales the sandbox's GPU pool for a replayed slice",
            lambda: capacity_live_step(console, kubeconfig, capacity_trace),
        ),
        (
            "cache-aware routing on the Mooncake trace (virtual clock)",
            lambda: routing_step(console, routing_trace, log),
        ),
        (
            "install in a cluster: helm install of the chart's default values",
            lambda: chart_step(console, kubeconfig, box.directory),
        ),
    ]
    failed = []
    with logging_to_file(log):  # log lines go to the file, not between the tables
        for title, step in steps:
            console.rule(title)
            try:
                asyncio.run(step())
            except Exception as exc:  # one failing step never stops the others
                failed.append(title)
                console.print(f"[red]step failed:[/] {exc}")
                console.print(traceback.format_exc(limit=3), markup=False)
    console.rule("where to look")
    console.print(f"the demo's log lines: {log}")
    console.print(f"export KUBECONFIG={kubeconfig}")
    console.print(f"kubectl binary: {toolchain.binary('kubectl')}")
    console.print("capstan sandbox status | capstan sandbox down")
    if failed:
        console.print(f"[red]{len(failed)} step(s) failed:[/] {', '.join(failed)}")
        raise typer.Exit(1)
