"""The ``gpu_capacity`` tool over a fixed snapshot, through the official SDK's in-memory client: GPUs by model and
per node state, pending GPU pods and why, capacity in flight, the model filter, paging and budgets; and
``gpu_summary`` still serving ``overview``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from capstan.diagnose import Snapshot
from capstan.mcp import FixedSource, SnapshotLogs, create_server
from capstan.mcp._gpu import NOT_ALLOCATABLE, gpu_summary, node_states
from capstan.redact import Redactor

NOW = 1_764_583_200.0
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def node(
    name: str,
    model: str | None,
    *,
    gpus: int = 8,
    allocatable: int | None = None,
    ready: bool = True,
    cordoned: bool = False,
) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name} | ({"nvidia.com/gpu.product": model} if model else {})
    capacity = {"cpu": "64", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    alloc = dict(capacity)
    if allocatable is not None:
        alloc["nvidia.com/gpu"] = str(allocatable)
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True}
        if cordoned
        else {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": capacity,
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    gpus: int,
    *,
    node_name: str | None = None,
    phase: str = "Running",
    selector: dict[str, str] | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "train",
                "image": "train:1",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
                "env": [{"name": "HF_TOKEN", "value": "hf_plantedsecretvalue123"}],
            }
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if selector:
        spec["nodeSelector"] = selector
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "creationTimestamp": "2025-12-01T09:00:00Z",
        },
        "spec": spec,
        "status": {"phase": phase if node_name else "Pending", "conditions": conditions or []},
    }


def event(
    reason: str, kind: str, name: str, message: str, minute: int, type_: str = "Normal"
) -> dict[str, Any]:
    return {
        "kind": "Event",
        "metadata": {"name": f"{name}.{reason}.{minute}", "namespace": "ml"},
        "type": type_,
        "reason": reason,
        "message": message,
        "involvedObject": {"kind": kind, "namespace": "ml" if kind == "Pod" else "", "name": name},
        "lastTimestamp": f"2025-12-01T09:{minute:02d}:00Z",
    }


FAILED = "0/5 nodes are available: 1 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector."


def snapshot(capacity: dict[str, Any] | None = None, pending: int = 2) -> Snapshot:
    nodes = [
        node("a100-1", A100),
        node("a100-2", A100, cordoned=True),
        node("h100-1", H100),
        node("h100-2", H100, gpus=8, allocatable=0, ready=False),  # the device plugin has not come up yet
        node("cpu-1", None, gpus=0),
    ]
    pods = [
        pod("bound-a", 4, node_name="a100-1"),
        pod("bound-h", 8, node_name="h100-1"),
        pod("done", 8, node_name="a100-2", phase="Succeeded"),
        pod("web", 0, node_name="cpu-1"),
        pod("wait-h100", 2, selector={"nvidia.com/gpu.product": H100}),
        pod(
            "wait-cond",
            1,
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "message": "0/5 nodes are available: 1 Too many pods.",
                }
            ],
        ),
        *(pod(f"extra-{i:02d}", 1, selector={"nvidia.com/gpu.product": A100}) for i in range(pending)),
    ]
    events = [
        event("FailedScheduling", "Pod", "wait-h100", "0/5 nodes are available: earlier", 1, "Warning"),
        event("FailedScheduling", "Pod", "wait-h100", FAILED, 5, "Warning"),
        event(
            "TriggeredScaleUp", "Pod", "wait-h100", "pod triggered scale-up: [{h100-pool 2->3 (max: 4)}]", 6
        ),
        event(
            "NotTriggerScaleUp",
            "Pod",
            "wait-cond",
            "pod didn't trigger scale-up: 2 max node group size reached",
            7,
        ),
        event("Launched", "NodeClaim", "gpu-x2k", "Status condition transitioned, Type: Launched", 8),
    ]
    claims = [
        {
            "kind": "NodeClaim",
            "metadata": {
                "name": "gpu-x2k",
                "labels": {"karpenter.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "p5.48xlarge"},
            },
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Launched", "status": "True"}],
            },
        },
        {
            "kind": "NodeClaim",
            "metadata": {"name": "old", "labels": {}},
            "status": {"conditions": [{"type": "Initialized", "status": "True"}]},
        },
    ]
    return Snapshot(
        objects={"Node": nodes, "Pod": pods, "NodeClaim": claims},
        events=events,
        capacity=capacity,
        observed_at=NOW,
    )


def server_for(snap: Snapshot) -> Any:
    return create_server(FixedSource(snap), SnapshotLogs(snap.logs), redactor=Redactor(), clock=lambda: NOW)


def payload(result: Any) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, TextContent)
    assert not result.is_error, block.text
    data: dict[str, Any] = json.loads(block.text)
    return data


async def test_gpus_by_model_and_per_node_state() -> None:
    async with Client(server_for(snapshot())) as client:
        answer = payload(await client.call_tool("gpu_capacity", {"budget": 6000}))
    models = {m["model"]: m for m in answer["by_model"]}
    assert set(models) == {A100, H100}
    a100, h100 = models[A100], models[H100]
    assert (a100["nodes"], a100["allocatable"], a100["allocated"], a100["idle"]) == (2, 16, 4, 12)
    assert (
        a100["schedulable_idle"] == 4 and a100["cordoned"] == 1
    )  # the cordoned node's 8 are idle but unusable
    assert (h100["allocatable"], h100["allocated"], h100["idle"]) == (8, 8, 0)
    assert h100["not_ready"] == 1 and h100["not_allocatable"] == 1
    nodes = {n["node"]: n for n in answer["nodes"]}
    assert "cpu-1" not in nodes
    assert nodes["a100-2"]["state"] == ["ready", "cordoned"]
    assert nodes["h100-2"]["state"] == ["not ready", NOT_ALLOCATABLE]
    assert nodes["a100-1"]["taints"] == ["nvidia.com/gpu:NoSchedule"]


async def test_pending_gpu_pods_say_why() -> None:
    async with Client(server_for(snapshot())) as client:
        answer = payload(await client.call_tool("gpu_capacity", {"budget": 6000}))
    pending = {p["pod"]: p for p in answer["pending"]}
    assert answer["pending_gpu_pods"] == 4 and len(pending) == 4
    h = pending["ml/wait-h100"]
    assert h["why"] == FAILED  # the newest FailedScheduling
    assert h["requests"] == {"nvidia.com/gpu": 2}
    assert h["node_selector"] == {"nvidia.com/gpu.product": H100}
    assert h["tolerations"] == ["nvidia.com/gpu:NoSchedule"]
    assert h["autoscaler"].startswith("TriggeredScaleUp: pod triggered scale-up")
    assert h["pending_seconds"] == 3600
    assert pending["ml/wait-cond"]["why"] == "0/5 nodes are available: 1 Too many pods."
    assert "hf_plantedsecretvalue123" not in json.dumps(answer)


async def test_in_flight_capacity_from_planner_nodes_and_autoscalers() -> None:
    async with Client(server_for(snapshot())) as client:
        without = payload(await client.call_tool("gpu_capacity", {}))["in_flight"]
    assert without["planner"] == "no planner is connected"
    assert without["nodes_not_ready"] == ["h100-2"]
    assert [s["reason"] for s in without["autoscaler"]] == [
        "Launched",
        "NotTriggerScaleUp",
        "TriggeredScaleUp",
    ]
    assert without["nodeclaims"] == [
        {"nodeclaim": "gpu-x2k", "nodepool": "gpu", "instance_type": "p5.48xlarge", "launched": True,
         "registered": False, "gpus": 8}
    ]  # fmt: skip
    planned = {"requested": {"h100-pool": 1}, "reason": "queue depth"}
    async with Client(server_for(snapshot(capacity=planned))) as client:
        with_planner = payload(await client.call_tool("gpu_capacity", {}))["in_flight"]
    assert with_planner["planner"] == planned
    huge = {"pools": {f"pool-{i}": {"requested": i, "why": "queue depth over target"} for i in range(200)}}
    async with Client(server_for(snapshot(capacity=huge))) as client:
        cut = payload(await client.call_tool("gpu_capacity", {}))
    assert isinstance(cut["in_flight"]["planner"], str) and "chars)" in cut["in_flight"]["planner"]
    assert cut["tokens"] <= 1500


async def test_model_filter_keeps_that_model_and_the_pods_that_could_use_it() -> None:
    async with Client(server_for(snapshot())) as client:
        answer = payload(await client.call_tool("gpu_capacity", {"model": H100, "budget": 6000}))
    assert [m["model"] for m in answer["by_model"]] == [H100]
    assert {n["node"] for n in answer["nodes"]} == {"h100-1", "h100-2"}
    assert {p["pod"] for p in answer["pending"]} == {
        "ml/wait-h100",
        "ml/wait-cond",
    }  # wait-cond names no model


async def test_pages_pending_pods_then_nodes_without_duplicates_within_budget() -> None:
    snap = snapshot(pending=30)
    seen: list[str] = []
    async with Client(server_for(snap)) as client:
        cursor = None
        for _ in range(100):
            answer = payload(
                await client.call_tool(
                    "gpu_capacity", {"budget": 900, **({"cursor": cursor} if cursor else {})}
                )
            )
            assert answer["tokens"] <= 900
            seen += [p["pod"] for p in answer["pending"]] + [n["node"] for n in answer["nodes"]]
            cursor = answer.get("next_cursor")
            if cursor is None:
                break
    assert len(seen) == len(set(seen)) == 32 + 4
    assert seen.index("a100-1") > max(i for i, s in enumerate(seen) if s.startswith("ml/"))


def test_node_states_and_summary_for_overview() -> None:
    labelled_without_gpus = node("fresh", A100, gpus=0)
    assert node_states(labelled_without_gpus) == ["ready", NOT_ALLOCATABLE]
    summary = gpu_summary(snapshot())
    assert summary["pending_gpu_pods"] == 4
    assert [(m["model"], m["idle"]) for m in summary["by_model"]] == [(A100, 12), (H100, 0)]


@pytest.mark.parametrize("budget", [300, 1500])
async def test_overview_still_carries_the_gpu_summary(budget: int) -> None:
    async with Client(server_for(snapshot())) as client:
        answer = payload(await client.call_tool("overview", {"budget": 4000}))
        small = payload(await client.call_tool("gpu_capacity", {"budget": budget}))
    assert answer["gpu"]["pending_gpu_pods"] == 4
    assert small["tokens"] <= budget
    assert len(small["by_model"]) == 2 and "truncated" not in small  # the in-flight details go first
