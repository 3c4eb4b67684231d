"""What a live replay's figures are made of (pure: a ReplayResult filled by hand, as the replay's polling fills
it): idle GPU-hours by cause, the cut at the last pod's end, drains, and what a replayed pod carries."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from capstan.capacity import Pod
from capstan.capacity.live import ReplayResult, pod_manifest, replay_pods
from capstan.kube import KubeClient, resources

pytestmark = pytest.mark.unit


def two_node_replay() -> ReplayResult:
    """Wall seconds: node a (4 GPUs) up 0-100, GPUs at 20; a 1-GPU pod on it 30-60 and a 2-GPU pod 40-80. Node b
    (8 GPUs) up 10-50, GPUs never ready. Pods end at 80, so 80 is where figures stop."""
    r = ReplayResult()
    r.node_life = {"a": [0.0, 100.0], "b": [10.0, 50.0]}
    r.node_gpus = {"a": 4, "b": 8}
    r.node_type = {"a": "l4x4", "b": "h100x8"}
    r.gpu_ready = {"a": 20.0}
    r.created = {"p": 0.0, "q": 5.0}
    r.bound = {"p": 30.0, "q": 40.0}
    r.ended = {"p": 60.0, "q": 80.0}
    r.gpus = {"p": 1, "q": 2}
    r.pod_node = {"p": "a", "q": "a"}
    return r


def test_idle_gpu_hours_split_into_booting_empty_and_unallocated() -> None:
    r = two_node_replay()
    idle = r.idle_by_cause(3600.0)  # speed 3600: one wall second is one trace hour
    # a: booting 0-20 × 4; empty 20-30 and 80-100 × 4; 30-40 three free, 40-60 one, 60-80 two. b: booting 40 × 8
    assert idle == {"booting": 20 * 4 + 40 * 8, "empty": 30 * 4, "unallocated": 10 * 3 + 20 * 1 + 20 * 2}
    total = r.gpu_hours(3600.0)
    assert total == 100 * 4 + 40 * 8
    assert sum(idle.values()) + r.allocated_gpu_hours(3600.0) == total


def test_figures_stop_at_the_last_pods_end() -> None:
    r = two_node_replay()
    end = r.last_end()
    assert end == 80.0
    assert r.gpu_hours(3600.0, until=end) == 80 * 4 + 40 * 8
    assert r.idle_by_cause(3600.0, until=end)["empty"] == 10 * 4
    assert r.cost(3600.0, {"l4x4": 1.0, "h100x8": 10.0}, until=end) == 80 * 1.0 + 40 * 10.0
    # b went away before the end; a was still up
    assert r.drains(until=end) == 1 and r.drains() == 1
    assert r.pending_s(2.0) == [(30.0 - 0.0) * 2, (40.0 - 5.0) * 2]


def test_a_pod_not_safe_to_evict_carries_both_autoscalers_annotations() -> None:
    task = Pod("t-1", 0.0, 2000, 4096, num_gpu=1, gpu_milli=1000, safe_to_evict=False)
    manifest = pod_manifest(task, "r0-t-1", "ns", pool="p", gated=False)
    assert manifest["metadata"]["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "karpenter.sh/do-not-disrupt": "true",
    }
    assert "schedulingGates" not in manifest["spec"]
    movable = pod_manifest(Pod("t-2", 0.0, 2000, 4096), "r1-t-2", "ns", pool="p", gated=True)
    assert "annotations" not in movable["metadata"] and movable["spec"]["schedulingGates"]


def test_a_suspended_job_announces_the_pods_it_will_run_at_once() -> None:
    from capstan.capacity.live import MAX_PODS_PER_JOB, SuspendedJobs, job_pods

    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}]}

    def job(name: str, **extra: object) -> dict[str, object]:
        return {"metadata": {"name": name, "namespace": "ml"}, "spec": {"template": {"spec": spec}, **extra}}

    pods = job_pods(job("train", suspend=True, parallelism=3, completions=2), 50.0)
    assert [p.name for p in pods] == ["ml/train-0", "ml/train-1"]
    assert all(p.arrival == 50.0 and p.num_gpu == 1 and p.cpu_milli == 2000 for p in pods)
    assert job_pods(job("running", suspend=False, parallelism=3), 50.0) == ()
    assert len(job_pods(job("wide", suspend=True, parallelism=10_000), 0.0)) == MAX_PODS_PER_JOB
    assert len(job_pods(job("one", suspend=True), 0.0)) == 1
    queue = SuspendedJobs(refresh_s=2.0)
    queue.follow({"ml/b": job("b", suspend=True), "ml/a": job("a", suspend=True), "ml/c": job("c")})
    announced, again = queue.announced(10.0)
    assert [p.name for p in announced] == ["ml/a-0", "ml/b-0"] and again == 12.0
    with pytest.raises(ValueError, match="refresh_s"):
        SuspendedJobs(refresh_s=0)


class _BindingClient:
    """The calls :func:`replay_pods` makes, against a cluster whose scheduler binds every pod the moment it is
    created (to node ``n1``); no node of the pool exists."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, object]] = {}

    async def create(self, resource: object, manifest: dict[str, Any]) -> None:
        manifest["spec"]["nodeName"] = "n1"
        self.pods[manifest["metadata"]["name"]] = manifest

    async def list(self, resource: object, **_: object) -> tuple[list[dict[str, object]], str]:
        return (list(self.pods.values()) if resource is resources.PODS else []), "1"

    async def delete(self, resource: object, name: str, namespace: str, **_: object) -> None:
        self.pods.pop(name, None)


def test_a_replay_creates_and_ends_pods_on_time_however_seldom_it_polls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Arrivals and ends come between polls: the replay wakes for them rather than a poll late, which at 20× and
    a 0.5 s poll shifted a pod by up to 10 trace seconds (and turned a decision on GenAI's slice)."""
    now = [1000.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(asyncio, "sleep", sleep)
    pods = [Pod(f"t{i}", arrival, 1000, 1024, duration=30.0) for i, arrival in enumerate((0.0, 10.0, 25.0))]
    client = _BindingClient()
    result = asyncio.run(
        replay_pods(
            cast(KubeClient, client), pods, "ns", speed=1.0, pool="p", gated=False, poll_s=100.0,
            clock=lambda: now[0],
        )
    )  # fmt: skip
    created = sorted(t - 1000.0 for t in result.created.values())
    assert created == [0.0, 10.0, 25.0]
    assert sorted(result.ended[n] - result.bound[n] for n in result.ended) == [30.0, 30.0, 30.0]
    assert not client.pods
