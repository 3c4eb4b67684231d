"""The capacity controller on the real sandbox: gated GPU pods get kwok nodes launched for them, kube-scheduler
binds them where the plan said, a restarted controller launches nothing twice, and the nodes are drained and
deleted once their pods are gone."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from capstan.capacity import (
    Controller,
    Delay,
    Forecaster,
    NodeType,
    NoForecast,
    PlannerConfig,
    QueuedDemand,
    Taint,
)
from capstan.capacity.live import (
    GATE,
    PROMISED_ANNOTATION,
    PURPOSE_LABEL,
    ControllerMetrics,
    EventRecorder,
    GatewayDemand,
    KwokProvider,
    LiveCluster,
    RunStats,
    SuspendedJobs,
    live_config,
    run_controller,
)
from capstan.kube import ApiError, KubeClient, LeaderElection, resources
from capstan.sandbox import Sandbox

pytestmark = pytest.mark.integration

TEST_LABEL = "capstan.io/test"
ROOT = Path(__file__).resolve().parents[3]


def node_type(namespace: str) -> NodeType:
    return NodeType(
        f"t-{namespace}"[:63],
        8000,
        32768,
        2,
        "NVIDIA-L4",
        1.6,
        boot_delay=Delay("fixed", 2.0),
        gpu_ready_delay=Delay("fixed", 1.0),
        taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
        labels=((TEST_LABEL, namespace),),
    )


def gated_pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "nodeSelector": {TEST_LABEL: namespace},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
            ],
            "containers": [
                {
                    "name": "c",
                    "image": "fake",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }


def real_pod_on(node: str, namespace: str) -> dict[str, Any]:
    """A 2-GPU pod not gated for Capstan, pinned to ``node``: kube-scheduler binds it, preempting a placeholder."""
    real = gated_pod("real", namespace)
    real["spec"].pop("schedulingGates")
    real["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    real["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    return real


def suspended_job(name: str, namespace: str) -> dict[str, Any]:
    """A suspended Job of two one-GPU pods gated for Capstan: demand announced ahead (``SuspendedJobs``)."""
    template = gated_pod("unused", namespace)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "suspend": True,
            "parallelism": 2,
            "completions": 2,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {**template["spec"], "restartPolicy": "Never"},
            },
        },
    }


async def labelled_nodes(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items, _ = await kube.list(resources.NODES, label_selector=f"{TEST_LABEL}={namespace}")
    return [n for n in items if not (n.get("metadata") or {}).get("deletionTimestamp")]


async def until(what: str, check: Callable[[], Awaitable[bool]], tries: int = 600) -> None:
    for _ in range(tries):  # bounded: 600 × 0.1 s
        if await check():
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


class Running:
    """A controller running in the background until :meth:`stop`, every call through ``kube`` (the kwok
    provider's too); by default without headroom, draining a node once it has been empty for a second."""

    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        nt: NodeType,
        *,
        config: PlannerConfig | None = None,
        forecaster: Forecaster | None = None,
        queue: SuspendedJobs | None = None,
        placeholder_namespace: str | None = None,
    ) -> None:
        self.stop_event = asyncio.Event()
        self.metrics = ControllerMetrics()
        self.failures: list[str] = []
        """The failed calls so far (the loop retries them), as the last pass left them."""
        config = live_config(config or PlannerConfig(headroom=False, min_idle_s=1.0))
        controller = Controller(config, react=0.2, review_interval=1.0, forecaster=forecaster)

        def passed(cluster: LiveCluster, stats: RunStats) -> None:
            self.failures = list(stats.failures)

        self.task: asyncio.Task[RunStats] = asyncio.create_task(
            run_controller(
                kube,
                KwokProvider(kube),
                controller,
                (nt,),
                stop=self.stop_event,
                namespace=namespace,
                tick_s=0.2,
                on_pass=passed,
                metrics=self.metrics,
                events=EventRecorder(kube),
                placeholder_namespace=placeholder_namespace,
                queue=queue,
            )
        )

    def forbidden(self) -> list[str]:
        """The failed calls the API server refused (403): what the controller's identity lacks."""
        return [f for f in self.failures if " 403 " in f]

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    async def stop(self) -> RunStats:
        self.stop_event.set()
        return await asyncio.wait_for(self.task, 30)


@pytest.fixture
async def cleanup_nodes(kube: KubeClient, namespace: str) -> AsyncIterator[None]:
    yield
    items, _ = await kube.list(resources.NODES, label_selector=f"{TEST_LABEL}={namespace}")
    for n in items:
        await kube.delete(resources.NODES, n["metadata"]["name"])


async def node_deleted(kube: KubeClient, name: str) -> bool:
    """Whether Node ``name`` is gone from the API server."""
    try:
        await kube.get(resources.NODES, name)
    except ApiError as exc:
        if exc.not_found:
            return True
        raise
    return False


async def test_gated_gpu_pods_get_nodes_launched_and_bound_then_drained(
    kube: KubeClient, namespace: str, cleanup_nodes: None
) -> None:
    nt = node_type(namespace)
    for i in range(3):
        await kube.create(resources.PODS, gated_pod(f"gpu-{i}", namespace))
    run = Running(kube, namespace, nt)

    async def all_bound() -> bool:
        pods, _ = await kube.list(resources.PODS, namespace=namespace)
        return len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods)

    await until("the three GPU pods to be bound", all_bound)
    nodes = await labelled_nodes(kube, namespace)
    # three one-GPU pods on two-GPU nodes: two nodes, no more
    assert len(nodes) == 2
    names = {n["metadata"]["name"] for n in nodes}
    assert all(n["metadata"]["labels"][PURPOSE_LABEL] == "pods" for n in nodes)
    pods, _ = await kube.list(resources.PODS, namespace=namespace)
    assert {p["spec"]["nodeName"] for p in pods} == names
    assert all(not p["spec"].get("schedulingGates") for p in pods)
    first = await run.stop()
    assert first.decisions > 0 and not first.failures
    assert run.metric("capstan_capacity_launches_total", type=nt.name, purpose="pods") == 2
    assert run.metric("capstan_capacity_placements_total") == 3
    assert run.metric("capstan_capacity_decisions_total", scope="place") >= 1
    assert run.metric("capstan_capacity_pending_pods") == 0
    events, _ = await kube.list(resources.EVENTS, namespace=namespace)
    reasons = {
        (e["involvedObject"]["name"], e["reason"])
        for e in events
        if (e.get("source") or {}).get("component") == "capstan-capacity"
    }
    for i in range(3):
        assert (f"gpu-{i}", "CapstanLaunched") in reasons and (f"gpu-{i}", "CapstanPlaced") in reasons

    # a second controller (a restart) reads the cluster and launches nothing more
    await kube.create(resources.PODS, gated_pod("gpu-3", namespace))  # fits the free GPU of one node
    again = Running(kube, namespace, nt)

    async def fourth_bound() -> bool:
        pod = await kube.get(resources.PODS, "gpu-3", namespace)
        return bool(pod["spec"].get("nodeName"))

    await until("the fourth pod to be bound on the node with a free GPU", fourth_bound)
    assert {n["metadata"]["name"] for n in await labelled_nodes(kube, namespace)} == names

    # the pods go; the empty nodes are drained and kwok's nodes deleted
    for i in range(4):
        await kube.delete(resources.PODS, f"gpu-{i}", namespace, grace_seconds=0)

    async def nodes_gone() -> bool:
        return not await labelled_nodes(kube, namespace)

    await until("the empty nodes to be drained and deleted", nodes_gone)
    second = await again.stop()
    assert second.decisions > 0
    assert again.metric("capstan_capacity_drains_total") == 2
    node_events, _ = await kube.list(resources.EVENTS, namespace="default")
    drained = {e["involvedObject"]["name"] for e in node_events if e["reason"] == "CapstanDraining"}
    assert names <= drained


def capstan_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from capstan.cli.main import main; main()", "capacity", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def write_node_types(path: Path, namespace: str) -> Path:
    nt = node_type(namespace)
    path.write_text(
        "node_types:\n"
        f"  - name: {nt.name}\n    cpu_milli: 8000\n    memory_mib: 32768\n    gpu: 2\n    gpu_model: NVIDIA-L4\n"
        "    boot_delay: {kind: fixed, seconds: 2}\n    gpu_ready_delay: {kind: fixed, seconds: 1}\n"
        "    taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]\n"
        f"    labels: {{{TEST_LABEL}: {namespace}}}\n"
    )
    return path


async def test_capacity_run_dry_run_logs_its_plan_and_writes_nothing(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, cleanup_nodes: None
) -> None:
    await kube.create(resources.PODS, gated_pod("gpu-0", namespace))
    types = write_node_types(tmp_path / "types.yaml", namespace)
    r = await asyncio.to_thread(
        capstan_run,
        "--node-types",
        str(types),
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        namespace,
        "--dry-run",
        "--duration",
        "4s",
        "--no-headroom",
        "--review-interval",
        "1s",
    )
    assert r.returncode == 0, r.stderr
    assert "dry run, nothing written:" in r.stdout and "1 launches, 1 pods placed" in r.stdout
    assert not await labelled_nodes(kube, namespace)
    pod = await kube.get(resources.PODS, "gpu-0", namespace)
    assert pod["spec"].get("schedulingGates") and not pod["spec"].get("nodeName")
    assert PROMISED_ANNOTATION not in (pod["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--provider", "gce"), "--provider gce: unknown provider"),
        (("--duration", "soon"), "--duration 'soon'"),
        (("--review-interval", "0s"), "--review-interval '0s': must be longer than 0 s"),
        (("--drain-empty-after", "later"), "--drain-empty-after 'later'"),
    ],
)
def test_capacity_run_bad_options_are_one_line_and_exit_2(
    args: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    types = write_node_types(tmp_path / "types.yaml", "ns")
    r = capstan_run("--node-types", str(types), "--kubeconfig", str(tmp_path / "none"), *args)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert message in r.stderr


def test_capacity_run_with_a_broken_node_type_file_names_it(tmp_path: Path) -> None:
    bad = tmp_path / "types.yaml"
    bad.write_text("node_types:\n  - name: x\n    cpu_milli: -1\n    memory_mib: 1\n")
    r = capstan_run("--node-types", str(bad), "--kubeconfig", str(tmp_path / "none"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert str(bad) in r.stderr


async def test_a_candidate_takes_over_when_the_leader_is_killed_and_launches_nothing_twice(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, cleanup_nodes: None
) -> None:
    types = write_node_types(tmp_path / "types.yaml", namespace)
    nt = node_type(namespace)
    await kube.create(resources.PODS, gated_pod("gpu-0", namespace))
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from capstan.cli.main import main; main()",
            "capacity",
            "run",
            "--node-types",
            str(types),
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            namespace,
            "--no-headroom",
            "--review-interval",
            "1s",
            "--lease-namespace",
            namespace,
            "--lease-duration",
            "3s",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "leader.log").open("w"),
    )
    try:

        async def bound(name: str) -> bool:
            pod = await kube.get(resources.PODS, name, namespace)
            return bool(pod["spec"].get("nodeName"))

        await until("the leader to place the first pod", lambda: bound("gpu-0"))
        stop = asyncio.Event()
        election = LeaderElection(
            kube,
            "capstan-capacity",
            namespace,
            "candidate-b",
            lease_duration_s=3.0,
            renew_deadline_s=2.0,
            retry_period_s=0.4,
        )
        controller = Controller(
            live_config(PlannerConfig(headroom=False, min_idle_s=1.0)), react=0.2, review_interval=1.0
        )
        candidate = asyncio.create_task(
            run_controller(
                kube,
                KwokProvider(kube),
                controller,
                (nt,),
                stop=stop,
                namespace=namespace,
                tick_s=0.2,
                election=election,
            )
        )
        await asyncio.sleep(1.5)
        assert leader.poll() is None, (tmp_path / "leader.log").read_text()[-3000:]
        lease_now = await kube.get(resources.LEASES, "capstan-capacity", namespace)
        assert not election.leading.is_set(), (lease_now, (tmp_path / "leader.log").read_text()[-3000:])
        assert sum(controller.plans.values()) == 0
        leader.kill()  # kill -9: the Lease is not released, it must expire
        leader.wait(10)
        await kube.create(resources.PODS, gated_pod("gpu-1", namespace))  # fits the first node's free GPU
        await until("the candidate to take the Lease and place the second pod", lambda: bound("gpu-1"))
        assert election.leading.is_set() and election.transitions == 1
        assert len(await labelled_nodes(kube, namespace)) == 1
        stop.set()
        stats = await asyncio.wait_for(candidate, 30)
        assert stats.led and not stats.lost_leadership
        lease = await kube.get(resources.LEASES, "capstan-capacity", namespace)
        assert lease["spec"]["holderIdentity"] == ""  # released on a clean stop
    finally:
        if leader.poll() is None:
            leader.kill()
            leader.wait(10)


async def test_the_demos_live_capacity_step_places_every_replayed_task_and_leaves_no_node(
    kubeconfig: Path, kube: KubeClient
) -> None:
    """`capstan demo`'s step: the first GPU tasks of the shipped openb sample, compressed, gated for Capstan."""
    from rich.console import Console

    from capstan.capacity.live import POOL_LABEL
    from capstan.cli.demo import CAPACITY_TRACE, capacity_live_step, packaged_data_dir

    out = Console(record=True, width=200)
    await capacity_live_step(
        out, kubeconfig, packaged_data_dir() / CAPACITY_TRACE
    )  # raises if a pod is unbound
    text = out.export_text()
    assert "16/16" in text
    nodes, _ = await kube.list(resources.NODES, label_selector=f"{POOL_LABEL}=demo")
    assert not nodes


async def test_the_karpenter_provider_creates_nodeclaims_and_a_restart_launches_nothing_twice(
    kube: KubeClient, namespace: str
) -> None:
    """Capstan decides, Karpenter launches: the NodeClaim Capstan writes is accepted by Karpenter's own CRD (from
    the karpenter module), names the planned type, and a restarted controller counts it as launched."""
    import yaml

    from capstan.capacity.live import NODECLAIMS, KarpenterProvider
    from capstan.errors import UserError
    from capstan.sandbox import go_module_dir

    crds = resources.Resource(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
    )
    provider = KarpenterProvider(
        kube, nodepool=f"np-{namespace}"[:60], node_class=("karpenter.kwok.sh", "KWOKNodeClass", "default")
    )
    try:
        await kube.get(crds, "nodeclaims.karpenter.sh")
    except ApiError:
        with pytest.raises(UserError, match="no NodeClaim CRD"):
            await provider.check()
    module = go_module_dir("sigs.k8s.io/karpenter", "1.15.0")
    for name in ("karpenter.sh_nodeclaims.yaml", "karpenter.sh_nodepools.yaml"):
        await kube.apply(crds, yaml.safe_load((module / "kwok" / "charts" / "crds" / name).read_text()))

    async def established() -> bool:
        crd = await kube.get(crds, "nodeclaims.karpenter.sh")
        return any(
            c["type"] == "Established" and c["status"] == "True"
            for c in crd.get("status", {}).get("conditions", [])
        )

    await until("the NodeClaim CRD to be established", established)

    async def served() -> bool:  # a new CRD's storage answers 429 while it initializes
        try:
            await kube.list(NODECLAIMS)
        except ApiError:
            return False
        return True

    await until("NodeClaims to be served", served)
    await provider.check()
    nt = node_type(namespace)
    await kube.create(resources.PODS, gated_pod("gpu-0", namespace))

    async def run_for(seconds: float) -> RunStats:
        stop = asyncio.Event()
        controller = Controller(live_config(PlannerConfig(headroom=False)), react=0.2, review_interval=1.0)
        task = asyncio.create_task(
            run_controller(kube, provider, controller, (nt,), stop=stop, namespace=namespace, tick_s=0.2)
        )
        await asyncio.sleep(seconds)
        stop.set()
        return await asyncio.wait_for(task, 30)

    async def claims() -> list[dict[str, Any]]:
        items, _ = await kube.list(NODECLAIMS, label_selector=f"karpenter.sh/nodepool={provider.nodepool}")
        return items

    first = await run_for(3.0)
    (claim,) = await claims()
    assert not first.failures
    assert claim["metadata"]["labels"]["capstan.io/planned-node"] == claim["metadata"]["name"]
    assert claim["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    wanted = {r["key"]: r["values"] for r in claim["spec"]["requirements"]}
    assert wanted["node.kubernetes.io/instance-type"] == [nt.name]
    assert claim["spec"]["resources"]["requests"]["nvidia.com/gpu"] == "2"
    pod = await kube.get(resources.PODS, "gpu-0", namespace)
    assert pod["metadata"]["annotations"]["capstan.io/promised-node"] == claim["metadata"]["name"]
    # a restart: the NodeClaim has no Node yet; the new controller counts it and launches nothing more
    await run_for(3.0)
    assert [c["metadata"]["name"] for c in await claims()] == [claim["metadata"]["name"]]
    await provider.drain(claim["metadata"]["name"], {})
    assert not await claims()


async def test_capacity_run_refuses_to_fight_a_running_cluster_autoscaler(
    kube: KubeClient, kubeconfig: Path, tmp_path: Path
) -> None:
    """cluster-autoscaler holds its leader Lease: Capstan would provision for the same pods, so it says so and
    exits 2 (one line), unless told --allow-other-autoscalers."""
    from capstan.kube.lease import micro_time

    types = write_node_types(tmp_path / "types.yaml", "ns")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
        "spec": {
            "holderIdentity": "ca-7f9d",
            "leaseDurationSeconds": 60,
            "renewTime": micro_time(time.time()),
        },
    }
    await kube.create(resources.LEASES, lease, "kube-system")
    try:
        args = ("--node-types", str(types), "--kubeconfig", str(kubeconfig), "--dry-run", "--duration", "1s")
        refused = await asyncio.to_thread(capstan_run, *args)
        assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused.stderr
        assert (
            "cluster-autoscaler is running (it holds the Lease kube-system/cluster-autoscaler: ca-7f9d)"
            in refused.stderr
        )
        allowed = await asyncio.to_thread(capstan_run, *args, "--allow-other-autoscalers")
        assert allowed.returncode == 0, allowed.stderr
    finally:
        await kube.delete(resources.LEASES, "cluster-autoscaler", "kube-system")


async def test_a_headroom_node_is_held_by_a_placeholder_that_a_real_pod_preempts(
    kube: KubeClient, namespace: str, cleanup_nodes: None
) -> None:
    """Held headroom is a low-priority placeholder pod on the node's free GPUs; kube-scheduler preempts it for a
    real pod, and a node no longer held gets no placeholder."""

    nt = replace(node_type(namespace), boot_delay=Delay("fixed", 0.0), gpu_ready_delay=Delay("fixed", 0.0))
    provider = KwokProvider(kube)
    name = f"capstan-n{abs(hash(namespace)) % 10_000_000}"
    await provider.launch(nt, name, "headroom", time.time())
    nodes: dict[str, dict[str, Any]] = {}
    pods: dict[str, dict[str, Any]] = {}

    async def refresh() -> None:
        items, _ = await kube.list(resources.NODES, label_selector=f"{TEST_LABEL}={namespace}")
        nodes.clear()
        nodes.update({n["metadata"]["name"]: n for n in items})
        listed, _ = await kube.list(resources.PODS, namespace=namespace)
        pods.clear()
        pods.update({f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in listed})

    async def allocatable() -> bool:
        await refresh()
        await provider.advance(list(nodes.values()), set(), time.time())
        node = nodes.get(name, {})
        return (
            node.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu") == "2"
            and not node["spec"].get("taints", [])[1:]
        )

    await until("the kwok node's GPUs to be allocatable", allocatable)
    cluster = LiveCluster((nt,), nodes, pods, clock=time.time, placeholder_namespace=namespace)
    cluster.observe()
    cluster.hold_headroom({name})
    assert not await cluster.carry_out(kube, provider)

    async def placeholder_bound() -> bool:
        await refresh()
        return any(
            p["spec"].get("nodeName") == name and p["metadata"]["name"].startswith("capstan-headroom")
            for p in pods.values()
        )

    await until("the placeholder to hold the node's GPUs", placeholder_bound)
    (placeholder,) = [p for p in pods.values() if p["metadata"]["name"].startswith("capstan-headroom")]
    assert placeholder["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert placeholder["spec"]["priority"] == -10
    cluster.observe()
    assert cluster.snapshot().nodes[0].devs == (1000, 1000)  # the planner still sees the room as free

    await kube.create(resources.PODS, real_pod_on(name, namespace))

    async def real_bound() -> bool:
        return bool((await kube.get(resources.PODS, "real", namespace))["spec"].get("nodeName"))

    await until("the real pod to preempt the placeholder", real_bound)
    await refresh()
    cluster.observe()
    cluster.hold_headroom(set())
    assert not await cluster.carry_out(kube, provider)
    await refresh()
    assert not [
        p
        for p in pods.values()
        if p["metadata"]["name"].startswith("capstan-headroom") and not p["metadata"].get("deletionTimestamp")
    ]


def test_capacity_run_waits_for_an_unreachable_cluster_saying_so_and_stops_cleanly(tmp_path: Path) -> None:
    """Not a crash (a pod would crash-loop): it waits, one log line per attempt naming the cluster, until
    --duration (or SIGTERM) ends it, exit 0."""
    from capstan.sandbox import free_port

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{free_port()}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: abc}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    types = write_node_types(tmp_path / "types.yaml", "ns")
    r = capstan_run("--node-types", str(types), "--kubeconfig", str(kubeconfig), "--duration", "2s")
    assert r.returncode == 0, r.stderr
    waits = [line for line in r.stderr.splitlines() if f"waiting for cluster {kubeconfig}: " in line]
    assert waits and all("Connection" in line or "connect" in line.lower() for line in waits), r.stderr
    assert "Traceback" not in r.stderr


async def test_a_suspended_job_gets_its_node_before_it_runs(
    kube: KubeClient, namespace: str, cleanup_nodes: None
) -> None:
    """A Job created suspended (its pods gated for Capstan) is demand announced ahead: with
    ``SuspendedJobs``/``QueuedDemand`` the controller launches a node for its two one-GPU pods while no pod
    exists; once the Job is resumed, the Job controller's pods are placed on that node and nothing more is
    launched (the planner's own forecast is left out, so the only headroom is the Job's)."""
    nt = node_type(namespace)
    await kube.create(resources.JOBS, suspended_job("train", namespace))
    queue = SuspendedJobs(refresh_s=0.5)
    controller = Controller(
        live_config(PlannerConfig(min_idle_s=60.0, headroom_wait_s=0.0)),
        react=0.2,
        review_interval=0.5,
        forecaster=QueuedDemand(queue, NoForecast()),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_controller(kube, KwokProvider(kube), controller, (nt,), stop=stop, namespace=namespace, tick_s=0.2,
                       queue=queue)
    )  # fmt: skip
    try:

        async def launched() -> bool:
            return len(await labelled_nodes(kube, namespace)) >= 1

        await until("a node launched for the suspended Job", launched)
        pods, _ = await kube.list(resources.PODS, namespace=namespace)
        assert pods == []  # launched ahead: the Job has no pod yet
        nodes = await labelled_nodes(kube, namespace)
        assert len(nodes) == 1 and nodes[0]["metadata"]["labels"][PURPOSE_LABEL] == "headroom"
        await kube.patch(resources.JOBS, "train", {"spec": {"suspend": False}}, namespace=namespace)

        async def both_bound() -> bool:
            pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector="app=train")
            return len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods)

        await until("the Job's pods to be bound", both_bound)
        pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector="app=train")
        assert {p["spec"]["nodeName"] for p in pods} == {nodes[0]["metadata"]["name"]}
        assert len(await labelled_nodes(kube, namespace)) == 1
    finally:
        stop.set()
        stats = await asyncio.wait_for(task, 30)
        await kube.delete(resources.JOBS, "train", namespace)
        pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector="app=train")
        for pod in pods:
            await kube.delete(resources.PODS, pod["metadata"]["name"], namespace, grace_seconds=0)
    assert not stats.failures


async def test_capacity_run_reads_suspended_jobs_when_asked(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, cleanup_nodes: None
) -> None:
    """``--read-suspended-jobs``: a dry run plans a node for a suspended Job that has no pod yet (and writes
    nothing); with ``--no-headroom`` it is one line, exit 2."""
    template = gated_pod("unused", namespace)
    await kube.create(
        resources.JOBS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "queued", "namespace": namespace},
            "spec": {"suspend": True, "template": {"spec": {**template["spec"], "restartPolicy": "Never"}}},
        },
    )
    types = write_node_types(tmp_path / "types.yaml", namespace)
    common = ("--node-types", str(types), "--kubeconfig", str(kubeconfig), "--namespace", namespace)
    r = await asyncio.to_thread(
        capstan_run,
        *common,
        "--dry-run",
        "--duration",
        "4s",
        "--review-interval",
        "1s",
        "--read-suspended-jobs",
    )
    assert r.returncode == 0, r.stderr
    assert "dry run, nothing written:" in r.stdout and "1 launches" in r.stdout
    assert "for headroom" in r.stderr + r.stdout
    assert not await labelled_nodes(kube, namespace)
    for flag in ("--read-suspended-jobs", "--serve-provisioning-requests"):
        bad = await asyncio.to_thread(capstan_run, *common, flag, "--no-headroom")
        assert (
            bad.returncode == 2 and f"{flag} holds headroom" in bad.stderr and "Traceback" not in bad.stderr
        )
    alone = await asyncio.to_thread(capstan_run, *common, "--queue-only")
    assert alone.returncode == 2 and "--queue-only: no demand is announced" in alone.stderr
    await kube.delete(resources.JOBS, "queued", namespace)


async def test_in_a_pod_with_the_chart_s_identity_it_places_a_pod_and_may_write_nothing_else(
    sandbox: Sandbox, kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, cleanup_nodes: None
) -> None:
    """`capstan capacity run` in-cluster (no kubeconfig: the service variables and a TokenRequest token of the
    chart's ServiceAccount for it, deploy/helm/capstan: files/rbac/capacity.yaml and its Roles) launches a node for
    a gated pod and the pod is bound to it; its probes answer; with the same token, what it is not granted is 403;
    once the pod is gone the command drains the node (``--drain-empty-after 1s``) and the kwok provider deletes it."""
    import os
    import signal
    import socket

    import httpx

    from tests.fixtures.identity import assert_forbidden, in_cluster_identity

    types = write_node_types(tmp_path / "types.yaml", namespace)
    async with in_cluster_identity("capacity", sandbox, kube, kubeconfig, tmp_path / "account") as env:
        await kube.create(resources.PODS, gated_pod("gpu-0", namespace))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            probe = s.getsockname()[1]
        argv = [sys.executable, "-m", "capstan.cli.main", "capacity", "run", "--node-types", str(types),
                "--namespace", namespace, "--no-headroom", "--review-interval", "1s", "--lease-namespace", "capstan",
                "--lease-name", f"capstan-capacity-{namespace[-40:]}", "--lease-duration", "3s",
                "--probe-port", str(probe), "--drain-empty-after", "1s"]  # fmt: skip
        pod_env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | env
        log = tmp_path / "capacity.log"
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=pod_env)
        try:

            async def bound() -> bool:
                assert proc.poll() is None, log.read_text()[-2000:]
                pod = await kube.get(resources.PODS, "gpu-0", namespace)
                return bool(pod["spec"].get("nodeName"))

            await until("the pod bound to a node Capstan launched", bound)
            node = (await kube.get(resources.PODS, "gpu-0", namespace))["spec"]["nodeName"]
            assert (await kube.get(resources.NODES, node))["metadata"]["labels"][TEST_LABEL] == namespace
            async with httpx.AsyncClient(timeout=10) as http:
                ready = await http.get(f"http://127.0.0.1:{probe}/readyz")
                metrics = await http.get(f"http://127.0.0.1:{probe}/metrics")
            assert ready.status_code == 200 and "[+]cluster ok" in ready.text
            assert "capstan_capacity_launches_total" in metrics.text
            async with await KubeClient.in_cluster(environ=env) as account:
                other = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": namespace},
                         "spec": {"containers": [{"name": "c", "image": "example.com/x:1"}]}}  # fmt: skip
                await assert_forbidden(
                    "create a pod (no placeholder namespace)", account.create(resources.PODS, other)
                )
                await assert_forbidden("delete a pod", account.delete(resources.PODS, "gpu-0", namespace))
                await assert_forbidden("read a Secret", account.get(resources.SECRETS, "x", namespace))
                await assert_forbidden(
                    "scale a Deployment",
                    account.patch(resources.DEPLOYMENTS, "x", {"spec": {"replicas": 0}}, namespace=namespace),
                )
                await assert_forbidden(
                    "read another Lease in kube-system",
                    account.get(resources.LEASES, "kube-scheduler", "kube-system"),
                )
            await kube.delete(resources.PODS, "gpu-0", namespace, grace_seconds=0)

            async def node_gone() -> bool:
                assert proc.poll() is None, log.read_text()[-2000:]
                return await node_deleted(kube, node)

            await until("the emptied node drained and deleted by the command", node_gone)
            async with httpx.AsyncClient(timeout=10) as http:
                metrics = await http.get(f"http://127.0.0.1:{probe}/metrics")
            assert re.search(r"^capstan_capacity_drains_total 1\.0$", metrics.text, re.M), metrics.text[
                -1500:
            ]
            assert "403" not in log.read_text(), log.read_text()[-2000:]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


async def test_with_the_chart_s_identity_it_drains_and_deletes_the_node_once_its_pod_is_gone(
    sandbox: Sandbox, kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, cleanup_nodes: None
) -> None:
    """The controller in a pod of the chart's ServiceAccount (its client from the service variables and a
    TokenRequest token, deploy/helm/capstan: files/rbac/capacity.yaml): it launches a node for a gated pod, and
    once the pod is deleted it drains the node and the kwok provider deletes it, with no call refused. It cannot
    evict or delete the pod itself. (In-process, the loop `capstan capacity run` runs, so each failed call is seen
    as it happens, and the drain's Event; the command's own drain is in the test above.)"""
    from tests.fixtures.identity import assert_forbidden, in_cluster_identity

    nt = node_type(namespace)
    await kube.create(resources.PODS, gated_pod("gpu-0", namespace))
    async with (
        in_cluster_identity("capacity", sandbox, kube, kubeconfig, tmp_path / "account") as env,
        await KubeClient.in_cluster(environ=env) as account,
    ):
        run = Running(account, namespace, nt)
        try:

            async def bound() -> bool:
                assert not run.forbidden(), run.forbidden()
                pod = await kube.get(resources.PODS, "gpu-0", namespace)
                return bool(pod["spec"].get("nodeName"))

            await until("the pod bound to a node Capstan launched", bound)
            node = (await kube.get(resources.PODS, "gpu-0", namespace))["spec"]["nodeName"]
            assert (await kube.get(resources.NODES, node))["metadata"]["labels"][PURPOSE_LABEL] == "pods"
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "gpu-0", "namespace": namespace},
            }
            await assert_forbidden(
                "evict a pod",
                account.request(
                    "POST", resources.PODS.item_path("gpu-0", namespace, "eviction"), body=eviction
                ),
            )
            await assert_forbidden("delete a pod", account.delete(resources.PODS, "gpu-0", namespace))
            await kube.delete(resources.PODS, "gpu-0", namespace, grace_seconds=0)

            async def node_gone() -> bool:
                assert not run.forbidden(), run.forbidden()
                return await node_deleted(kube, node)

            await until("the empty node to be drained and deleted", node_gone)
        finally:
            stats = await run.stop()
    assert not [f for f in stats.failures if " 403 " in f], stats.failures
    assert run.metric("capstan_capacity_drains_total") == 1
    assert run.metric("capstan_capacity_launches_total", type=nt.name, purpose="pods") == 1
    node_events, _ = await kube.list(resources.EVENTS, namespace="default")
    assert any(e["involvedObject"]["name"] == node and e["reason"] == "CapstanDraining" for e in node_events)


async def test_with_the_chart_s_identity_headroom_is_held_by_placeholders_in_their_namespace_only(
    sandbox: Sandbox, kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, cleanup_nodes: None
) -> None:
    """The controller in a pod of the chart's ServiceAccount with ``capacity.placeholderNamespace`` (a Role for
    pod create and delete there only, templates/rbac.yaml): a suspended Job's demand gets a headroom node, and a
    placeholder pod made in that namespace, in the PriorityClass ``capstan-headroom`` it creates, holds the
    node's free GPUs; a real pod preempts it. Once the Job is gone the placeholders are deleted (drains are off
    here, so nothing else deletes them). No call is refused; a pod anywhere else is still 403."""
    from capstan.capacity.live import ensure_namespace
    from tests.fixtures.identity import assert_forbidden, in_cluster_identity

    priority_classes = resources.Resource(
        "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
    )
    holders = f"{namespace[:50]}-holders"
    await ensure_namespace(kube, holders, tries=1200)
    # the controller must create the PriorityClass itself, with the identity's grant
    await kube.delete(priority_classes, "capstan-headroom")
    nt = node_type(namespace)
    await kube.create(resources.JOBS, suspended_job("train", namespace))
    values = ("--set", f"capacity.placeholderNamespace={holders}")
    try:
        async with (
            in_cluster_identity("capacity", sandbox, kube, kubeconfig, tmp_path / "account", *values) as env,
            await KubeClient.in_cluster(environ=env) as account,
        ):
            queue = SuspendedJobs(refresh_s=0.5)
            run = Running(
                account,
                namespace,
                nt,
                config=PlannerConfig(min_idle_s=1.0, headroom_wait_s=0.0, drain=False),
                forecaster=QueuedDemand(queue, NoForecast()),
                queue=queue,
                placeholder_namespace=holders,
            )
            try:

                async def placeholders() -> dict[str, dict[str, Any]]:
                    """The placeholders not being deleted, by the node they are bound to ('' for none yet)."""
                    assert not run.forbidden(), run.forbidden()
                    items, _ = await kube.list(resources.PODS, namespace=holders)
                    return {
                        p["spec"].get("nodeName", ""): p
                        for p in items
                        if p["metadata"]["name"].startswith("capstan-headroom")
                        and not p["metadata"].get("deletionTimestamp")
                    }

                async def held() -> bool:
                    return any(await placeholders())  # '' (not bound yet) is not a node

                await until("a placeholder to hold a headroom node's GPUs", held)
                ((first, placeholder),) = [(n, p) for n, p in (await placeholders()).items() if n]
                node = await kube.get(resources.NODES, first)
                assert node["metadata"]["labels"][PURPOSE_LABEL] == "headroom"
                assert node["metadata"]["labels"][TEST_LABEL] == namespace
                assert placeholder["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "2"
                assert placeholder["spec"]["priorityClassName"] == "capstan-headroom"
                assert placeholder["spec"]["priority"] == -10
                made = await kube.get(priority_classes, "capstan-headroom")
                assert made["value"] == -10 and made["preemptionPolicy"] == "Never"
                pods, _ = await kube.list(resources.PODS, namespace=namespace)
                assert pods == []  # held for the Job's pods, which do not exist yet

                await kube.create(resources.PODS, real_pod_on(first, namespace))

                async def preempted() -> bool:
                    pod = await kube.get(resources.PODS, "real", namespace)
                    return pod["spec"].get("nodeName") == first and first not in await placeholders()

                await until("the real pod to preempt the placeholder", preempted)

                async def moved() -> bool:  # the Job still wants its room: a second node, held the same way
                    return any(n not in ("", first) for n in await placeholders())

                await until("a placeholder to hold a second headroom node", moved)

                # what the identity may not write: pods outside the placeholder namespace, the PriorityClass
                other = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": namespace},
                         "spec": {"containers": [{"name": "c", "image": "example.com/x:1"}]}}  # fmt: skip
                await assert_forbidden(
                    "create a pod outside the placeholder namespace", account.create(resources.PODS, other)
                )
                await assert_forbidden(
                    "delete a pod outside the placeholder namespace",
                    account.delete(resources.PODS, "real", namespace),
                )
                await assert_forbidden(
                    "delete the PriorityClass", account.delete(priority_classes, "capstan-headroom")
                )

                # the Job's demand goes: the controller deletes the placeholders it made
                await kube.delete(resources.JOBS, "train", namespace)

                async def released() -> bool:
                    return not await placeholders()

                await until("the placeholders to be deleted once no headroom is held", released)
                assert (await kube.get(resources.PODS, "real", namespace))["spec"]["nodeName"] == first
            finally:
                stats = await run.stop()
    finally:
        await kube.delete(resources.JOBS, "train", namespace)
        await kube.delete(resources.NAMESPACES, holders)
    assert not [f for f in stats.failures if " 403 " in f], stats.failures
    assert run.metric("capstan_capacity_launches_total", type=nt.name, purpose="headroom") >= 1
    assert run.metric("capstan_capacity_launches_total", type=nt.name, purpose="pods") == 0


async def serving_deployment(kube: KubeClient, namespace: str) -> None:
    """Deployment ``llm`` at zero replicas, its pods gated for Capstan: what a gateway's replicas would be."""
    template = gated_pod("unused", namespace)
    await kube.create(
        resources.DEPLOYMENTS,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "llm", "namespace": namespace},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "llm"}},
                "template": {"metadata": {"labels": {"app": "llm"}}, "spec": template["spec"]},
            },
        },
    )


def gateway_app(endpoint_url: str) -> Any:
    """``capstan route``'s app over one endpoint serving model ``m``."""
    from capstan.config import load_model
    from capstan.route import RouteConfig, Router, upstream_for

    route = load_model(
        RouteConfig,
        {
            "endpoints": [{"name": "a", "url": endpoint_url, "models": ["m"]}],
            "proxy": {"poll_interval_s": 0.05},
        },
        "test",
    )
    return Router(route, upstream=upstream_for(route.proxy)).app


def gateway_controller(demand: GatewayDemand) -> Controller:
    """A controller whose only headroom is the replicas ``demand`` announces."""
    return Controller(
        live_config(PlannerConfig(min_idle_s=60.0, headroom_wait_s=0.0)),
        react=0.2,
        review_interval=0.5,
        forecaster=QueuedDemand(demand, NoForecast()),
    )


async def ask_until_launched(kube: KubeClient, namespace: str, gateway_url: str, what: str) -> set[int]:
    """Chat requests to the gateway, six at a time, until a node is launched in ``namespace`` (the rate kept up
    until the controller has read it); the HTTP statuses the gateway answered."""
    statuses: set[int] = set()
    async with httpx.AsyncClient(base_url=gateway_url, timeout=10) as http:

        async def launched() -> bool:
            if await labelled_nodes(kube, namespace):
                return True
            for _ in range(6):
                r = await http.post(
                    "/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                )
                statuses.add(r.status_code)
                await asyncio.sleep(0.05)
            return False

        await until(what, launched, tries=100)
    return statuses


async def test_a_gateway_s_request_rate_gets_nodes_before_the_replicas_exist(
    kube: KubeClient, namespace: str, cleanup_nodes: None
) -> None:
    """A real gateway (``capstan route``'s app on loopback, over one upstream) forwards a burst of requests; the
    controller scrapes its ``capstan_route_responses_total`` and, at 1 request/s a replica, announces the replicas
    of a Deployment that has none: a node is launched for them while no pod exists. Then the gateway goes away:
    the scrapes fail, are retried and counted, and the loop runs on without a failed action."""
    from tests.integration.route._servers import ServerThread, Upstream

    await serving_deployment(kube, namespace)
    upstream = Upstream("a")
    with ServerThread(upstream.app) as engine:
        gateway = ServerThread(gateway_app(engine.url)).__enter__()
        demand = GatewayDemand(f"{namespace}/llm", 1.0, window_s=3.0, refresh_s=0.3)
        stop = asyncio.Event()
        metrics = ControllerMetrics()
        task = asyncio.create_task(
            run_controller(kube, KwokProvider(kube), gateway_controller(demand), (node_type(namespace),), stop=stop,
                           namespace=namespace, tick_s=0.2, gateway=(f"{gateway.url}/metrics", demand),
                           metrics=metrics)
        )  # fmt: skip
        try:
            answered = await ask_until_launched(
                kube, namespace, gateway.url, "a node launched for the replicas"
            )
            assert answered == {200}  # every request forwarded
            pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector="app=llm")
            assert pods == []  # launched ahead: the Deployment has no pod
            nodes = await labelled_nodes(kube, namespace)
            assert nodes[0]["metadata"]["labels"][PURPOSE_LABEL] == "headroom"
            read = metrics.registry.get_sample_value
            assert (read("capstan_capacity_gateway_requests_per_second") or 0.0) > 0.0
            gateway.__exit__()  # the gateway goes away: scrapes fail and are retried

            async def scrape_failed() -> bool:
                return demand.last_error is not None

            await until("a failed scrape", scrape_failed)
        finally:
            stop.set()
            stats = await asyncio.wait_for(task, 30)
            gateway.__exit__()
            await kube.delete(resources.DEPLOYMENTS, "llm", namespace)
    assert stats.gateway_errors >= 1 and not stats.failures and stats.passes > 0
    assert (
        metrics.registry.get_sample_value("capstan_capacity_gateway_scrape_errors_total")
        == stats.gateway_errors
    )


async def test_a_deployment_scaled_to_zero_gets_a_node_from_the_requests_the_gateway_refused(
    kube: KubeClient, namespace: str, cleanup_nodes: None
) -> None:
    """Scale from zero: the gateway's only endpoint answers nothing (no replica runs), so it refuses every request
    with 503 ``no_healthy_endpoint`` and forwards none; those refusals are demand, and the controller launches a
    node for the Deployment's first replica while it has no pod."""
    from tests.integration.route._servers import ServerThread, free_port

    await serving_deployment(kube, namespace)
    demand = GatewayDemand(f"{namespace}/llm", 1.0, window_s=3.0, refresh_s=0.3)
    stop = asyncio.Event()
    with ServerThread(gateway_app(f"http://127.0.0.1:{free_port()}")) as gateway:
        task = asyncio.create_task(
            run_controller(kube, KwokProvider(kube), gateway_controller(demand), (node_type(namespace),), stop=stop,
                           namespace=namespace, tick_s=0.2, gateway=(f"{gateway.url}/metrics", demand))
        )  # fmt: skip
        try:
            refused = await ask_until_launched(
                kube, namespace, gateway.url, "a node for the refused requests"
            )
            assert refused == {503}  # nothing was forwarded: every request was refused for want of a replica
            pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector="app=llm")
            assert pods == []
        finally:
            stop.set()
            stats = await asyncio.wait_for(task, 30)
            await kube.delete(resources.DEPLOYMENTS, "llm", namespace)
    assert not stats.failures


def test_capacity_run_names_what_is_wrong_with_the_gateway_settings(
    namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    """The three gateway flags go together, and each bad one is one line, exit 2, before the cluster is read."""
    types = write_node_types(tmp_path / "types.yaml", namespace)
    common = ("--node-types", str(types), "--kubeconfig", str(kubeconfig), "--duration", "1s")
    good = ("--gateway-metrics", "http://127.0.0.1:9/metrics", "--gateway-deployment", "serve/llm",
            "--replica-rps", "2")  # fmt: skip
    cases = {
        (
            "--gateway-metrics",
            "http://127.0.0.1:9/metrics",
        ): "--gateway-deployment, --replica-rps: needed with",
        (*good[:4], "--replica-rps", "0"): "--replica-rps",
        ("--gateway-metrics", "ftp://x/metrics", *good[2:]): "expected an http:// or https:// URL",
        # the URL's password never reaches the error line (the CLI's one line goes through the redactor)
        ("--gateway-metrics", "ftp://admin:Pl4ntedGw0rd@x/metrics", *good[2:]): "admin:[REDACTED]@x",
        (*good[:2], "--gateway-deployment", "llm", *good[4:]): "--gateway-deployment: deployment 'llm'",
        (*good, "--no-headroom"): "cannot go with --no-headroom",
    }
    for args, words in cases.items():
        r = capstan_run(*common, *args)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, (args, r.stderr)
        assert words in r.stderr and "Traceback" not in r.stderr and "Pl4nted" not in r.stderr, (
            args,
            r.stderr,
        )


PROVREQ_APIS = ("k8s.io/autoscaler/cluster-autoscaler/apis", "v0.0.0-20240830133931-adfbe7e45277")
"""The module the ProvisioningRequest CRD comes from: the version Kueue v0.17.0 requires (the Go module proxy
serves it; it refuses cluster-autoscaler itself)."""


async def install_provisioning_request_crd(kube: KubeClient) -> None:
    """The real ProvisioningRequest CRD, from the cluster-autoscaler apis module, established and served."""
    import yaml

    from capstan.capacity.live import PROVISIONING_REQUESTS
    from capstan.sandbox import go_module_dir

    crds = resources.Resource(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
    )
    module = await asyncio.to_thread(go_module_dir, *PROVREQ_APIS)
    manifest = yaml.safe_load(
        (module / "config" / "crd" / "autoscaling.x-k8s.io_provisioningrequests.yaml").read_text()
    )
    await kube.apply(crds, manifest)

    async def served() -> bool:  # a new CRD's storage answers 404 or 429 until it is established
        try:
            await kube.list(PROVISIONING_REQUESTS)
        except ApiError:
            return False
        return True

    await until("ProvisioningRequests to be served", served)


def provisioning_request(name: str, namespace: str, template: str, count: int, cls: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "provisioningClassName": cls,
            "podSets": [{"podTemplateRef": {"name": template}, "count": count}],
        },
    }


async def test_a_provisioning_request_is_provisioned_once_nodes_for_all_its_pods_are_launched(
    kube: KubeClient, namespace: str, cleanup_nodes: None
) -> None:
    """Capstan serves ProvisioningRequests as cluster-autoscaler does for Kueue, on the real CRD: made while the
    controller runs, a best-effort-atomic request for three one-GPU pods (two-GPU nodes) gets both nodes launched in one plan and
    ``Provisioned=True`` while no pod exists; a check-capacity request for one more pod is ``Provisioned`` once
    the GPUs are allocatable (the fourth GPU); the pods Kueue would then create (gated, consuming the request) are
    placed on those nodes and nothing more is launched. The pod template's planted secret is in no condition."""
    from capstan.capacity.live import (
        BEST_EFFORT_ATOMIC,
        CHECK_CAPACITY,
        CONSUME_ANNOTATION,
        PODTEMPLATES,
        PROVISIONING_REQUESTS,
        ProvisioningRequests,
    )
    from capstan.errors import UserError

    try:
        await ProvisioningRequests().check(kube)
    except UserError as exc:
        assert "no ProvisioningRequest CRD" in str(exc)
        await install_provisioning_request_crd(kube)
    await ProvisioningRequests().check(kube)
    nt = node_type(namespace)
    secret = "hf_" + "Zq" * 17
    spec = gated_pod("unused", namespace)["spec"]
    spec["containers"][0]["env"] = [{"name": "HF_TOKEN", "value": secret}]
    requests = ProvisioningRequests()
    controller = Controller(
        live_config(PlannerConfig(min_idle_s=60.0, headroom_wait_s=0.0)),
        react=0.2,
        review_interval=0.5,
        forecaster=QueuedDemand(requests, NoForecast()),
    )
    stop = asyncio.Event()
    metrics = ControllerMetrics()
    passes = asyncio.Event()
    task = asyncio.create_task(
        run_controller(kube, KwokProvider(kube), controller, (nt,), stop=stop, namespace=namespace, tick_s=0.2,
                       provisioning=requests, metrics=metrics, on_pass=lambda c, s: passes.set())
    )  # fmt: skip
    # the controller is running, and quiet, before Kueue makes the request (made first, a request was served,
    # but one made later waited with nothing launched until the next full plan)
    await asyncio.wait_for(passes.wait(), 30)
    await asyncio.sleep(1.0)
    await kube.create(
        PODTEMPLATES,
        {"metadata": {"name": "workers", "namespace": namespace}, "template": {"metadata": {}, "spec": spec}},
    )
    await kube.create(
        PROVISIONING_REQUESTS, provisioning_request("train", namespace, "workers", 3, BEST_EFFORT_ATOMIC)
    )
    await kube.create(
        PROVISIONING_REQUESTS, provisioning_request("probe", namespace, "workers", 1, CHECK_CAPACITY)
    )

    async def conditions(name: str) -> dict[str, tuple[str, str]]:
        obj = await kube.get(PROVISIONING_REQUESTS, name, namespace)
        return {
            c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions") or []
        }

    try:

        async def provisioned() -> bool:
            return (await conditions("train")).get("Provisioned", ("", ""))[0] == "True"

        await until("the best-effort request to be provisioned", provisioned)
        pods, _ = await kube.list(resources.PODS, namespace=namespace)
        assert pods == []  # provisioned ahead: no pod of the workload exists yet
        assert await conditions("train") == {
            "Accepted": ("True", "Accepted"),
            "Provisioned": ("True", "CapacityIsProvisioned"),
        }
        nodes = await labelled_nodes(kube, namespace)
        assert len(nodes) == 2 and {n["metadata"]["labels"][PURPOSE_LABEL] for n in nodes} == {"headroom"}

        async def found() -> bool:
            return (await conditions("probe")).get("Provisioned") == ("True", "CapacityIsFound")

        await until("the check-capacity request to find its GPU", found)
        for i in range(3):  # what Kueue does once the workload is admitted: its pods, consuming the request
            pod = gated_pod(f"train-{i}", namespace)
            pod["metadata"]["annotations"] = {CONSUME_ANNOTATION: "train"}
            pod["metadata"]["labels"] = {"app": "train"}
            await kube.create(resources.PODS, pod)

        async def all_bound() -> bool:
            pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector="app=train")
            return len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods)

        await until("the request's pods to be bound", all_bound)
        pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector="app=train")
        assert {p["spec"]["nodeName"] for p in pods} <= {n["metadata"]["name"] for n in nodes}
        assert len(await labelled_nodes(kube, namespace)) == 2
        for name in ("train", "probe"):
            obj = await kube.get(PROVISIONING_REQUESTS, name, namespace)
            assert secret not in repr(obj.get("status"))
        assert (
            metrics.registry.get_sample_value("capstan_capacity_provisioning_requests", {"outcome": "booked"})
            == 2.0
        )
    finally:
        stop.set()
        stats = await asyncio.wait_for(task, 30)
        for pod in (await kube.list(resources.PODS, namespace=namespace))[0]:
            await kube.delete(resources.PODS, pod["metadata"]["name"], namespace, grace_seconds=0)
    assert not stats.failures, stats.failures
