"""Replay a workload's pods on a real cluster, time-compressed: each pod is created at its arrival and deleted at
its end (divided by ``speed``), and how long each waited to be bound is measured from the API server's view.

Whatever places the pods (Capstan's controller for gated pods, or a real autoscaler and kube-scheduler for plain
ones) is measured the same way, so one replay compares them on the same cluster.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from capstan.capacity.controller import Controller
from capstan.capacity.live._cluster import EventSink
from capstan.capacity.live._kwok import KwokProvider
from capstan.capacity.live._loop import RunStats, run_controller
from capstan.capacity.live._objects import BOOTING_TAINT, GATE, GPU_RESOURCE, SERVICE_LABEL
from capstan.capacity.live._report import ControllerMetrics
from capstan.capacity.model import NodeType, Pod
from capstan.capacity.placement import INSTANCE_TYPE_LABEL
from capstan.kube import ApiError, KubeClient, resources

POOL_LABEL = "capstan.io/replay-pool"
"""Replayed pods select nodes with this label (the node types of the replay carry it), so they never land on the
cluster's other nodes."""


NO_EVICTION_ANNOTATIONS = {
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    "karpenter.sh/do-not-disrupt": "true",
}
"""What a pod that must not be moved carries (``Pod.safe_to_evict`` False): cluster-autoscaler's and Karpenter's
own annotations, which keep its node from being scaled down or consolidated while it runs."""

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
UNREGISTERED_TAINT = "karpenter.sh/unregistered"
"""Karpenter's taint on a Node its NodeClaim has not registered yet (taken off with the NodeClaim's startup
taints put on)."""


def pod_manifest(pod: Pod, name: str, namespace: str, *, pool: str, gated: bool) -> dict[str, Any]:
    """A Kubernetes Pod asking for what ``pod`` asks for (a GPU share asks for one whole device; the trace's
    priority is not carried: the API server takes priority only from a PriorityClass). A pod that is not safe to
    evict carries :data:`NO_EVICTION_ANNOTATIONS`."""
    requests = {"cpu": f"{max(pod.cpu_milli, 1)}m", "memory": f"{max(pod.memory_mib, 1)}Mi"}
    limits: dict[str, str] = {}
    if pod.wants_gpu:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(max(1, pod.num_gpu))
    spec: dict[str, Any] = {
        "nodeSelector": {POOL_LABEL: pool, **dict(pod.node_selector)},
        "tolerations": [
            {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
            {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "kwok-provider", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "task",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": requests, "limits": limits},
            }
        ],
    }
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/part-of": "capstan-replay"},
    }
    if not pod.safe_to_evict:
        metadata["annotations"] = dict(NO_EVICTION_ANNOTATIONS)
    if pod.service:
        # a replica of an inference service, as the trace says: forecast as one (no Deployment owns it here)
        metadata["labels"][SERVICE_LABEL] = _label_value(pod.service)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _label_value(text: str) -> str:
    """``text`` as a label value: at most 63 of ``[A-Za-z0-9._-]``, starting and ending alphanumeric."""
    value = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "-" for c in text)[:63]
    return value.strip("._-") or "service"


@dataclass
class ReplayResult:
    """What a replay saw, in wall-clock seconds (``speed`` converts to trace time)."""

    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    """Wall-clock time each pod was first seen bound to a node (by the replay's polling)."""
    ended: dict[str, float] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    """Whole GPUs each pod asked for."""
    nodes_seen: set[str] = field(default_factory=set)
    pod_node: dict[str, str] = field(default_factory=dict)
    """The node each bound pod was bound to."""
    node_life: dict[str, list[float]] = field(default_factory=dict)
    """Each node of the replay's pool: [first seen, last seen] wall-clock."""
    node_gpus: dict[str, int] = field(default_factory=dict)
    node_type: dict[str, str] = field(default_factory=dict)
    gpu_ready: dict[str, float] = field(default_factory=dict)
    """Wall-clock time each node was first seen with its GPUs allocatable and no boot (or Karpenter
    registration) taint: the end of its boot."""

    def pending_s(self, speed: float) -> list[float]:
        """Seconds each bound pod waited, in trace time (wall-clock wait × ``speed``)."""
        return sorted((self.bound[n] - self.created[n]) * speed for n in self.bound if n in self.created)

    def unbound(self) -> list[str]:
        return sorted(set(self.created) - set(self.bound))

    def last_end(self) -> float:
        """When the replay's last pod ended (wall clock): where the simulator stops counting."""
        return max(self.ended.values(), default=max(self.created.values(), default=0.0))

    def _lives(self, until: float | None) -> dict[str, tuple[float, float]]:
        """Each node's [first seen, last seen], cut at ``until`` (nodes first seen after it left out)."""
        cut = math.inf if until is None else until
        return {n: (a, min(b, cut)) for n, (a, b) in self.node_life.items() if a < cut}

    def gpu_hours(self, speed: float, *, until: float | None = None) -> float:
        """GPU-hours the pool's nodes were up (up to ``until``, wall clock), in trace time."""
        lives = self._lives(until)
        return sum((b - a) * self.node_gpus.get(n, 0) for n, (a, b) in lives.items()) * speed / 3600

    def allocated_gpu_hours(self, speed: float) -> float:
        return (
            sum((self.ended.get(n, self.bound[n]) - self.bound[n]) * self.gpus.get(n, 0) for n in self.bound)
            * speed
            / 3600
        )

    def drains(self, *, until: float | None = None) -> int:
        """Nodes of the pool that went away before ``until`` (default: the last time any was seen)."""
        cut = max((b for _, b in self.node_life.values()), default=0.0) if until is None else until
        return sum(1 for _, b in self.node_life.values() if b < cut)

    def idle_by_cause(self, speed: float, *, until: float | None = None) -> dict[str, float]:
        """Idle GPU-hours of the pool's nodes (up to ``until``, wall clock), in trace time, by the simulator's
        causes (``booting``: launched but GPUs not yet allocatable; ``empty``: ready with no pod bound;
        ``unallocated``: the free GPUs of a node some pod runs on). Nodes of no GPU count for nothing."""
        out = {"booting": 0.0, "empty": 0.0, "unallocated": 0.0}
        by_node: dict[str, list[tuple[float, float, int]]] = {}
        for pod, node in self.pod_node.items():
            start = self.bound[pod]
            by_node.setdefault(node, []).append((start, self.ended.get(pod, start), self.gpus.get(pod, 0)))
        for node, (first, last) in self._lives(until).items():
            gpus = self.node_gpus.get(node, 0)
            if gpus <= 0:
                continue
            ready = min(max(self.gpu_ready.get(node, last), first), last)
            out["booting"] += (ready - first) * gpus
            # sweep the pods' intervals over [ready, last]: no pod → empty, else the GPUs none of them holds
            pods = by_node.get(node, [])
            edges = sorted({ready, last, *(min(max(t, ready), last) for a, b, _ in pods for t in (a, b))})
            for lo, hi in itertools.pairwise(edges):
                on = [g for a, b, g in pods if a <= lo and b >= hi]
                out["unallocated" if on else "empty"] += (hi - lo) * max(0, gpus - sum(on))
        return {k: v * speed / 3600 for k, v in out.items()}

    def cost(self, speed: float, prices: dict[str, float], *, until: float | None = None) -> float:
        """What the pool's nodes cost (up to ``until``, wall clock), in trace time, at ``prices`` per node type
        and hour."""
        lives = self._lives(until)
        return (
            sum((b - a) * prices.get(self.node_type.get(n, ""), 0.0) for n, (a, b) in lives.items())
            * speed
            / 3600
        )


def _dns_name(i: int, pod: Pod) -> str:
    base = "".join(c if c.isalnum() else "-" for c in pod.name.lower()).strip("-")[:40] or "pod"
    return f"r{i}-{base}"


async def replay_pods(
    client: KubeClient,
    pods: Iterable[Pod],
    namespace: str,
    *,
    speed: float,
    pool: str,
    gated: bool,
    poll_s: float = 0.5,
    max_duration_s: float = 3600.0,
    clock: Callable[[], float] = time.time,
) -> ReplayResult:
    """Create each pod at ``arrival / speed`` seconds from now and delete it ``duration / speed`` after it was
    bound; return when every pod has ended (or ``max_duration_s`` has passed: the rest are deleted)."""
    plan = sorted(pods, key=lambda p: (p.arrival, p.name))
    t0 = plan[0].arrival if plan else 0.0
    start = clock()
    result = ReplayResult()
    names = {p.name: _dns_name(i, p) for i, p in enumerate(plan)}
    by_name = {names[p.name]: p for p in plan}
    ends: dict[str, float] = {}
    i = 0
    live: set[str] = set()
    while (i < len(plan) or live) and clock() - start < max_duration_s:
        now = clock()
        while i < len(plan) and start + (plan[i].arrival - t0) / speed <= now:
            name = names[plan[i].name]
            await client.create(
                resources.PODS, pod_manifest(plan[i], name, namespace, pool=pool, gated=gated)
            )
            result.created[name] = clock()
            result.gpus[name] = max(1, plan[i].num_gpu) if plan[i].wants_gpu else 0
            live.add(name)
            i += 1
        items, _ = await client.list(resources.PODS, namespace=namespace)
        await _watch_nodes(client, pool, result, clock())
        now = clock()
        for obj in items:
            name = obj["metadata"]["name"]
            node = (obj.get("spec") or {}).get("nodeName")
            if node and name in live and name not in result.bound:
                result.bound[name] = now
                result.nodes_seen.add(str(node))
                result.pod_node[name] = str(node)
                ends[name] = now + by_name[name].duration / speed
        for name in [n for n, at in ends.items() if at <= now and n in live]:
            await _delete(client, name, namespace)
            live.discard(name)
            result.ended[name] = clock()
        # wake for the next arrival or end when it comes before the next poll: a pod created or deleted a poll
        # late would shift the trace by up to poll_s × speed seconds (10 trace s at 0.5 s and 20×)
        due = [at for n, at in ends.items() if n in live]
        if i < len(plan):
            due.append(start + (plan[i].arrival - t0) / speed)
        await asyncio.sleep(min(poll_s, max(0.0, min(due, default=math.inf) - clock())))
    for name in sorted(live):
        await _delete(client, name, namespace)
        result.ended[name] = clock()
    return result


async def follow_scale_down(
    client: KubeClient,
    pool: str,
    result: ReplayResult,
    *,
    timeout_s: float,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.time,
) -> bool:
    """After a replay: keep counting the pool's nodes until none is left (True) or ``timeout_s`` has passed."""
    start = clock()
    while clock() - start < timeout_s:
        if not await _watch_nodes(client, pool, result, clock()):
            return True
        await asyncio.sleep(poll_s)
    return False


async def _watch_nodes(client: KubeClient, pool: str, result: ReplayResult, now: float) -> int:
    """Note the pool's nodes up at ``now``; returns how many there are."""
    nodes, _ = await client.list(resources.NODES, label_selector=f"{POOL_LABEL}={pool}")
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name"))
        life = result.node_life.setdefault(name, [now, now])
        life[1] = now
        labels = meta.get("labels") or {}
        status = node.get("status") or {}
        if name not in result.node_gpus:
            # the type's GPU count (a label on every node of a GPU type), not status: Karpenter's kwok nodes
            # have the NodeClaim's requests as capacity
            count = labels.get(GPU_COUNT_LABEL, (status.get("capacity") or {}).get(GPU_RESOURCE, "0"))
            result.node_gpus[name] = _int(count)
            result.node_type[name] = str(labels.get(INSTANCE_TYPE_LABEL, ""))
        if name not in result.gpu_ready:
            taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
            usable = _int((status.get("allocatable") or {}).get(GPU_RESOURCE, "0"))
            if not taints & {BOOTING_TAINT, UNREGISTERED_TAINT} and (
                usable > 0 or not result.node_gpus[name]
            ):
                result.gpu_ready[name] = now
    return len(nodes)


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


async def _delete(client: KubeClient, name: str, namespace: str) -> None:
    try:
        await client.delete(resources.PODS, name, namespace, grace_seconds=0)
    except ApiError as exc:
        if not exc.not_found:
            raise


@dataclass
class ControlledReplay:
    """A replay placed by Capstan's controller: what the replay saw, what the controller did, and how many of
    the pool's nodes were still there at the end (deleted then)."""

    replay: ReplayResult
    stats: RunStats
    left_over: int


async def replay_under_controller(
    client: KubeClient,
    pods: Iterable[Pod],
    namespace: str,
    controller: Controller,
    node_types: tuple[NodeType, ...],
    *,
    speed: float,
    pool: str,
    drain_wait_s: float,
    poll_s: float = 0.5,
    metrics: ControllerMetrics | None = None,
    events: EventSink | None = None,
    max_duration_s: float = 3600.0,
) -> ControlledReplay:
    """Run ``controller`` on the cluster (kwok provider, ``namespace``'s pods) while :func:`replay_pods` creates
    ``pods`` gated for it (polled every ``poll_s``); then follow the pool's nodes until the controller has drained
    them (at most ``drain_wait_s``), stop it, and delete any node of the pool left."""
    await ensure_namespace(client, namespace)
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_controller(client, KwokProvider(client), controller, node_types, stop=stop, namespace=namespace,
                       tick_s=0.3, metrics=metrics, events=events)
    )  # fmt: skip
    try:
        result = await replay_pods(
            client,
            pods,
            namespace,
            speed=speed,
            pool=pool,
            gated=True,
            poll_s=poll_s,
            max_duration_s=max_duration_s,
        )
        await follow_scale_down(client, pool, result, timeout_s=drain_wait_s)
    finally:
        stop.set()
        stats = await task
        nodes, _ = await client.list(resources.NODES, label_selector=f"{POOL_LABEL}={pool}")
        for node in nodes:
            await client.delete(resources.NODES, node["metadata"]["name"])
    return ControlledReplay(result, stats, len(nodes))


async def ensure_namespace(client: KubeClient, name: str, *, tries: int = 300) -> None:
    """Create namespace ``name`` if it is missing and wait (bounded) for its default ServiceAccount, which
    kube-controller-manager adds and pods need."""
    try:
        await client.create(
            resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    except ApiError as exc:
        if not exc.conflict:
            raise
    for _ in range(tries):
        try:
            await client.get(resources.SERVICE_ACCOUNTS, "default", name)
            return
        except ApiError:
            await asyncio.sleep(0.1)
