"""Kubernetes objects read as the planner's pods and nodes (pure functions), and the live cluster's snapshot and
recorded actions over plain informer state (no API server: the sandbox test drives the same code for real)."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.capacity import Controller, Delay, NodeState, NodeType, PlanCache, PlannerConfig, Pod, plan
from capstan.capacity.live import (
    GATE,
    PROMISED_ANNOTATION,
    PURPOSE_LABEL,
    SERVICE_LABEL,
    LiveCluster,
    live_config,
    pod_from_object,
    pod_manifest,
    service_of,
)
from capstan.capacity.live._objects import BOOTING_TAINT, DRAINING_TAINT, epoch, is_managed, node_state

pytestmark = pytest.mark.unit

L4X2 = NodeType("l4x2", 8000, 32768, 2, "NVIDIA-L4", 1.6, boot_delay=Delay("fixed", 60.0))


def pod(name: str, *, gpus: int = 1, gated: bool = True, node: str = "", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "a",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}},
            },
            {"name": "b", "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}},
        ],
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4", "memory": "64Mi"}}}],
        **extra,
    }
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-12-03T12:00:00Z"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def node(
    name: str, *, taints: tuple[str, ...] = (), gpus_ready: bool = True, ready: bool = True
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"node.kubernetes.io/instance-type": "l4x2", PURPOSE_LABEL: "pods"},
            "creationTimestamp": "2026-12-03T11:00:00Z",
        },
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2" if gpus_ready else "0"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_a_pod_reads_as_the_scheduler_sums_its_requests() -> None:
    p = pod_from_object(
        pod(
            "p",
            gpus=2,
            nodeSelector={"pool": "a"},
            priority=7,
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "nvidia.com/gpu.product",
                                        "operator": "In",
                                        "values": ["NVIDIA-L4"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        )
    )
    assert p.name == "ns/p"
    assert p.arrival == epoch("2026-12-03T12:00:00Z") > 0
    # app containers add up (500m + 1 CPU, 1Gi + 512Mi); the init container alone asks for more CPU
    assert (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) == (4000, 1536, 2, 1000)
    assert p.node_selector == (("pool", "a"),) and p.priority == 7
    assert p.gpu_models == frozenset({"NVIDIA-L4"})
    assert p.tolerations[0].operator == "Exists"


def test_a_pod_is_managed_only_while_gated_and_unbound() -> None:
    assert is_managed(pod("p"))
    assert not is_managed(pod("p", gated=False))
    assert not is_managed(pod("p", node="n1"))


def test_node_states_follow_capstans_taints_readiness_and_allocatable_gpus() -> None:
    assert node_state(node("n", taints=(BOOTING_TAINT,))) is NodeState.BOOTING
    assert node_state(node("n", ready=False)) is NodeState.BOOTING
    assert node_state(node("n", gpus_ready=False)) is NodeState.READY
    assert node_state(node("n")) is NodeState.GPU_ALLOCATABLE
    assert node_state(node("n", taints=(DRAINING_TAINT,))) is NodeState.DRAINING


def test_the_snapshot_counts_promised_and_running_pods_against_their_nodes() -> None:
    nodes = {"capstan-n3": node("capstan-n3", gpus_ready=False)}
    promised = pod("a")
    promised["metadata"]["annotations"] = {PROMISED_ANNOTATION: "capstan-n3"}
    pods = {"ns/a": promised, "ns/b": pod("b"), "ns/c": pod("c", gated=False, node="capstan-n3")}
    live = LiveCluster((L4X2,), nodes, pods, clock=lambda: 1e9)
    live.observe()
    snap = live.snapshot()
    assert [p.name for p in snap.pending] == ["ns/b"]
    assert snap.promised == (("ns/a", "capstan-n3"),)
    (view,) = snap.nodes
    assert view.state is NodeState.READY and view.devs == (0, 0)  # one GPU running, one promised
    assert snap.next_id == 4 and snap.node_prefix == "capstan-n"
    assert live.has_pending()


def test_an_empty_node_is_idle_from_when_it_can_take_pods_not_from_its_boot() -> None:
    """As in the simulator, an empty node's idle time (what ``min_idle_s`` waits out before a drain) starts when
    its GPUs are allocatable: counted from its boot, a headroom node booting longer than that wait was drained the
    moment it came up (GenAI's live slice, three nodes drained 9 s before a wave that then launched three more)."""
    now = [1e9]
    nodes: dict[str, Any] = {"capstan-n1": node("capstan-n1", taints=(BOOTING_TAINT,))}
    live = LiveCluster((L4X2,), nodes, {}, clock=lambda: now[0])
    for booting in (node("capstan-n1", taints=(BOOTING_TAINT,)), node("capstan-n1", gpus_ready=False)):
        nodes["capstan-n1"] = booting
        live.observe()
        (view,) = live.snapshot().nodes
        assert view.idle_since is None
        now[0] += 200
    nodes["capstan-n1"] = node("capstan-n1")
    live.observe()
    up = now[0]
    (view,) = live.snapshot().nodes
    assert view.state is NodeState.GPU_ALLOCATABLE and view.idle_since == up
    now[0] += 50
    live.observe()
    assert live.snapshot().nodes[0].idle_since == up  # still empty: the same clock
    # drained and gone, its idle clock goes with it: a node of that name coming back is idle from then
    del nodes["capstan-n1"]
    live.observe()
    assert live.snapshot().nodes == ()
    now[0] += 100
    nodes["capstan-n1"] = node("capstan-n1")
    live.observe()
    assert live.snapshot().nodes[0].idle_since == now[0]


def test_a_snapshot_keeps_unchanged_nodes_views_and_says_what_changed() -> None:
    """On a large cluster most nodes are the same from one decision to the next: their views stay the same
    objects, in the same order, and the snapshot says which changed, so the planner reads only those (a live
    decision at 5,000 nodes spent most of its time rebuilding every node's view and the planner's bins)."""
    now = 1e9
    nodes: dict[str, Any] = {f"n{i}": node(f"n{i}") for i in range(4)}
    pods: dict[str, Any] = {"ns/run": pod("run", gated=False, node="n1"), "ns/p": pod("p"), "ns/q": pod("q")}
    live = LiveCluster((L4X2,), nodes, pods, clock=lambda: now)
    live.observe()
    first = live.snapshot()
    cache = PlanCache((L4X2,))
    plan(first, live_config(), cache)
    again = live.snapshot()
    assert again.nodes is first.nodes and again.changes is None  # nothing changed: the same tuple
    # the informer replaces an object when it changes: a node now booting, one gone, a new one, a pod bound
    nodes["n2"] = node("n2", gpus_ready=False)
    del nodes["n0"]
    nodes["a-new"] = node("a-new")
    pods["ns/q"] = pod("q", gated=False, node="n3")
    live.observe()
    third = live.snapshot()
    assert third.changes is not None and third.changes.since is first.nodes
    assert [v.id for v in third.changes.views] == ["n2", "n3", "a-new"] and third.changes.removed == ("n0",)
    assert [v.id for v in third.nodes] == ["n1", "n2", "n3", "a-new"]  # kept in order, the new one after
    assert third.nodes[0] is first.nodes[1]
    assert third.nodes[2].pods == 1 and third.nodes[1].state is NodeState.READY
    # the same views a new controller's first snapshot makes, and the same plan, read whole or by the changes
    fresh = LiveCluster((L4X2,), nodes, pods, clock=lambda: now)
    fresh.observe()
    assert sorted(fresh.snapshot().nodes, key=lambda v: v.id) == sorted(third.nodes, key=lambda v: v.id)
    assert plan(third, live_config(), cache) == plan(third, live_config(), PlanCache((L4X2,)))


def test_a_pod_arrives_when_first_seen_within_its_creation_second() -> None:
    """creationTimestamp has whole seconds, 20 trace seconds in a replay 20x faster: a pod this controller sees
    within that second arrives when it was seen, one seen later (or before a restart) a second after the stamp,
    and a stamp ahead of the controller's clock is kept."""
    created = epoch("2026-12-03T12:00:00Z")
    pods: dict[str, Any] = {}
    now = [created + 0.4]
    live = LiveCluster((L4X2,), {}, pods, clock=lambda: now[0])
    pods["ns/a"] = pod("a")
    live.observe()
    now[0] = created + 7.0
    pods["ns/b"] = pod("b")
    live.observe()
    now[0] = created - 2.0  # the controller's clock behind the API server's
    pods["ns/c"] = pod("c")
    live.observe()
    arrivals = {p.name: p.arrival - created for p in live.snapshot().pending}
    assert arrivals == {"ns/a": pytest.approx(0.4), "ns/b": 1.0, "ns/c": 0.0}


def test_a_plan_over_the_live_cluster_records_one_launch_and_forgets_nothing_until_the_node_shows() -> None:
    pods = {"ns/a": pod("a"), "ns/b": pod("b")}
    nodes: dict[str, Any] = {}
    now = [1e9]
    live = LiveCluster((L4X2,), nodes, pods, clock=lambda: now[0])
    controller = Controller(live_config(PlannerConfig(headroom=False)))
    controller.start(live)
    live.observe()
    controller.on_wake(live, now[0], "place")
    assert live.log.launches == [("capstan-n0", "l4x2", "pods")]
    assert sorted(live.log.promises) == [("ns/a", "capstan-n0"), ("ns/b", "capstan-n0")]
    # the informers have not shown the node yet: the next plan sees it in flight and launches nothing more
    now[0] += 5
    live.observe()
    assert not live.has_pending()
    controller.on_wake(live, now[0], "place")
    assert len(live.log.launches) == 1
    # moving running pods and draining a node Capstan did not launch are refused, and said so
    assert not live.move("ns/a", "capstan-n0")
    nodes["other"] = node("other")
    nodes["other"]["metadata"]["labels"].pop(PURPOSE_LABEL)
    live.drain("other")
    assert len(live.log.refused) == 2 and not live.log.drains


def test_a_repack_node_coming_up_with_nothing_promised_to_it_is_reported_once() -> None:
    """As the simulator's node coming up: a node launched for a repack, first seen taking pods with no pod promised
    to it, moves ``Activity.repack_up_at`` (a pod the scheduler put there first does not stop it); one with a pod
    promised to it does not; each node counts once."""
    now = [1e9]
    first = node("capstan-n1")
    first["metadata"]["labels"][PURPOSE_LABEL] = "repack"
    promised_to = node("capstan-n2")
    promised_to["metadata"]["labels"][PURPOSE_LABEL] = "repack"
    held = pod("held", gated=False, node="capstan-n2")
    held["metadata"]["annotations"] = {PROMISED_ANNOTATION: "capstan-n2"}  # released to it, the promise kept
    nodes: dict[str, Any] = {"capstan-n1": node("capstan-n1", gpus_ready=False), "capstan-n2": promised_to}
    nodes["capstan-n1"]["metadata"]["labels"][PURPOSE_LABEL] = "repack"
    pods = {"ns/held": held}
    live = LiveCluster((L4X2,), nodes, pods, clock=lambda: now[0])
    live.observe()
    assert live.activity().repack_up_at == float("-inf")  # n1 not up yet; n2 came up with a pod promised
    nodes["capstan-n1"] = first
    pods["ns/other"] = pod("other", gated=False, node="capstan-n1")  # the scheduler put a pod there first
    now[0] += 5
    live.observe()
    seen = live.activity()
    assert seen.repack_up_at == now[0] and not seen.repack_waiting  # not empty, but up for the repack
    now[0] += 5
    assert live.activity().repack_up_at == now[0] - 5  # counted once


async def test_an_event_message_carries_no_planted_secret() -> None:
    """Events leave the process (the API server stores them): their text goes through the shared redactor."""
    from capstan.capacity.live import EventRecorder

    secret = "Pl4ntedEv3ntSecret77"
    sent: list[dict[str, Any]] = []

    class Capture:
        async def create(
            self, resource: Any, body: dict[str, Any], namespace: str | None = None
        ) -> dict[str, Any]:
            sent.append(body)
            return body

    recorder = EventRecorder(Capture())  # type: ignore[arg-type]
    await recorder.emit(pod("p"), "CapstanPlaced", f"node said Authorization: Bearer {secret}", 1e9)
    assert sent and secret not in repr(sent)
    assert sent[0]["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "",
    }


def test_a_pod_is_a_service_replica_by_its_label_or_its_controlling_workload() -> None:
    """Replicas of an inference service are forecast apart from batch pods (the simulator's ``Pod.service``): live,
    a pod is one by its capstan.io/service label, or when a Deployment's ReplicaSet or a StatefulSet controls it;
    a Job's pod or a bare one is not. A replayed trace's replica carries the label and reads back as one."""

    def owned(kind: str, owner: str, *, controller: bool = True, template_hash: str = "") -> dict[str, Any]:
        obj = pod("p")
        obj["metadata"]["ownerReferences"] = [{"kind": kind, "name": owner, "controller": controller}]
        if template_hash:
            obj["metadata"]["labels"] = {"pod-template-hash": template_hash}
        return obj

    assert service_of(owned("ReplicaSet", "vllm-7d4b9c", template_hash="7d4b9c")) == "ns/vllm"
    assert service_of(owned("StatefulSet", "vllm")) == "ns/vllm"
    assert service_of(owned("ReplicaSet", "vllm-7d4b9c")) == ""  # not a Deployment's (no template hash)
    assert service_of(owned("ReplicaSet", "vllm-7d4b9c", controller=False, template_hash="7d4b9c")) == ""
    assert service_of(owned("Job", "train")) == ""
    assert service_of(pod("bare")) == ""
    labelled = pod("r")
    labelled["metadata"]["labels"] = {SERVICE_LABEL: "genai"}
    assert pod_from_object(labelled).service == "ns/genai"
    replica = Pod("genai-r2", 0.0, 8000, 32768, num_gpu=1, gpu_milli=1000, service="genai/Qwen 72B")
    manifest = pod_manifest(replica, "r0-genai-r2", "ns", pool="p", gated=True)
    assert manifest["metadata"]["labels"][SERVICE_LABEL] == "genai-Qwen-72B"
    assert pod_from_object(manifest).service == "ns/genai-Qwen-72B"
    assert (
        pod_from_object(pod_manifest(Pod("t", 0.0, 1000, 1024), "r1-t", "ns", pool="p", gated=True)).service
        == ""
    )
