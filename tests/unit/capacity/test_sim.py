"""Simulator: conservation, determinism, unplaceable pods, and the cluster-autoscaler emulation's timings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from capstan.capacity import (
    POLICY_NAMES,
    AgenticSpec,
    CAConfig,
    ClusterAutoscalerPolicy,
    Controller,
    Delay,
    NodeType,
    PlannerConfig,
    Pod,
    Sim,
    Workload,
    empty_start_floor,
    inference_node_types,
    run_policies,
    summarize,
    synthetic_agentic,
)
from capstan.capacity._cluster_autoscaler import buffer_template, peak_burst_gpus
from capstan.capacity._karpenter import KarpenterConfig, KarpenterPolicy
from capstan.capacity.sim import SimPod

pytestmark = pytest.mark.unit

GPU1 = NodeType(
    "g1", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 0)
)


def gpu_pod(name: str, arrival: float, duration: float) -> Pod:
    return Pod(name, arrival, 4000, 8192, 1, 1000, duration=duration)


def events(sim_result_events: list[tuple[float, str, str, str]], kind: str) -> list[tuple[float, str]]:
    return [(t, ref) for t, k, ref, _ in sim_result_events if k == kind]


def replay_inputs(trace: str, *, openb_tasks: int) -> tuple[Workload, tuple[NodeType, ...]]:
    """A two-hour synthetic agentic trace with the inference menu, or openb default's first tasks with its node
    list (5-minute boot, 90 s GPU-ready)."""
    from pathlib import Path

    from capstan.capacity import load_trace, read_openb_nodes

    if trace == "synthetic":
        return synthetic_agentic(7, AgenticSpec(hours=2.0)), inference_node_types(
            Delay("fixed", 300), Delay("fixed", 90)
        )
    openb = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023"
    full = load_trace(str(openb / "openb_pod_list_default.csv"))
    types = read_openb_nodes(openb / "openb_node_list_all_node.csv", Delay("fixed", 300), Delay("fixed", 90))
    return Workload(full.name, full.pods[:openb_tasks]), types


def small_workload() -> Workload:
    return synthetic_agentic(3, AgenticSpec(hours=0.5))


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_conservation_every_pod_accounted_and_gpu_hours_add_up(policy: str) -> None:
    types = inference_node_types(Delay("fixed", 180), Delay("fixed", 60))
    results = run_policies(small_workload(), types, [policy], seed=1, record=True)
    result, summary = results[policy]
    assert result.check() == []
    assert summary.problems == ()
    states = {p.state for p in result.pods}
    assert states <= {"done", "bound", "pending", "promised", "unplaceable"}
    for p in result.pods:
        assert p.state in ("done", "bound") or p.reason
    total = summary.allocated_gpu_hours + summary.idle_total
    assert total == pytest.approx(summary.gpu_hours, rel=1e-9)
    assert summary.gpu_hours > 0


def test_same_seed_same_result() -> None:
    types = inference_node_types(Delay("uniform", 120, 300), Delay("fixed", 60))
    a = run_policies(small_workload(), types, ["capstan", "cluster-autoscaler"], seed=5, record=True)
    b = run_policies(small_workload(), types, ["capstan", "cluster-autoscaler"], seed=5, record=True)
    for name in a:
        assert a[name][0].events == b[name][0].events
        assert a[name][1].cost == b[name][1].cost


def test_pod_larger_than_every_node_type_is_reported_and_the_run_goes_on() -> None:
    huge = Pod("huge", 10.0, 4000, 8192, 16, 1000, duration=100)
    w = Workload("w", (gpu_pod("a", 0.0, 100), huge, gpu_pod("b", 20.0, 100)))
    for policy in ("capstan", "cluster-autoscaler", "karpenter"):
        result, summary = run_policies(w, (GPU1,), [policy])[policy]
        states = {p.pod.name: p for p in result.pods}
        assert states["huge"].state == "unplaceable"
        assert "nvidia.com/gpu 16 > 1" in states["huge"].reason
        assert states["a"].state == states["b"].state == "done"
        assert summary.unplaced == 1


def test_ca_scales_up_on_the_next_10s_scan_and_removes_after_10_min_unneeded() -> None:
    """One pod at t=5 s: scale-up at the 10 s scan, node Ready at 70 s, pod done at 170 s; the node is first
    seen unneeded at the 170 s scan and removed 10 minutes later at 770 s (delay-after-add ended at 610 s)."""
    ca = ClusterAutoscalerPolicy()
    result = Sim(Workload("w", (gpu_pod("p", 5.0, 100.0), gpu_pod("late", 2000.0, 10.0))), (GPU1,), ca).run()
    assert ca.scale_ups[0][:2] == (10.0, "g1")
    assert events(result.events, "node.ready")[0] == (70.0, "n0")
    assert events(result.events, "pod.bound")[0] == (70.0, "p")
    assert events(result.events, "node.draining")[0] == (770.0, "n0")
    pending = result.pending_stages()
    assert pending["reaction"][0] == pytest.approx(5.0)
    assert pending["boot"][0] == pytest.approx(60.0)


def test_ca_scale_down_waits_10_min_after_any_scale_up() -> None:
    """Node n0 is unneeded from 170 s; a scale-up for another pod at 600 s pushes its removal to 1200 s."""
    ca = ClusterAutoscalerPolicy()
    pods = (gpu_pod("p", 5.0, 100.0), gpu_pod("q", 595.0, 2000.0), gpu_pod("late", 5000.0, 10.0))
    big = NodeType("g1", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 60))
    result = Sim(Workload("w", pods), (big,), ca).run()
    # q arrives while n0 is empty and allocatable: the default scheduler puts it there, so no scale-up happens
    assert [s[0] for s in ca.scale_ups if s[0] < 5000] == [10.0]
    assert events(result.events, "pod.bound")[1] == (595.0, "q")

    ca2 = ClusterAutoscalerPolicy()
    two = NodeType("g2", 8000, 32768, 1, "A100", 1.0, boot_delay=Delay("fixed", 60))
    q_a100 = Pod("q", 595.0, 4000, 8192, 1, 1000, gpu_models=frozenset({"A100"}), duration=2000.0)
    result = Sim(Workload("w", (gpu_pod("p", 5.0, 100.0), q_a100)), (big, two), ca2).run()
    assert [s[0] for s in ca2.scale_ups] == [10.0, 600.0]
    drains = events(result.events, "node.draining")
    assert drains[0] == (1200.0, "n0")


def test_ca_scale_down_gives_back_the_room_a_failed_removal_tried() -> None:
    """Three 4-GPU nodes: t has one free GPU; c1 runs r1 (1 GPU) and r2 (14 cores, no GPU), c2 runs q (1 GPU,
    4 cores); both are a quarter used. c1 is tried first: r1 would take t's free GPU, but r2 fits nowhere, so
    c1 stays, and as CA reverts the snapshot of a removal that fails, t's GPU is free again when c2 is tried:
    q fits there, so c2 is unneeded. Every node's room is as it was after the scan."""
    g4 = NodeType("g4", 16000, 65536, 4, "L4", 4.0, boot_delay=Delay("fixed", 60))
    pods = {
        **{f"t{i}": Pod(f"t{i}", 9e9, 1000, 1024, 1, 1000) for i in range(3)},
        "r1": Pod("r1", 9e9, 1000, 1024, 1, 1000),
        "r2": Pod("r2", 9e9, 14000, 1024),
        "q": Pod("q", 9e9, 4000, 1024, 1, 1000),
    }
    sim = Sim(Workload("w", tuple(pods.values())), (g4,), ClusterAutoscalerPolicy())
    t, c1, c2 = (sim.launch("g4", purpose="static") for _ in range(3))
    for names, node in ((("t0", "t1", "t2"), t), (("r1", "r2"), c1), (("q",), c2)):
        for name in names:
            sim.pods[name] = sp = SimPod(pods[name])
            sim._bind(sp, node)
    room = [(n.cap.cpu, n.cap.mem, list(n.cap.devs)) for n in (t, c1, c2)]
    ca = ClusterAutoscalerPolicy()
    ca._scale_down(sim, 0.0, [])
    assert set(ca.unneeded_since) == {c2.id}
    assert [(n.cap.cpu, n.cap.mem, list(n.cap.devs)) for n in (t, c1, c2)] == room


def test_ca_scale_down_counts_the_pods_an_earlier_removal_moves_onto_a_node() -> None:
    """n and m each run one pod on a quarter of their GPUs; k has one GPU free. Removing n (tried first) moves
    a onto m, the least allocated; in CA's snapshot m then runs a and b, and with n going only one of them fits
    elsewhere (on k), so m is not unneeded. Counting only m's own pod, both were, and draining both left a pod
    waiting for a new node."""
    g4 = NodeType("g4", 16000, 65536, 4, "L4", 4.0, boot_delay=Delay("fixed", 60))
    pods = {name: Pod(name, 9e9, 1000, 1024, 1, 1000) for name in ("a", "b", "k0", "k1", "k2")}
    sim = Sim(Workload("w", tuple(pods.values())), (g4,), ClusterAutoscalerPolicy())
    n, m, k = (sim.launch("g4", purpose="static") for _ in range(3))
    for names, node in ((("a",), n), (("b",), m), (("k0", "k1", "k2"), k)):
        for name in names:
            sim.pods[name] = sp = SimPod(pods[name])
            sim._bind(sp, node)
    ca = ClusterAutoscalerPolicy()
    ca._scale_down(sim, 0.0, [])
    assert set(ca.unneeded_since) == {n.id}


def test_ca_least_waste_ignores_gpus() -> None:
    """A 1-GPU pod: least-waste (CPU and memory only) picks the 8-GPU node whose CPU/memory fit it tightest."""
    small = NodeType("gpu1-big-cpu", 64000, 262144, 1, "L4", 1.0, boot_delay=Delay("fixed", 60))
    eight = NodeType("gpu8-small-cpu", 8000, 16384, 8, "L4", 8.0, boot_delay=Delay("fixed", 60))
    ca = ClusterAutoscalerPolicy()
    Sim(Workload("w", (gpu_pod("p", 0.0, 50.0),)), (small, eight), ca).run()
    assert ca.scale_ups[0][1] == "gpu8-small-cpu"


def test_ca_does_not_duplicate_while_the_node_boots() -> None:
    pods = (gpu_pod("p", 0.0, 500.0),)
    result = Sim(Workload("w", pods), (GPU1,), ClusterAutoscalerPolicy()).run()
    assert result.launches == 1


def test_ca_counts_a_node_with_unready_gpus_as_duplicate_when_the_gpu_hack_is_off() -> None:
    slow_gpu = NodeType(
        "g", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 300)
    )
    pods = (gpu_pod("p", 0.0, 1000.0), gpu_pod("end", 3000.0, 1.0))
    on = Sim(Workload("w", pods), (slow_gpu,), ClusterAutoscalerPolicy()).run()
    off = Sim(
        Workload("w", pods), (slow_gpu,), ClusterAutoscalerPolicy(CAConfig(gpu_unready_is_upcoming=False))
    ).run()
    assert on.launches == 2  # p, then "end" much later
    assert off.launches > on.launches
    assert off.idle_gpu_hours()["duplicate"] > 0


def test_ca_buffer_launches_ahead_refills_when_used_and_keeps_the_node_it_stands_on() -> None:
    """A CapacityBuffer of one GPU: the scan at 0 s launches n0 for it (Ready at 60 s); p comes at 100 s and runs
    there at once, so the buffer has no room and the scan of that instant (100 s, on the 10 s grid) launches n1
    for it. When p ends at 1,100 s the buffer stands on n0 again (first fit in node order, as CA places the
    pods it injects), so n1 is unneeded and goes 10 minutes later, while n0 stays up with the buffer alone:
    its GPU-hours count as headroom. "late" runs on n0 the moment it comes; without the buffer it waits a
    boot."""
    pods = (gpu_pod("p", 100.0, 1000.0), gpu_pod("late", 5000.0, 10.0))
    ca = ClusterAutoscalerPolicy(CAConfig(buffer_gpus=1), name="ca-buffer")
    result = Sim(Workload("w", pods), (GPU1,), ca).run()
    assert ca.scale_ups == [(0.0, "g1", 1), (100.0, "g1", 1), (5000.0, "g1", 1)]
    bound = [(t, ref, node) for t, kind, ref, node in result.events if kind == "pod.bound"]
    assert bound == [(100.0, "p", "n0"), (5000.0, "late", "n0")]
    assert events(result.events, "node.draining") == [(1700.0, "n1")]
    n0, n1 = result.nodes[:2]
    assert n0.idle_s["headroom"] == pytest.approx(100.0 + (5000.0 - 1100.0))  # before p, and after it
    assert n0.idle_s["empty"] == 0.0
    assert n1.purpose == "headroom" and n1.idle_s["duplicate"] == 0.0
    assert result.policy == "ca-buffer"
    assert result.check() == []
    plain = Sim(Workload("w", pods), (GPU1,), ClusterAutoscalerPolicy()).run()
    late = next(sp for sp in plain.pods if sp.pod.name == "late")
    assert late.bound_at is not None and late.bound_at - 5000.0 >= 60.0


def test_ca_buffer_sizes_to_the_peak_burst_of_a_whole_gpu_template() -> None:
    pods = [
        Pod("a", 0.0, 4000, 8192, 1, 1000),
        Pod("b", 100.0, 16000, 32768, 2, 1000),
        Pod("c", 500.0, 1000, 2048, 1, 500),
        Pod("cpu", 50.0, 1000, 2048),
    ]
    assert peak_burst_gpus(pods, 200.0) == 3  # a and b within 200 s
    assert peak_burst_gpus(pods, 600.0) == 4  # 3.5 GPUs, rounded up
    assert peak_burst_gpus([], 600.0) == 0
    template = buffer_template(pods)  # the whole-GPU pods' median CPU and memory per GPU: a's and b's
    assert (template.num_gpu, template.gpu_milli, template.cpu_milli, template.memory_mib) == (
        1,
        1000,
        8000,
        16384,
    )
    assert template.gpu_models == frozenset()


def test_karpenter_batches_pods_into_one_claim() -> None:
    four = NodeType("g4", 32000, 131072, 4, "L4", 3.0, boot_delay=Delay("fixed", 60))
    pods = tuple(gpu_pod(f"p{i}", 0.2 * i, 300.0) for i in range(4))
    kp = KarpenterPolicy()
    result = Sim(Workload("w", pods), (GPU1, four), kp).run()
    assert result.launches == 1
    # the batch closes 1 s after the last pod (0.6 s): the claim is requested at 1.6 s
    assert events(result.events, "node.requested")[0][0] == pytest.approx(1.6)


def test_karpenter_replaces_an_underused_node_with_a_cheaper_one_and_cordons_it_meanwhile() -> None:
    """Four one-GPU pods fill one 4-GPU node (3/h; Ready at 61.3 s). Three end at 461.3 s; at the next
    disruption poll (470 s) p0 fits no other node, so the node is cordoned and a 1-GPU node (1/h) launched for
    it; when that is up (530 s) the old node is drained and p0 moves there. q, arriving at 500 s, takes neither
    the cordoned node (3 free GPUs) nor the replacement kept for p0: it gets a node of its own. With
    replacement off, the 4-GPU node runs until p0 ends."""
    big = NodeType("big", 32000, 131072, 4, "L4", 3.0, boot_delay=Delay("fixed", 60))
    small = NodeType("small", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 60))
    pods = (
        *(Pod(f"p{i}", 0.1 * i, 4000, 8192, 1, 1000, duration=400.0 if i else 3000.0) for i in range(4)),
        Pod("q", 500.0, 4000, 8192, 1, 1000, duration=100.0),
    )
    kp = KarpenterPolicy()
    result = Sim(Workload("w", pods), (big, small), kp).run()
    assert kp.replacements == [(470.0, "n0", "big", "small")]
    assert (470.0, "n0") in events(result.events, "node.cordoned")
    assert events(result.events, "node.requested")[1] == (470.0, "n1")
    assert events(result.events, "node.draining")[0] == (530.0, "n0")
    bound = [(t, ref, node) for t, kind, ref, node in result.events if kind == "pod.bound"]
    assert (530.0, "p0", "n1") in bound
    assert [node for _, ref, node in bound if ref == "q"] == ["n2"]
    assert result.check() == []
    kept = Sim(Workload("w", pods), (big, small), KarpenterPolicy(KarpenterConfig(replace=False))).run()
    assert events(kept.events, "node.cordoned") == []
    assert kept.cost() > result.cost()


def test_karpenter_validates_an_empty_node_before_it_deletes_it() -> None:
    """Two one-GPU pods get a node each (launched at 1 s, ready at 61 s). a ends at 161 s, so the poll at 170 s
    finds n0 empty: deleted then without a validation wait, 15 s later with one, and not at all when a pod lands
    on it meanwhile (c, arriving at 175 s); the disruption loop is held while it waits."""
    base = (gpu_pod("a", 0.0, 100.0), gpu_pod("b", 0.0, 2000.0))

    def drained(pods: tuple[Pod, ...], delay: float) -> list[tuple[float, str]]:
        kp = KarpenterPolicy(KarpenterConfig(validation_delay=delay))
        result = Sim(Workload("w", pods), (GPU1,), kp).run()
        assert result.check() == []
        return events(result.events, "node.draining")

    first = drained(base, 0.0)[0]
    assert first[0] == pytest.approx(170.0)
    validated = drained(base, 15.0)[0]
    assert validated[0] == pytest.approx(185.0) and validated[1] == first[1]
    late = drained((*base, gpu_pod("c", 175.0, 1000.0)), 15.0)
    assert first[1] not in [node for t, node in late if t < 1100.0]


@pytest.mark.parametrize("trace", ["synthetic", "openb"])
def test_karpenters_poll_cache_never_changes_a_decision(trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disruption poll skipped because the ready nodes are as they were when the last one found nothing gives
    the same replay as trying every candidate at every poll."""
    workload, types = replay_inputs(trace, openb_tasks=600)
    cached = KarpenterPolicy()
    with_cache = Sim(workload, types, cached, seed=0).run()
    assert cached.polls_skipped > 0 and cached.replacements
    monkeypatch.setattr(KarpenterPolicy, "_poll_key", staticmethod(lambda sim, ready, counts: object()))
    fresh = KarpenterPolicy()
    without = Sim(workload, types, fresh, seed=0).run()
    assert fresh.polls_skipped == 0
    assert with_cache.events == without.events


def test_capstan_holds_no_duplicate_and_binds_promised_pods_at_gpu_ready() -> None:
    pods = tuple(gpu_pod(f"p{i}", float(i), 500.0) for i in range(3))
    slow = NodeType(
        "g", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 300)
    )
    result, summary = run_policies(Workload("w", pods), (slow,), ["capstan"])["capstan"]
    assert summary.idle["duplicate"] == 0
    assert all(p.bound_at is not None and p.bound_at >= 360.0 for p in result.pods)


def test_a_run_stopped_at_a_time_leaves_the_cluster_as_it_was_then() -> None:
    """Pods arriving 0 s and 100 s apart, each running 500 s on its own 60-s node: at 300 s the first runs, the
    second runs on a second node, the third (arriving at 400 s) has not arrived, nothing has ended and nothing
    is marked as left pending; the snapshot shows the two nodes and no pending pod."""
    pods = (gpu_pod("a", 0.0, 500.0), gpu_pod("b", 100.0, 500.0), gpu_pod("c", 400.0, 500.0))
    sim = Sim(Workload("w", pods), (GPU1,), Controller(PlannerConfig(headroom=False)), seed=0)
    result = sim.run(until=300.0)
    assert result.end == 300.0
    states = {p.pod.name: p.state for p in result.pods}
    assert states["a"] == "bound" and states["b"] == "bound" and states["c"] == "pending"
    assert all(not p.reason for p in result.pods)
    assert events(result.events, "pod.done") == []
    snap = sim.snapshot()
    assert snap.now == 300.0 and not snap.pending
    assert sorted(n.pods for n in snap.nodes) == [1, 1]


def test_planner_config_reaches_capstan_and_headroom_can_be_turned_off() -> None:
    w = synthetic_agentic(3, AgenticSpec(hours=1.0))
    types = inference_node_types(Delay("fixed", 300), Delay("fixed", 90))
    held = run_policies(w, types, ["capstan"], seed=3)["capstan"][1]
    none = run_policies(w, types, ["capstan"], seed=3, planner=PlannerConfig(headroom=False))["capstan"][1]
    assert held.idle["headroom"] > 0
    assert none.idle["headroom"] == 0
    assert not none.problems


def test_every_eviction_has_a_wait_until_its_pod_runs_again() -> None:
    w = synthetic_agentic(5, AgenticSpec(hours=1.0))
    types = inference_node_types(Delay("fixed", 300), Delay("fixed", 90))
    result, summary = run_policies(w, types, ["karpenter"], seed=5)["karpenter"]
    assert result.moves > 0  # Karpenter's consolidation evicts pods on this workload
    waits = result.move_waits()
    assert len(waits) == result.moves
    assert all(x >= 0 for x in waits)
    assert 0 <= summary.move_wait[0] <= summary.move_wait[1] <= max(waits)


class _TwoNodesThen:
    """Two nodes of ``node_type`` at the start; at ``at``, ``act(sim)``."""

    name = "two-nodes-then"

    def __init__(self, node_type: str, at: float, act: Callable[[Sim], None]) -> None:
        self.node_type, self.at, self.act = node_type, at, act

    def start(self, sim: Sim) -> None:
        sim.launch(self.node_type)
        sim.launch(self.node_type)
        sim.wake(self.at, "act")

    def on_change(self, sim: Sim, now: float) -> None:
        pass

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        self.act(sim)


def _drain_both_and_launch_two(sim: Sim) -> None:
    for n in sim.allocatable_nodes():
        sim.drain(n.id)
    sim.launch("g1")
    sim.launch("g1")


def test_an_evicted_pod_not_safe_to_evict_runs_again_from_the_start() -> None:
    """Both pods run from 60 s (boot) and are evicted at 500 s; new nodes are up at 560 s. The safe pod keeps
    its end (1060 s: its run continues elsewhere); the batch task loses its 440 s and ends at 560 + 1000."""
    pods = (
        Pod("batch", 0.0, 4000, 8192, 1, 1000, duration=1000.0, safe_to_evict=False),
        gpu_pod("svc", 0.0, 1000.0),
    )
    result = Sim(Workload("w", pods), (GPU1,), _TwoNodesThen("g1", 500.0, _drain_both_and_launch_two)).run()
    assert dict((ref, t) for t, ref in events(result.events, "pod.done")) == {"svc": 1060.0, "batch": 1560.0}
    by_name = {sp.pod.name: sp for sp in result.pods}
    assert (by_name["batch"].restarts, by_name["batch"].lost_s) == (1, 440.0)
    assert (by_name["svc"].restarts, by_name["svc"].lost_s) == (0, 0.0)
    assert result.restarts() == 1
    assert result.lost_gpu_hours() == pytest.approx(440.0 / 3600)
    assert result.moves == 2 and result.check() == []
    assert summarize(result).moves_text == "2 (1 restarted)"  # what the CLI's and the bench's tables show


@pytest.mark.parametrize("policy", ["cluster-autoscaler", "karpenter", "capstan", "oracle"])
def test_no_policy_moves_a_pod_that_is_not_safe_to_evict(policy: str) -> None:
    """The synthetic trace makes every policy move pods (scale-down, consolidation, repacks); with every pod
    marked not safe to evict, none is moved and nothing restarts."""
    w = synthetic_agentic(5, AgenticSpec(hours=1.0))
    types = inference_node_types(Delay("fixed", 300), Delay("fixed", 90))
    moved = run_policies(w, types, [policy], seed=5)[policy][0]
    pinned = Workload(w.name, tuple(replace(p, safe_to_evict=False) for p in w.pods))
    result, summary = run_policies(pinned, types, [policy], seed=5)[policy]
    assert moved.moves > 0
    assert result.moves == 0 and result.restarts() == 0 and summary.restarts == 0
    assert result.check() == []


def test_slow_starts_count_the_pods_that_waited_for_new_capacity() -> None:
    """Two pods on an empty cluster: both wait a 60 s boot plus the 1 s reaction; then one fits at once."""
    pods = [gpu_pod("a", 0.0, 600.0), gpu_pod("b", 0.0, 600.0), gpu_pod("c", 700.0, 10.0)]
    summary = run_policies(Workload("w", tuple(pods)), (GPU1,), ["capstan"])["capstan"][1]
    assert summary.slow_starts == 2


def test_boot_cost_prices_each_launch_at_its_boot_and_gpu_ready_delay() -> None:
    """The oracle's two one-GPU nodes (price 1.0/h, boot 60 s, GPU-ready 30 s) would each pay 90 s more;
    a CPU node pays its boot delay only, and static nodes nothing."""
    gpu = NodeType(
        "g", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 30)
    )
    cpu = NodeType(
        "c", 8000, 32768, 0, "", 0.5, boot_delay=Delay("fixed", 120), gpu_ready_delay=Delay("fixed", 30)
    )
    pods = (gpu_pod("a", 0.0, 600.0), gpu_pod("b", 0.0, 600.0), Pod("c", 0.0, 6000, 8192, duration=600.0))
    results = run_policies(Workload("w", pods), (gpu, cpu), ["oracle", "static"])
    oracle = results["oracle"][0]
    assert oracle.launches == 3
    assert oracle.boot_cost() == pytest.approx(2 * 90 / 3600 * 1.0 + 120 / 3600 * 0.5)
    assert results["static"][0].boot_cost() == 0.0


def test_empty_start_floor_is_each_pods_wait_for_the_first_node_it_could_use() -> None:
    """Nothing can run before the first arrival (t=0) plus the quickest boot a pod's node types allow: GPU pods
    wait for boot and GPU-ready (90 s), a CPU pod for the quicker boot of the types it fits (the GPU type's 60 s),
    a pod arriving later may wait nothing, and a pod no type fits is left out."""
    gpu = NodeType(
        "g", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 30)
    )
    cpu = NodeType(
        "c", 8000, 32768, 0, "", 0.5, boot_delay=Delay("fixed", 120), gpu_ready_delay=Delay("fixed", 30)
    )
    pods = (
        gpu_pod("a", 0.0, 10.0),
        gpu_pod("b", 50.0, 10.0),
        Pod("c", 10.0, 6000, 8192, duration=10.0),
        gpu_pod("d", 1000.0, 10.0),
        Pod("huge", 5.0, 64000, 8192, duration=10.0),
    )
    w = Workload("w", pods)
    assert empty_start_floor(w, (gpu, cpu)) == 90.0
    assert empty_start_floor(w, (gpu, cpu), q=50) == 40.0
    assert empty_start_floor(w, (gpu, cpu), q=60) == 50.0
    assert empty_start_floor(Workload("none", ()), (gpu,)) == 0.0


@pytest.mark.parametrize("trace", ["synthetic", "openb", "openb-wait"])
def test_the_plan_cache_never_changes_a_plan(trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Capstan's policy keeps one PlanCache across a replay (forecast windows, phantoms, type choices, repack
    searches that found nothing); every plan it makes must be the plan a fresh cache makes from the same
    snapshot."""
    import capstan.capacity.controller as controller
    import capstan.capacity.planner as planner
    from capstan.capacity import Plan, PlanCache, Snapshot
    from capstan.capacity.planner import Scope

    workload, types = replay_inputs("synthetic" if trace == "synthetic" else "openb", openb_tasks=400)
    original = planner.plan
    checked: list[Scope] = []

    def both(snap: Snapshot, cfg: PlannerConfig, cache: PlanCache, *, scope: Scope) -> Plan:
        got = original(snap, cfg, cache, scope=scope)
        assert got == original(snap, cfg, None, scope=scope), f"{scope} plan at {snap.now}"
        checked.append(scope)
        return got

    monkeypatch.setattr(controller, "plan", both)
    # the default wait (a share of the horizon) and a fixed one: either way the forecast's windows are shorter
    # than the horizon the cache keeps
    fixed = PlannerConfig(headroom_wait_s=60.0, headroom_wait_share=0.0)
    config = fixed if trace == "openb-wait" else PlannerConfig()
    Sim(workload, types, Controller(config), seed=0, record=False).run()
    assert {"place", "review", "full"} <= set(checked)


def test_a_move_evicts_a_running_pod_and_binds_it_elsewhere_at_once_keeping_its_end() -> None:
    g2 = replace(GPU1, name="g2", gpu=2)
    moved: list[bool] = []

    def move_a_to_the_other_node(sim: Sim) -> None:
        here = sim.pods["a"].node
        there = next(n.id for n in sim.allocatable_nodes() if n.id != here)
        moved.append(sim.move("a", there))
        moved.append(sim.move("a", there))  # already there: nothing happens

    policy = _TwoNodesThen("g2", 500.0, move_a_to_the_other_node)
    result = Sim(Workload("w", (gpu_pod("a", 0.0, 1000.0),)), (g2,), policy).run()
    assert moved == [True, False]
    assert events(result.events, "pod.evicted") == [(500.0, "a")]
    assert [t for t, ref in events(result.events, "pod.bound")] == [60.0, 500.0]
    assert dict((ref, t) for t, ref in events(result.events, "pod.done")) == {"a": 1060.0}
    assert result.moves == 1 and result.move_waits() == [0.0]
    assert result.check() == []


def test_capstan_makes_room_on_openb_and_every_gpu_second_still_adds_up() -> None:
    """On openb's first 2,900 tasks two 4-GPU tasks (the 2,183rd and the 2,864th) find no allocatable node and
    get one freed by moving pods; with that turned off no pod is moved for room, and both replays pass the
    conservation checks."""
    workload, types = replay_inputs("openb", openb_tasks=2900)
    made = Controller()
    off = Controller(PlannerConfig(make_room_moves=0))
    with_room = Sim(workload, types, made, seed=0).run()
    without = Sim(workload, types, off, seed=0).run()
    assert made.room_moves > 0 and off.room_moves == 0
    assert with_room.check() == [] and without.check() == []


def test_a_pod_asking_for_any_number_of_gpus_is_unplaceable_at_once_under_every_policy() -> None:
    """A pod of a million GPUs neither sizes the CapacityBuffer (it was a million virtual pods) nor Capstan's
    headroom (a million phantoms per decision): every policy reports it unplaceable and runs the rest."""
    from capstan.capacity import POLICY_NAMES, buffer_size_and_template

    giant = Pod("giant", 10.0, 4000, 8192, 10**6, 1000, duration=100)
    w = Workload("w", (gpu_pod("a", 0.0, 100), giant, gpu_pod("b", 20.0, 100)))
    count, template = buffer_size_and_template(w.pods, (GPU1,), None)
    assert count == 2 and template.cpu_milli == 4000  # a and b, within one boot delay
    for policy, (result, summary) in run_policies(w, (GPU1,), list(POLICY_NAMES)).items():
        states = {p.pod.name: p for p in result.pods}
        assert states["giant"].state == "unplaceable", policy
        assert "nvidia.com/gpu 1000000 > 1" in states["giant"].reason, policy
        assert states["a"].state == states["b"].state == "done", policy
        assert summary.unplaced == 1, policy


def test_karpenter_nominating_only_can_lose_its_node_to_a_later_pod() -> None:
    """a arrives at 0 and b at 30; Karpenter launches a node for each (up at 61 and 91 s). Promised to their
    claims, a always runs on the first; only nominated, with the scheduler trying waiting pods in a drawn order,
    b sometimes takes it and a waits for the second node, as on a live cluster. Nothing is launched twice."""
    pods = (gpu_pod("a", 0.0, 500.0), gpu_pod("b", 30.0, 500.0))

    def first_node_goes_to(nominate_only: bool, seed: int) -> str:
        kp = KarpenterPolicy(KarpenterConfig(nominate_only=nominate_only))
        result = Sim(Workload("w", pods), (GPU1,), kp, seed=seed, queue_order="drawn").run()
        assert result.check() == [] and result.launches == 2
        return next(ref for _, kind, ref, node in result.events if kind == "pod.bound" and node == "n0")

    assert {first_node_goes_to(False, seed) for seed in range(8)} == {"a"}
    assert {first_node_goes_to(True, seed) for seed in range(8)} == {"a", "b"}
    ordered = Sim(Workload("w", pods), (GPU1,), KarpenterPolicy(KarpenterConfig(nominate_only=True))).run()
    assert [(t, ref) for t, kind, ref, node in ordered.events if kind == "pod.bound"] == [
        (61.0, "a"),
        (91.0, "b"),
    ]


def test_drawn_queue_order_is_seeded() -> None:
    """The same seed draws the same order (the same replay); the boot delays drawn do not depend on it."""
    pods = tuple(gpu_pod(f"p{i}", float(i), 300.0) for i in range(6))
    jittery = replace(GPU1, boot_delay=Delay("uniform", 60, 120))

    def run(seed: int, order: str) -> list[tuple[float, str, str, str]]:
        kp = KarpenterPolicy(KarpenterConfig(nominate_only=True))
        return Sim(Workload("w", pods), (jittery,), kp, seed=seed, queue_order=order).run().events  # type: ignore[arg-type]

    assert run(3, "drawn") == run(3, "drawn")
    ready = [(t, ref) for t, kind, ref, _ in run(3, "drawn") if kind == "node.ready"]
    assert ready == [(t, ref) for t, kind, ref, _ in run(3, "arrival") if kind == "node.ready"]


class _TwoNodes:
    """Launches two 2-GPU nodes at the start and marks the first ``PreferNoSchedule``."""

    name = "two-nodes"

    def __init__(self, shun: bool) -> None:
        self.shun = shun

    def start(self, sim: Sim) -> None:
        sim.launch("g2")
        sim.launch("g2")
        if self.shun:
            sim.prefer_not(["n0"])

    def on_change(self, sim: Sim, now: float) -> None:
        return None

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        return None


def test_scheduler_keeps_pods_off_prefer_no_schedule_nodes_while_others_have_room() -> None:
    """Two empty nodes tie on LeastAllocated and the first wins; with a PreferNoSchedule taint on it, pods go to
    the second until it is full, and only then to the first."""
    g2 = NodeType(
        "g2", 16000, 65536, 2, "L4", 2.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 0)
    )
    pods = tuple(gpu_pod(f"p{i}", 100.0 + i, 1000.0) for i in range(3))

    def placed(shun: bool) -> list[str]:
        result = Sim(Workload("w", pods), (g2,), _TwoNodes(shun)).run()
        return [node for _, kind, _, node in result.events if kind == "pod.bound"]

    assert placed(False) == ["n0", "n1", "n0"]
    assert placed(True) == ["n1", "n1", "n0"]


def test_cluster_autoscaler_soft_taints_unneeded_nodes() -> None:
    """a (2 GPUs, ends at 100 s) and b (1 GPU) get a 2-GPU node each. Once a ends, n0 is empty and unneeded;
    c (1 GPU) arrives at 300 s. Without the soft taint LeastAllocated puts c on the empty n0, which then stays;
    with it c joins b on n1 and n0 is removed once unneeded long enough."""
    g2 = NodeType(
        "g2", 16000, 65536, 2, "L4", 2.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 0)
    )
    pods = (
        Pod("a", 0.0, 4000, 8192, 2, 1000, duration=100.0),
        Pod("b", 0.0, 4000, 8192, 1, 1000, duration=3000.0),
        Pod("c", 300.0, 4000, 8192, 1, 1000, duration=3000.0),
    )

    def run(soft: bool) -> tuple[str, list[tuple[float, str]]]:
        ca = ClusterAutoscalerPolicy(CAConfig(soft_taint_unneeded=soft))
        result = Sim(Workload("w", pods), (g2,), ca).run()
        assert result.check() == []
        where = next(node for _, kind, ref, node in result.events if kind == "pod.bound" and ref == "c")
        return where, [(t, n) for t, n in events(result.events, "node.draining") if t < 3000.0]

    assert run(False) == ("n0", [])
    where, drained = run(True)
    assert where == "n1" and [n for _, n in drained] == ["n0"]


def test_karpenter_packs_with_its_providers_reserve() -> None:
    """Four pods that fill a 4-GPU node's memory exactly: one NodeClaim without a reserve; with the kwok
    provider's 10 Mi, Karpenter counts three to a node and launches two, though the first Node then runs all four
    (its whole capacity is offered to the scheduler)."""
    g4 = NodeType(
        "g4", 48000, 196608, 4, "L4", 3.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 0)
    )
    pods = tuple(Pod(f"p{i}", 0.0, 11300, 49152, 1, 1000, duration=600.0) for i in range(4))

    def run(cfg: KarpenterConfig) -> tuple[int, set[str]]:
        result = Sim(Workload("w", pods), (g4,), KarpenterPolicy(cfg)).run()
        assert result.check() == []
        return result.launches, {node for _, kind, _, node in result.events if kind == "pod.bound"}

    assert run(KarpenterConfig()) == (1, {"n0"})
    launches, nodes = run(KarpenterConfig(reserved_cpu_milli=100, reserved_memory_mib=10, nominate_only=True))
    assert launches == 2 and nodes == {"n0"}
