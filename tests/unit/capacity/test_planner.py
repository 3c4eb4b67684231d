"""The planner's decisions on small hand-written snapshots."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from capstan.capacity import (
    Delay,
    Forecast,
    NodeState,
    NodeType,
    NodeView,
    NoForecast,
    Plan,
    PlanCache,
    PlannerConfig,
    Pod,
    SlidingForecast,
    Snapshot,
    Taint,
    Toleration,
    headroom_window,
    plan,
)
from capstan.capacity.forecast import forecast
from capstan.capacity.planner import _plan_once

pytestmark = pytest.mark.unit

BOOT = Delay("fixed", 300)
GPU_UP = Delay("fixed", 60)
T4x4 = NodeType("t4-4", 32000, 131072, 4, "T4", 2.0, boot_delay=BOOT, gpu_ready_delay=GPU_UP)
V100x8 = NodeType("v100-8", 64000, 262144, 8, "V100", 25.0, boot_delay=BOOT, gpu_ready_delay=GPU_UP)
V100x1 = NodeType("v100-1", 8000, 32768, 1, "V100", 3.2, boot_delay=BOOT, gpu_ready_delay=GPU_UP)
CPU = NodeType("cpu-16", 16000, 65536, 0, "", 0.8, boot_delay=BOOT)
NO_HEADROOM = PlannerConfig(headroom=False, consolidate=False)


def pod(
    name: str, gpus: int = 1, milli: int = 1000, models: frozenset[str] = frozenset(), **kw: object
) -> Pod:
    return Pod(
        name=name,
        arrival=float(kw.pop("arrival", 0.0)),  # type: ignore[arg-type]
        cpu_milli=int(kw.pop("cpu", 4000)),  # type: ignore[call-overload]
        memory_mib=int(kw.pop("mem", 8192)),  # type: ignore[call-overload]
        num_gpu=gpus,
        gpu_milli=milli if gpus else 0,
        gpu_models=models,
        **kw,  # type: ignore[arg-type]
    )


def node(
    nid: str,
    nt: NodeType,
    state: NodeState = NodeState.GPU_ALLOCATABLE,
    devs: tuple[int, ...] | None = None,
    bound: tuple[Pod, ...] = (),
    cpu: int | None = None,
    mem: int | None = None,
) -> NodeView:
    d = devs if devs is not None else (1000,) * nt.gpu
    return NodeView(
        nid,
        nt.name,
        state,
        cpu if cpu is not None else nt.cpu_milli - sum(p.cpu_milli for p in bound),
        mem if mem is not None else nt.memory_mib - sum(p.memory_mib for p in bound),
        d,
        len(bound),
        0.0,
        bound=bound,
    )


def test_share_goes_to_the_partly_used_device_not_a_fresh_node() -> None:
    """Fragmentation: a 300m share fills the hole on the node with a 700m share rather than opening a GPU."""
    used = pod("old", milli=700)
    snap = Snapshot(
        now=0.0,
        node_types=(T4x4,),
        nodes=(node("a", T4x4, bound=()), node("b", T4x4, devs=(300, 1000, 1000, 1000), bound=(used,))),
        pending=(pod("new", milli=300),),
    )
    p = plan(snap, NO_HEADROOM)
    assert [(n.pod, n.node) for n in p.nominations] == [("new", "b")]
    assert not p.launches


def test_whole_gpu_pod_avoids_breaking_into_shared_devices() -> None:
    """Best fit per device: a whole-GPU pod takes a free device; the partly used one stays for shares."""
    snap = Snapshot(
        now=0.0,
        node_types=(T4x4,),
        nodes=(node("b", T4x4, devs=(500, 1000, 1000, 1000), bound=(pod("s", milli=500),)),),
        pending=(pod("whole"), pod("share", milli=500)),
    )
    p = plan(snap, NO_HEADROOM)
    assert {n.pod for n in p.nominations} == {"whole", "share"}
    assert not p.launches


def test_gpu_model_constraint_picks_a_matching_type() -> None:
    snap = Snapshot(
        now=0.0, node_types=(T4x4, V100x1), nodes=(), pending=(pod("v", models=frozenset({"V100"})),)
    )
    p = plan(snap, NO_HEADROOM)
    assert [(launch.type, launch.pods) for launch in p.launches] == [("v100-1", ("v",))]


def test_cheapest_value_per_dollar_type_and_packing_of_the_queue() -> None:
    """Four 1-GPU pods fit one 4×T4 node; the planner launches one node for all four, not four nodes."""
    pending = tuple(pod(f"p{i}") for i in range(4))
    p = plan(Snapshot(now=0.0, node_types=(T4x4, V100x8), nodes=(), pending=pending), NO_HEADROOM)
    assert len(p.launches) == 1
    assert p.launches[0].type == "t4-4"
    assert sorted(p.launches[0].pods) == ["p0", "p1", "p2", "p3"]
    assert "nodeAffinity" in p.launches[0].k8s


def test_gang_is_provisioned_atomically() -> None:
    """A 2 × 8-GPU gang gets two nodes in one plan; a gang whose members cannot all be provisioned gets none."""
    gang = tuple(pod(f"g{i}", gpus=8, gang="job", gang_size=2) for i in range(2))
    p = plan(Snapshot(now=0.0, node_types=(V100x8,), nodes=(), pending=gang), NO_HEADROOM)
    assert sorted(x for launch in p.launches for x in launch.pods) == ["g0", "g1"]
    assert len(p.launches) == 2

    capped = NodeType("v100-8", 64000, 262144, 8, "V100", 25.0, boot_delay=BOOT, max_count=1)
    p = plan(Snapshot(now=0.0, node_types=(capped,), nodes=(), pending=gang), NO_HEADROOM)
    assert not p.launches
    assert sorted(p.waiting) == ["g0", "g1"]


def test_incomplete_gang_waits_without_provisioning() -> None:
    gang = (pod("g0", gpus=8, gang="job", gang_size=2),)
    p = plan(Snapshot(now=0.0, node_types=(V100x8,), nodes=(), pending=gang), NO_HEADROOM)
    assert not p.launches
    assert p.waiting == ("g0",)


def test_no_duplicate_node_for_a_pod_promised_to_a_booting_node() -> None:
    booting = node("n7", T4x4, state=NodeState.BOOTING, devs=(0, 1000, 1000, 1000), cpu=28000, mem=122880)
    snap = Snapshot(
        now=100.0,
        node_types=(T4x4,),
        nodes=(booting,),
        pending=(pod("promised"), pod("fresh")),
        promised=(("promised", "n7"),),
    )
    p = plan(snap, NO_HEADROOM)
    assert not p.launches
    # the new pod uses the booting node's spare capacity instead of a new node
    assert [(n.pod, n.node) for n in p.nominations] == [("fresh", "n7")]
    assert "until the node's GPUs are allocatable" in p.nominations[0].k8s


def test_promise_to_a_vanished_node_is_replanned() -> None:
    snap = Snapshot(
        now=0.0, node_types=(T4x4,), nodes=(), pending=(pod("x"),), promised=(("x", "gone-node"),)
    )
    p = plan(snap, NO_HEADROOM)
    assert [launch.pods for launch in p.launches] == [("x",)]


def test_empty_node_is_drained_when_the_forecast_needs_nothing() -> None:
    snap = Snapshot(now=5000.0, node_types=(T4x4,), nodes=(node("idle", T4x4),), pending=())
    p = plan(snap, PlannerConfig())
    assert [d.node for d in p.drains] == ["idle"]
    assert not p.headroom


def test_empty_node_is_held_when_the_forecast_expects_demand_within_its_boot_delay() -> None:
    recent = tuple(pod(f"r{i}", arrival=4900.0 + i) for i in range(2))
    snap = Snapshot(now=5000.0, node_types=(T4x4,), nodes=(node("idle", T4x4),), pending=(), recent=recent)
    p = plan(snap, PlannerConfig())
    assert p.headroom == ("idle",)
    assert not p.drains
    assert not p.launches


def test_headroom_launch_is_sized_from_the_forecast_not_a_constant() -> None:
    """No capacity, a burst of 6 one-GPU arrivals in the last window: two 4-GPU nodes of headroom."""
    burst = tuple(pod(f"b{i}", arrival=4800.0 + i) for i in range(6))
    snap = Snapshot(now=5000.0, node_types=(T4x4,), nodes=(), pending=(), recent=burst)
    p = plan(snap, PlannerConfig(consolidate=False))
    assert [launch.purpose for launch in p.launches] == ["headroom", "headroom"]
    quiet = Snapshot(now=5000.0, node_types=(T4x4,), nodes=(), pending=(), recent=burst[:1])
    assert len(plan(quiet, PlannerConfig(consolidate=False)).launches) == 1
    old = Snapshot(now=50_000.0, node_types=(T4x4,), nodes=(), pending=(), recent=burst)
    assert not plan(old, PlannerConfig(consolidate=False)).launches


def test_a_pod_that_must_wait_takes_the_in_flight_node_up_first_when_waits_are_allowed() -> None:
    """Two booting 4-GPU nodes with room: ``late`` (up at 900 s) has one free GPU, so placing there strands
    nothing; ``soon`` (up at 400 s) has four. With no wait allowed fragmentation decides (``late``); with a
    headroom wait, fixed or the default share of the boot, the pod takes ``soon``, which bounds its wait."""
    late = replace(
        node("late", T4x4, state=NodeState.BOOTING, devs=(0, 0, 0, 1000), cpu=20000, mem=65536),
        available_at=900.0,
    )
    soon = replace(node("soon", T4x4, state=NodeState.BOOTING), available_at=400.0)
    snap = Snapshot(now=100.0, node_types=(T4x4,), nodes=(late, soon), pending=(pod("p"),))
    no_wait = replace(NO_HEADROOM, headroom_wait_share=0.0)
    assert [(n.pod, n.node) for n in plan(snap, no_wait).nominations] == [("p", "late")]
    waits = replace(no_wait, headroom_wait_s=60.0)
    assert [(n.pod, n.node) for n in plan(snap, waits).nominations] == [("p", "soon")]
    assert [(n.pod, n.node) for n in plan(snap, NO_HEADROOM).nominations] == [("p", "soon")]


def test_a_headroom_wait_shortens_the_window_headroom_covers() -> None:
    """Arrivals 100 s apart; horizon 360 s (boot 300 + GPU-ready 60). With no wait the busiest window holds four
    one-GPU pods (four one-GPU nodes of headroom); with a 120 s wait the windows are 240 s long and hold three;
    with the default wait, a fifth of the horizon (72 s), 288 s long, and also three."""
    burst = tuple(pod(f"b{i}", arrival=4000.0 + 100.0 * i) for i in range(4))
    snap = Snapshot(now=4400.0, node_types=(V100x1,), nodes=(), pending=(), recent=burst)
    cfg = PlannerConfig(consolidate=False, headroom_wait_share=0.0)
    assert headroom_window(cfg, 360.0) == 360.0
    assert headroom_window(replace(cfg, headroom_wait_s=120.0), 360.0) == 240.0
    assert headroom_window(replace(cfg, headroom_wait_s=1000.0), 360.0) == 1.0
    default = PlannerConfig(consolidate=False)
    assert headroom_window(default, 360.0) == 288.0
    assert headroom_window(replace(default, headroom_wait_s=120.0), 360.0) == 240.0  # the larger wait
    assert headroom_window(replace(default, headroom_wait_share=0.5), 360.0) == 180.0
    assert [launch.purpose for launch in plan(snap, cfg).launches] == ["headroom"] * 4
    assert [launch.purpose for launch in plan(snap, replace(cfg, headroom_wait_s=120.0)).launches] == [
        "headroom"
    ] * 3
    assert [launch.purpose for launch in plan(snap, default).launches] == ["headroom"] * 3


def test_headroom_for_a_big_pod_is_held_as_single_gpus() -> None:
    """A 6-GPU pod in the forecast is held as six one-GPU phantoms: the three free GPUs of a busy node and one
    4-GPU node, not a whole 8-GPU machine kept idle for one rare pod."""
    big = pod("big", gpus=6, cpu=24000, mem=49152, arrival=4800.0)
    busy = node("busy", T4x4, devs=(0, 1000, 1000, 1000), bound=(pod("r", arrival=0.0),))
    snap = Snapshot(now=5000.0, node_types=(T4x4, V100x8), nodes=(busy,), pending=(), recent=(big,))
    split = plan(snap, PlannerConfig(consolidate=False))
    assert [(launch.type, launch.purpose) for launch in split.launches] == [("t4-4", "headroom")]
    whole = plan(snap, PlannerConfig(consolidate=False, headroom_split_gpus=0))
    assert [(launch.type, launch.purpose) for launch in whole.launches] == [("v100-8", "headroom")]


def test_headroom_for_a_pinned_pod_launches_or_keeps_no_node_far_larger_than_it() -> None:
    """A one-GPU pod pinned to V100 in the forecast. The only V100 type is an 8-GPU machine: with the default
    limit (twice the pod's GPUs) no node is launched for it, with no limit the 8-GPU machine is; a one-GPU V100
    type is launched under the limit. An idle 8-GPU V100 node already up is not kept for it (drained) unless
    there is no limit, while a free V100 GPU on a node in use is held for it."""
    pinned = pod("pinned", models=frozenset({"V100"}), arrival=4800.0)
    only_big = Snapshot(now=5000.0, node_types=(T4x4, V100x8), nodes=(), pending=(), recent=(pinned,))
    cfg = PlannerConfig(consolidate=False)
    unlimited = replace(cfg, pinned_headroom_node_ratio=float("inf"))
    assert not plan(only_big, cfg).launches
    assert [(launch.type, launch.purpose) for launch in plan(only_big, unlimited).launches] == [
        ("v100-8", "headroom")
    ]
    with_small = replace(only_big, node_types=(T4x4, V100x8, V100x1))
    assert [(launch.type, launch.purpose) for launch in plan(with_small, cfg).launches] == [
        ("v100-1", "headroom")
    ]
    assert not plan(with_small, replace(cfg, pinned_headroom_node_ratio=0.0)).launches
    up = replace(node("up", V100x8), idle_since=0.0)
    kept = plan(replace(only_big, nodes=(up,)), unlimited)
    assert (kept.launches, kept.headroom, kept.drains) == ((), ("up",), ())
    assert [d.node for d in plan(replace(only_big, nodes=(up,)), cfg).drains] == ["up"]
    busy = node("busy", V100x8, devs=(0,) * 7 + (1000,), bound=(pod("r", arrival=0.0),))
    assert not plan(replace(with_small, nodes=(busy,)), cfg).launches
    # a pod any model may serve still gets a node launched for its headroom
    free = replace(only_big, recent=(replace(pinned, gpu_models=frozenset()),))
    assert [(launch.type, launch.purpose) for launch in plan(free, cfg).launches] == [("t4-4", "headroom")]


def test_a_node_over_the_pinned_limit_is_allowed_when_it_costs_no_more_than_one_within_it() -> None:
    """A one-GPU T4-pinned pod in the forecast, limit twice its GPUs. When the 4-GPU T4 type costs less than the
    2-GPU one, the 4-GPU node is launched (and kept when idle); when it costs more, the 2-GPU one is."""
    pinned = pod("pinned", models=frozenset({"T4"}), arrival=4800.0)
    dear_small = NodeType("t4-2", 52000, 262144, 2, "T4", 2.5, boot_delay=BOOT, gpu_ready_delay=GPU_UP)
    snap = Snapshot(now=5000.0, node_types=(dear_small, T4x4), nodes=(), pending=(), recent=(pinned,))
    cfg = PlannerConfig(consolidate=False)
    assert [(launch.type, launch.purpose) for launch in plan(snap, cfg).launches] == [("t4-4", "headroom")]
    up = replace(node("up", T4x4), idle_since=0.0)
    kept = plan(replace(snap, nodes=(up,)), cfg)
    assert (kept.launches, kept.headroom, kept.drains) == ((), ("up",), ())
    cheap_small = replace(dear_small, price_per_hour=1.5)
    snap = replace(snap, node_types=(cheap_small, T4x4))
    assert [(launch.type, launch.purpose) for launch in plan(snap, cfg).launches] == [("t4-2", "headroom")]
    assert [d.node for d in plan(replace(snap, nodes=(up,)), cfg).drains] == ["up"]


def test_pinned_phantoms_are_placed_before_those_any_model_may_serve() -> None:
    """Two forecast pods: ``any`` (first in queue order: more CPU) and ``pinned`` to V100. A busy V100 node has
    one free GPU. Placed most constrained first, ``pinned`` holds that GPU and a T4 node is launched for
    ``any``; in queue order ``any`` would take it and ``pinned`` would find no room and no node small enough."""
    anyone = pod("any", cpu=6000, arrival=4800.0)
    pinned = pod("pinned", models=frozenset({"V100"}), arrival=4801.0)
    busy = node("busy", V100x8, devs=(0,) * 7 + (1000,), bound=(pod("r", arrival=0.0),))
    snap = Snapshot(now=5000.0, node_types=(T4x4, V100x8), nodes=(busy,), pending=(), recent=(anyone, pinned))
    p = plan(snap, PlannerConfig(consolidate=False))
    assert [(launch.type, launch.purpose) for launch in p.launches] == [("t4-4", "headroom")]


def test_split_phantoms_see_busy_nodes_whose_free_cpu_only_a_split_one_fits() -> None:
    """The scans skip bins with less free CPU than the smallest request of the decision; that request must be
    a split phantom's (4 cores here), not the big forecast pod's (24), or the busy node's 8 free cores and 3
    free GPUs are never offered and a second node is launched."""
    big = pod("big", gpus=6, cpu=24000, mem=49152, arrival=4800.0)
    busy = node("busy", T4x4, devs=(0, 1000, 1000, 1000), bound=(pod("r", cpu=24000, arrival=0.0),))
    snap = Snapshot(now=5000.0, node_types=(T4x4, V100x8), nodes=(busy,), pending=(), recent=(big,))
    p = plan(snap, PlannerConfig(consolidate=False))
    assert [(launch.type, launch.purpose) for launch in p.launches] == [("t4-4", "headroom")]


def test_split_phantoms_are_whole_devices_with_a_share_of_cpu_and_memory() -> None:
    from capstan.capacity._cache import _headroom_pods

    big = pod("big", gpus=6, milli=500, cpu=24000, mem=49152, models=frozenset({"V100"}))
    parts = _headroom_pods((big, pod("small", gpus=2)), PlannerConfig())
    assert [p.name for p in parts] == [f"big#{i}" for i in range(6)] + ["small"]
    assert all(
        (p.num_gpu, p.gpu_milli, p.cpu_milli, p.memory_mib, p.gpu_models)
        == (1, 1000, 4000, 8192, frozenset({"V100"}))
        for p in parts[:6]
    )
    assert not any(p.is_fractional for p in parts)
    assert _headroom_pods((big,), PlannerConfig(headroom_split_gpus=0)) == [big]


def test_taints_and_selectors_steer_type_choice() -> None:
    tainted = NodeType("t4-4-tainted", 32000, 131072, 4, "T4", 1.0, taints=(Taint("dedicated", "ml"),))
    p = plan(Snapshot(now=0.0, node_types=(tainted, T4x4), nodes=(), pending=(pod("x"),)), NO_HEADROOM)
    assert p.launches[0].type == "t4-4"
    tol = pod("y", tolerations=(Toleration("dedicated", "Equal", "ml"),))
    p = plan(Snapshot(now=0.0, node_types=(tainted, T4x4), nodes=(), pending=(tol,)), NO_HEADROOM)
    assert p.launches[0].type == "t4-4-tainted"
    sel = pod("z", node_selector=(("node.kubernetes.io/instance-type", "v100-8"),))
    p = plan(Snapshot(now=0.0, node_types=(T4x4, V100x8), nodes=(), pending=(sel,)), NO_HEADROOM)
    assert p.launches[0].type == "v100-8"


def test_pod_larger_than_every_type_is_unplaceable_with_reason() -> None:
    big = pod("huge", gpus=16)
    p = plan(Snapshot(now=0.0, node_types=(T4x4, CPU), nodes=(), pending=(big, pod("ok"))), NO_HEADROOM)
    assert [u[0] for u in p.unplaceable] == ["huge"]
    assert "nvidia.com/gpu 16 > 4" in p.unplaceable[0][1]
    assert [launch.pods for launch in p.launches] == [("ok",)]


def a_full_node_and_b_with(b_pod: Pod) -> tuple[NodeView, NodeView]:
    """``a``: 3.5 of 4 T4s used by four pods; ``b``: only ``b_pod`` (a 0.3 share), 3.7 free."""
    return (
        node("a", T4x4, devs=(500, 0, 0, 0), bound=(pod("a1", milli=500), pod("a2"), pod("a3"), pod("a4"))),
        node("b", T4x4, devs=(700, 1000, 1000, 1000), bound=(b_pod,)),
    )


def test_repack_empties_a_lightly_used_node_whose_long_running_pods_fit_elsewhere() -> None:
    nodes = a_full_node_and_b_with(pod("b1", milli=300))
    snap = Snapshot(now=3600.0, node_types=(T4x4,), nodes=nodes, pending=())
    p = plan(snap, PlannerConfig(headroom=False))
    assert [d.node for d in p.drains] == ["b"]
    assert "repack" in p.drains[0].reason
    assert [(m.pod, m.node) for m in p.moves] == [("b1", "a")]
    # a review (no repacks) and a young pod both leave it alone
    assert not plan(snap, PlannerConfig(headroom=False), scope="review").drains
    young = Snapshot(now=600.0, node_types=(T4x4,), nodes=nodes, pending=())
    assert not plan(young, PlannerConfig(headroom=False)).drains


def test_repack_leaves_a_node_alone_while_a_pod_not_safe_to_evict_runs_there() -> None:
    """The repack above, but ``b1`` is a batch task whose eviction would lose its work: ``b`` is not emptied.
    ``a``'s pods (3.5 GPUs) fit in ``b``'s free 3.7, so ``a`` is emptied onto ``b`` instead; with one more pod
    on ``b`` nothing can move."""
    b_pod = pod("b1", milli=300, safe_to_evict=False)
    nodes = a_full_node_and_b_with(b_pod)
    snap = Snapshot(now=3600.0, node_types=(T4x4,), nodes=nodes, pending=())
    p = plan(snap, PlannerConfig(headroom=False))
    assert [d.node for d in p.drains] == ["a"]
    assert sorted(m.pod for m in p.moves) == ["a1", "a2", "a3", "a4"]
    full_b = (nodes[0], node("b", T4x4, devs=(700, 0, 1000, 1000), bound=(b_pod, pod("b2"))))
    stuck = Snapshot(now=3600.0, node_types=(T4x4,), nodes=full_b, pending=())
    p = plan(stuck, PlannerConfig(headroom=False))
    assert not p.drains and not p.moves


P100x2 = NodeType("p100-2", 16000, 122880, 2, "P100", 3.9, boot_delay=BOOT, gpu_ready_delay=GPU_UP)
T4x2BIG = NodeType("t4-2-104c", 104000, 524288, 2, "T4", 6.1, boot_delay=BOOT, gpu_ready_delay=GPU_UP)


def test_repack_replaces_two_half_used_nodes_by_one_cheaper_node_then_moves_when_it_is_up() -> None:
    """Two 12-CPU one-GPU pods alone on 16-CPU two-GPU nodes strand a GPU each; one 104-CPU node holds both."""
    types = (P100x2, T4x2BIG)
    bound_a, bound_b = pod("x", cpu=12000, mem=16384), pod("y", cpu=12000, mem=16384)
    nodes = (
        node("a", P100x2, devs=(0, 1000), bound=(bound_a,)),
        node("b", P100x2, devs=(0, 1000), bound=(bound_b,)),
    )
    p = plan(
        Snapshot(now=7200.0, node_types=types, nodes=nodes, pending=(), next_id=10),
        PlannerConfig(headroom=False),
    )
    assert [(launch.type, launch.purpose) for launch in p.launches] == [("t4-2-104c", "repack")]
    assert not p.drains  # nothing moves before the new node can take the pods
    up = NodeView(
        "n10",
        "t4-2-104c",
        NodeState.GPU_ALLOCATABLE,
        104000,
        524288,
        (1000, 1000),
        0,
        0.0,
        idle_since=7600.0,
        purpose="repack",
    )
    later = Snapshot(now=7700.0, node_types=types, nodes=(*nodes, up), pending=())
    assert not plan(
        later, PlannerConfig(headroom=False), scope="review"
    ).drains  # a review keeps it for the repack
    q = plan(later, PlannerConfig(headroom=False))
    assert sorted(d.node for d in q.drains) == ["a", "b"]
    assert sorted((m.pod, m.node) for m in q.moves) == [("x", "n10"), ("y", "n10")]


P100x2W = NodeType("p100-2w", 64000, 262144, 2, "P100", 5.98, boot_delay=BOOT, gpu_ready_delay=GPU_UP)
T4x4W = NodeType("t4-4w", 96000, 393216, 4, "T4", 5.99, boot_delay=BOOT, gpu_ready_delay=GPU_UP)
V100x2W = NodeType("v100-2w", 64000, 262144, 2, "V100", 7.5, boot_delay=BOOT, gpu_ready_delay=GPU_UP)


def test_a_full_node_of_dear_gpus_is_repacked_onto_cheaper_free_room() -> None:
    """``dear`` has no free GPU, but its two GPUs cost 3.75 an hour each against the T4 node's 1.50: its pods
    move into the two GPUs ``cheap`` has free, and it is drained. A T4 node as full is left alone."""
    types = (P100x2W, T4x4W, V100x2W)
    dear = node("dear", V100x2W, devs=(0, 0), bound=(pod("d1"), pod("d2")))
    cheap = node("cheap", T4x4W, devs=(0, 0, 1000, 1000), bound=(pod("c1"), pod("c2")))
    snap = Snapshot(now=7200.0, node_types=types, nodes=(dear, cheap), pending=())
    p = plan(snap, PlannerConfig(headroom=False))
    assert [d.node for d in p.drains] == ["dear"]
    assert sorted((m.pod, m.node) for m in p.moves) == [("d1", "cheap"), ("d2", "cheap")]
    # a full node of the cheapest GPUs is no candidate, though its pods would fit the idle GPUs of a node whose
    # only pod is too young to move
    full = node("full", T4x4W, devs=(0, 0, 0, 0), bound=tuple(pod(f"f{i}") for i in range(4)))
    idle = node("idle", T4x4W, bound=(pod("young", gpus=0, arrival=7000.0),))
    q = plan(replace(snap, nodes=(full, idle)), PlannerConfig(headroom=False))
    assert not q.drains and not q.moves


def test_a_repack_node_type_follows_the_arrival_mix() -> None:
    """The pods of a full dear node move to one new node. For them alone the 2-GPU P100 node is a cent an hour
    cheaper than the 4-GPU T4 one; with one-GPU pods arriving, the repack takes the T4 node they will fill."""
    types = (P100x2W, T4x4W, V100x2W)
    dear = node("dear", V100x2W, devs=(0, 0), bound=(pod("x"), pod("y")))
    quiet = Snapshot(now=7200.0, node_types=types, nodes=(dear,), pending=(), next_id=10)
    got = plan(quiet, PlannerConfig(headroom=False)).launches
    assert [(launch.type, launch.purpose) for launch in got] == [("p100-2w", "repack")]
    busy = replace(quiet, recent=tuple(pod(f"r{i}", arrival=7000.0 + i) for i in range(6)))
    got = plan(busy, PlannerConfig(headroom=False)).launches
    assert [(launch.type, launch.purpose) for launch in got] == [("t4-4w", "repack")]


def headroom_on_a_repack_candidate(*, third: bool) -> Snapshot:
    """``a`` and ``b`` each run two long-running one-GPU pods on a 4-GPU T4 node (2 GPUs free, so both are
    repack candidates); ``a``'s pods are small, ``b``'s need 30 cores each. Two one-GPU pods arrived in the last
    window, so headroom holds two GPUs, and placed first it takes ``a``'s (``a`` has the most free CPU). With
    ``third``, node ``c`` has 3 GPUs free beside one young pod, but only 36 cores: one of ``b``'s pods."""
    small = tuple(pod(f"a{i}", cpu=4000) for i in range(2))
    big = tuple(pod(f"b{i}", cpu=30000) for i in range(2))
    nodes = [
        node("a", T4x4W, devs=(0, 0, 1000, 1000), bound=small),
        node("b", T4x4W, devs=(0, 0, 1000, 1000), bound=big),
    ]
    if third:
        nodes.append(
            node("c", T4x4W, devs=(0, 1000, 1000, 1000), bound=(pod("young", cpu=60000, arrival=7000.0),))
        )
    recent = tuple(pod(f"r{i}", cpu=4000, arrival=7100.0 + i) for i in range(2))
    return Snapshot(
        now=7200.0, node_types=(T4x4W,), nodes=tuple(nodes), pending=(), recent=recent, next_id=10
    )


def test_a_repack_headroom_blocks_is_found_by_planning_again_with_the_repack_first() -> None:
    """Headroom first, ``a`` holds the headroom and is passed over, and ``b``'s big pods have nowhere to go: no
    repack. With the repack first, ``a``'s pods move onto ``b`` or ``c`` and ``a`` is drained, and the headroom
    still fits on what is left: that plan costs 5.99 an hour less, so it is kept."""
    snap = headroom_on_a_repack_candidate(third=True)
    one = plan(snap, PlannerConfig(repack_both_orders=False))
    assert not one.drains and not one.launches
    both = plan(snap, PlannerConfig())
    assert [d.node for d in both.drains] == ["a"]
    assert sorted(m.pod for m in both.moves) == ["a0", "a1"]
    assert {m.node for m in both.moves} <= {"b", "c"}
    assert not both.launches  # the headroom found room on b or c


def test_with_the_repack_first_headroom_does_not_count_on_a_node_being_drained() -> None:
    """Without ``c``, draining ``a`` leaves no free GPU but ``a``'s own: the repack-first plan must launch a node
    for the headroom rather than hold it on ``a``. It then saves nothing net, so the plan made headroom first
    (which keeps ``a`` and holds the headroom there) is the one kept."""
    snap = headroom_on_a_repack_candidate(third=False)
    cfg = PlannerConfig()
    first, _ = _plan_once(snap, cfg, PlanCache(snap.node_types), "full", repack_first=True)
    assert [d.node for d in first.drains] == ["a"]
    assert [(launch.type, launch.purpose) for launch in first.launches] == [("t4-4w", "headroom")]
    kept = plan(snap, cfg)
    assert not kept.drains and not kept.launches


def test_the_cache_counts_the_plans_made_a_second_time_with_the_repack_first() -> None:
    """``PlanCache.replans`` counts the full plans made again with the repack search first: one when headroom
    held room on a repack candidate, none with ``repack_both_orders`` off, none for a plan that is not full."""
    snap = headroom_on_a_repack_candidate(third=True)
    counted = PlanCache(snap.node_types)
    plan(snap, PlannerConfig(), counted)
    assert counted.replans == 1
    plan(snap, PlannerConfig(repack_both_orders=False), counted)
    plan(snap, PlannerConfig(), counted, scope="review")
    assert counted.replans == 1


def test_new_node_type_follows_the_arrival_mix_not_only_the_queue() -> None:
    """Alone, a 12-CPU pod is cheapest on a 16-CPU node; when such pods keep arriving, the 104-CPU node that two
    of them fill is cheaper per pod."""
    types = (P100x2, T4x2BIG)
    lone = pod("new", cpu=12000, mem=16384, arrival=1000.0)
    quiet = Snapshot(now=1000.0, node_types=types, nodes=(), pending=(lone,), recent=(lone,))
    assert [launch.type for launch in plan(quiet, NO_HEADROOM).launches] == ["p100-2"]
    seen = tuple(pod(f"r{i}", cpu=12000, mem=16384, arrival=100.0 * i) for i in range(6))
    busy = Snapshot(now=1000.0, node_types=types, nodes=(), pending=(lone,), recent=(*seen, lone))
    assert [launch.type for launch in plan(busy, NO_HEADROOM).launches] == ["t4-2-104c"]


def test_forecast_window_slides_with_arrivals_and_says_when_it_changes() -> None:
    """Headroom covers the busiest window of one boot delay (360 s here) in the look-back, wherever it starts."""
    cfg = PlannerConfig(forecast_windows=10, forecast_quantile=1.0, forecast_days=0)
    burst = tuple(pod(f"b{i}", milli=1000, arrival=3500.0 + 20 * i) for i in range(4))  # spans t=3600
    calm = (pod("c", arrival=1000.0),)
    snap = Snapshot(now=4000.0, node_types=(T4x4,), nodes=(), pending=(), recent=(*calm, *burst))
    fc = forecast(snap, cfg, 360.0)
    assert [p.name for p in fc.pods] == ["b0", "b1", "b2", "b3"]
    assert fc.changes_at == 1000.0 + 3600.0  # when the oldest arrival leaves the look-back
    lower = forecast(snap, PlannerConfig(forecast_windows=10, forecast_quantile=0.8, forecast_days=0), 360.0)
    assert len(lower.pods) < 4  # rank 2 of the windows by GPU demand


def test_batch_headroom_follows_the_time_of_day() -> None:
    """Bursts at 02:00 every day: at 01:30 the daily bands hold the burst, at noon they do not (the ten-hour
    look-back still would: today's burst is in it), and the forecast says when the next band takes in an
    arrival."""
    day = 86400.0

    def burst(d: int) -> tuple[Pod, ...]:
        return tuple(pod(f"d{d}-{i}", arrival=d * day + 2 * 3600.0 + i) for i in range(6))

    past = (*burst(0), *burst(1), *burst(2))
    lone = pod("lone", arrival=3 * day + 11 * 3600.0)
    by_day = PlannerConfig()
    night = Snapshot(now=2 * day + 1.5 * 3600.0, node_types=(T4x4,), nodes=(), pending=(), recent=past[:12])
    assert len(forecast(night, by_day, 390.0).pods) == 6
    recent = (*past, *burst(3), lone)
    noon = Snapshot(now=3 * day + 12 * 3600.0, node_types=(T4x4,), nodes=(), pending=(), recent=recent)
    fc = forecast(noon, by_day, 390.0)
    assert [p.name for p in fc.pods] == ["lone"]
    # the lone pod leaves the two recent hours at 13:00; no band reaches 02:00 before then
    assert fc.changes_at == lone.arrival + by_day.forecast_recent_s
    assert len(forecast(noon, PlannerConfig(forecast_days=0), 390.0).pods) == 6
    # at 00:50 the bands (from 00:45, ±1 h) end at 01:45: the bursts enter them at the 01:00 step
    early = Snapshot(now=3 * day + 50 * 60.0, node_types=(T4x4,), nodes=(), pending=(), recent=past)
    fc = forecast(early, by_day, 390.0)
    assert fc.pods == ()
    assert fc.changes_at == 3 * day + 3600.0


def short_days(days: int, step: float, *, windows: int, quantile: float, **kw: float) -> PlannerConfig:
    """A forecast over 2,000-second "days" (bands ±200 s, 700 s recent), so a few arrivals span several."""
    return PlannerConfig(
        forecast_windows=windows,
        forecast_quantile=quantile,
        forecast_days=days,
        forecast_day_s=2000.0,
        forecast_day_band_s=200.0,
        forecast_day_step_s=step,
        forecast_recent_s=700.0,
        **kw,  # type: ignore[arg-type]
    )


_STEP = st.tuples(
    st.lists(  # arrivals since the last snapshot: (gap after the previous arrival, GPUs, thousandths, gang)
        st.tuples(
            st.sampled_from([0.0, 0.0, 5.0, 100.0, 359.9, 360.0, 2000.0]),
            st.integers(0, 2),
            st.sampled_from([250, 500, 1000]),
            st.sampled_from(["batch", "batch", "gang", "service"]),
        ),
        max_size=6,
    ),
    st.integers(0, 3),  # pods the caller drops from the front of `recent`
    st.sampled_from([0.0, 30.0, 360.0, 3600.0]),  # how far `now` moves past the last arrival
)


@settings(max_examples=300, deadline=None)
@example(  # a pod exactly one horizon after another is not in that one's window
    steps=[([(0.0, 1, 1000, "batch"), (360.0, 1, 1000, "batch"), (0.0, 1, 250, "batch")], 0, 0.0)],
    quantile=1.0,
    windows=10,
    shuffle=False,
    half_life=3600.0,
    days=0,
    step=0.0,
)
@given(
    steps=st.lists(_STEP, min_size=1, max_size=12),
    quantile=st.sampled_from([1.0, 0.99, 0.8, 0.5]),
    windows=st.sampled_from([1, 3, 10]),
    shuffle=st.booleans(),
    half_life=st.sampled_from([0.0, 600.0, 3600.0]),
    days=st.sampled_from([0, 0, 1, 3]),
    step=st.sampled_from([0.0, 50.0, 300.0]),
)
def test_sliding_forecast_answers_exactly_what_forecast_does(
    steps: list[tuple[list[tuple[float, int, int, str]], int, float]],
    quantile: float,
    windows: int,
    shuffle: bool,
    half_life: float,
    days: int,
    step: float,
) -> None:
    """The incremental forecast the planner's cache keeps equals the from-scratch one on every snapshot:
    arrivals with ties, gangs and CPU pods, pods leaving the look-back or dropped by the caller, (with
    ``shuffle``) a caller whose arrivals are out of order, and (with ``days``) daily bands over a short day."""
    cfg = short_days(days, step, windows=windows, quantile=quantile, service_half_life_s=half_life)
    sliding = SlidingForecast()
    recent: tuple[Pod, ...] = ()
    t = 0.0
    made = 0
    for new, drop, ahead in steps:
        added = []
        for gap, gpus, milli, kind in new:
            t += gap
            made += 1
            kw: dict[str, Any] = (
                {"gang": "g", "gang_size": 2}
                if kind == "gang"
                else {"service": "s"}
                if kind == "service"
                else {}
            )
            added.append(pod(f"p{made}", gpus=gpus, milli=milli if gpus == 1 else 1000, arrival=t, **kw))
        if shuffle and len(added) > 1:
            added.reverse()
        recent = recent[drop:] + tuple(added)
        snap = Snapshot(now=t + ahead, node_types=(T4x4,), nodes=(), pending=(), recent=recent)
        assert sliding.forecast(snap, cfg, 360.0) == forecast(snap, cfg, 360.0)


@settings(max_examples=300, deadline=None)
@example(  # an arrival an ulp past a band's end: rounding once made the change "now", not after it
    arrivals=[(6.003619240468943e-258, 250)], now=1800.0, days=1, step=0.0, quantile=1.0
)
@given(
    arrivals=st.lists(
        st.tuples(st.floats(0.0, 9000.0), st.sampled_from([250, 500, 1000, 2000])), min_size=1, max_size=40
    ),
    now=st.floats(0.0, 12000.0),
    days=st.sampled_from([1, 3]),
    step=st.sampled_from([0.0, 50.0, 300.0]),
    quantile=st.sampled_from([1.0, 0.99, 0.8]),
)
def test_the_forecast_never_changes_before_it_says_it_will(
    arrivals: list[tuple[float, int]], now: float, days: int, step: float, quantile: float
) -> None:
    """With daily bands, ``changes_at`` may skip band moves that cannot change the window picked, but it is
    never later than a change: at every sampled time before it the forecast holds the same pods."""
    cfg = short_days(days, step, windows=10, quantile=quantile)
    pods = sorted(
        (
            pod(f"p{i}", gpus=max(1, m // 1000), milli=min(m, 1000), arrival=t)
            for i, (t, m) in enumerate(arrivals)
        ),
        key=lambda p: (p.arrival, p.name),
    )
    recent = tuple(p for p in pods if p.arrival <= now)

    def at(t: float) -> Forecast:
        return forecast(Snapshot(now=t, node_types=(T4x4,), nodes=(), pending=(), recent=recent), cfg, 360.0)

    fc = at(now)
    end = fc.changes_at if fc.changes_at is not None else now + 3 * days * 2000.0
    assert end > now
    for k in range(1, 60):
        t = now + (end - now) * k / 60
        if t < end:
            assert at(t).pods == fc.pods, t


@settings(max_examples=300, deadline=None)
@given(
    gpus=st.integers(0, 4),
    milli=st.sampled_from([0, 300, 1000]),
    cpu=st.integers(0, 9000),
    mem=st.integers(0, 40000),
    k=st.integers(0, 12),
    devs=st.lists(st.sampled_from([0, 200, 700, 1000]), max_size=8),
    node_cpu=st.integers(0, 40000),
    node_mem=st.integers(0, 140000),
)
def test_filling_a_trial_node_in_one_step_equals_placing_copies_one_by_one(
    gpus: int, milli: int, cpu: int, mem: int, k: int, devs: list[int], node_cpu: int, node_mem: int
) -> None:
    """choose_type's trial fill places equal pods at once; it must leave the node as a pod-by-pod loop does."""
    from capstan.capacity._work import _fill
    from capstan.capacity.placement import Capacity, choose_devices, fits, take

    p = Pod("q", 0.0, cpu, mem, num_gpu=gpus, gpu_milli=milli if gpus else 0)
    fast, slow = Capacity(node_cpu, node_mem, list(devs)), Capacity(node_cpu, node_mem, list(devs))
    placed = 0
    while placed < k and fits(slow, p):
        take(slow, p, choose_devices(slow, p))
        placed += 1
    assert _fill(fast, p, k) == placed
    assert fast == slow


def test_sliding_forecast_stays_exact_after_it_compacts_its_expired_windows() -> None:
    """Thousands of arrivals through a short look-back: the state drops expired windows in bulk and still
    answers what the from-scratch forecast does."""
    cfg = PlannerConfig(forecast_windows=2, forecast_quantile=1.0, forecast_days=0)
    sliding = SlidingForecast()
    recent: tuple[Pod, ...] = ()
    for i in range(9000):
        arrival = 10.0 * i
        recent = (*recent[-100:], pod(f"p{i}", milli=250 * (1 + i % 4), arrival=arrival))
        snap = Snapshot(now=arrival + 1.0, node_types=(T4x4,), nodes=(), pending=(), recent=recent)
        got = sliding.forecast(snap, cfg, 360.0)
        if i % 500 == 0 or i > 8990:
            assert got == forecast(snap, cfg, 360.0)
    assert len(sliding._pods) < 4096 * 2 + 200  # compacted: 9,000 arrivals went through it


def test_an_old_ramp_of_a_service_gives_way_to_a_recent_one_batch_bursts_do_not() -> None:
    """Service replicas: a ramp of 8 five hours ago against one of 3 an hour ago; with a one-hour half-life
    the recent ramp is held, as batch pods the bigger one is (it still is, for batch pods, with the half-life)."""

    def burst(kind: str, start: float, n: int) -> tuple[Pod, ...]:
        extra: dict[str, Any] = {"service": "chat"} if kind == "service" else {}
        return tuple(pod(f"{kind}{start}-{i}", arrival=start + i, **extra) for i in range(n))

    now = 6 * 3600.0
    for kind in ("service", "batch"):
        recent = (*burst(kind, 3600.0, 8), *burst(kind, 5 * 3600.0, 3))
        snap = Snapshot(now=now, node_types=(T4x4,), nodes=(), pending=(), recent=recent)
        decayed = forecast(snap, PlannerConfig(forecast_windows=96, forecast_days=0), 390.0)
        plain = forecast(
            snap, PlannerConfig(forecast_windows=96, service_half_life_s=0, forecast_days=0), 390.0
        )
        assert len(plain.pods) == 8
        assert len(decayed.pods) == (3 if kind == "service" else 8)


def test_place_scope_decides_only_pending_pods() -> None:
    empty = node("idle", T4x4)
    waiting = pod("w", arrival=0.0)
    snap = Snapshot(now=10_000.0, node_types=(T4x4,), nodes=(empty,), pending=(waiting,))
    p = plan(snap, NO_HEADROOM, scope="place")
    assert p.scope == "place"
    assert [(n.pod, n.node) for n in p.nominations] == [("w", "idle")]
    assert not p.drains and not p.moves


def test_plan_is_deterministic() -> None:
    pending = tuple(pod(f"p{i}", milli=(i * 137) % 900 + 100) for i in range(40))
    snap = Snapshot(now=0.0, node_types=(T4x4, V100x8, V100x1, CPU), nodes=(), pending=pending)
    assert plan(snap) == plan(snap)


@settings(max_examples=150, deadline=None)
@given(
    types=st.lists(
        st.tuples(
            st.integers(1, 8),
            st.sampled_from(["T4", "V100", "A100"]),
            st.integers(8, 96),
            st.floats(0.5, 40.0),
        ),
        min_size=1,
        max_size=8,
    ),
    pods=st.lists(
        st.tuples(st.integers(0, 8), st.sampled_from([250, 500, 1000]), st.integers(1000, 32000)),
        min_size=1,
        max_size=30,
    ),
)
def test_type_choice_stops_at_the_value_bound_with_the_choice_a_full_search_makes(
    types: list[tuple[int, str, int, float]], pods: list[tuple[int, int, int]]
) -> None:
    """choose_type tries node types by the most value per dollar they could serve and stops once that is below
    the best found; every plan must be the one trying every type gives."""
    import math

    from capstan.capacity import PlanCache

    node_types = tuple(
        NodeType(f"t{i}-{model}", cores * 1000, cores * 4096, gpus, model, price, boot_delay=BOOT)
        for i, (gpus, model, cores, price) in enumerate(types)
    )
    pending = tuple(
        pod(f"p{i}", gpus, milli if gpus == 1 else 1000, cpu=cpu, mem=cpu * 2)
        for i, (gpus, milli, cpu) in enumerate(pods)
    )
    snap = Snapshot(now=0.0, node_types=node_types, nodes=(), pending=pending, recent=pending)
    full_search = PlanCache(node_types)
    full_search._by_bound = tuple((math.inf, i, nt) for i, nt in enumerate(node_types))
    assert plan(snap, NO_HEADROOM, PlanCache(node_types)) == plan(snap, NO_HEADROOM, full_search)


def room_for_an_eight_gpu_pod(
    *bound_on_big: Pod, small: bool = True, config: PlannerConfig = NO_HEADROOM
) -> Plan:
    """``big``: an allocatable 8-GPU node running ``bound_on_big``; ``small``: an idle allocatable 4-GPU node.
    An 8-GPU pod is pending: it fits no allocatable node as they are."""
    used = sum(p.num_gpu for p in bound_on_big)
    nodes = [node("big", V100x8, devs=(0,) * used + (1000,) * (8 - used), bound=bound_on_big)]
    if small:
        nodes.append(node("small", T4x4))
    wide = pod("p", gpus=8, cpu=32000, mem=65536)
    snap = Snapshot(now=1000.0, node_types=(T4x4, V100x8), nodes=tuple(nodes), pending=(wide,), next_id=5)
    return plan(snap, config, scope="place")


def test_a_pod_no_allocatable_node_takes_gets_one_freed_by_moving_its_pods_elsewhere_now() -> None:
    p = room_for_an_eight_gpu_pod(pod("v1"))
    assert [(m.pod, m.node) for m in p.room_moves] == [("v1", "small")]
    assert "Eviction API" in p.room_moves[0].k8s
    assert [(n.pod, n.node) for n in p.nominations] == [("p", "big")]
    assert not p.launches
    # turned off, or with nowhere to put v1, or more pods than the bound, the pod waits for a new node instead
    off = room_for_an_eight_gpu_pod(pod("v1"), config=replace(NO_HEADROOM, make_room_moves=0))
    nowhere = room_for_an_eight_gpu_pod(pod("v1"), small=False)
    crowded = room_for_an_eight_gpu_pod(pod("v1"), pod("v2"), config=replace(NO_HEADROOM, make_room_moves=1))
    for q in (off, nowhere, crowded):
        assert not q.room_moves
        assert [(launch.type, launch.pods) for launch in q.launches] == [("v100-8", ("p",))]


def test_no_room_is_made_by_moving_a_pod_that_is_not_safe_to_evict() -> None:
    p = room_for_an_eight_gpu_pod(pod("v1", safe_to_evict=False))
    assert not p.room_moves
    assert [launch.pods for launch in p.launches] == [("p",)]


def _best_bin_by_definition(
    w: Any,
    pod: Pod,
    kinds: tuple[str, ...],
    exclude: frozenset[str] = frozenset(),
    first_fit: bool = False,
    max_empty_gpus: float = math.inf,
    max_empty_price: float = math.inf,
) -> Any:
    """``_Work.best_bin`` as its docstring defines it, by scoring every bin of ``w`` that fits: the smallest
    (kind's rank, up at, fragmentation, empty, -CPU used, snapshot order), or with ``first_fit`` the first bin
    of the first kind in snapshot order."""
    from capstan.capacity.model import GPU_MILLI
    from capstan.capacity.placement import choose_devices, fits, fragmentation_cost

    ok = w.ok_types(pod)
    fitting = [
        b
        for b in w.bins
        if b.kind in kinds
        and b.nt.name in ok
        and b.id not in exclude
        and fits(b.cap, pod)
        and (pod.wants_gpu is False or any(b.cap.devs))
        and (pod.is_fractional or not pod.wants_gpu or b.cap.devs.count(GPU_MILLI) >= pod.num_gpu)
        and not (not b.pods and b.nt.gpu > max_empty_gpus and b.nt.price_per_hour > max_empty_price)
    ]
    if first_fit:
        firsts = [b for b in fitting if b.kind == kinds[0]]
        if firsts:
            b = min(firsts, key=lambda b: b.order)
            return b, choose_devices(b.cap, pod)
    best = None
    for b in fitting:
        a = choose_devices(b.cap, pod)
        up = w.views[b.id].available_at if w.soonest and b.kind == "inflight" else 0.0
        key = (
            kinds.index(b.kind),
            up,
            fragmentation_cost(b.cap, pod, a),
            0 if b.pods else 1,
            -(1.0 - b.cap.cpu / b.nt.cpu_milli),
            b.order,
        )
        if best is None or key < best[0]:
            best = (key, b, a)
    return (best[1], best[2]) if best else None


_NODE = st.tuples(
    st.sampled_from([NodeState.GPU_ALLOCATABLE, NodeState.BOOTING, NodeState.READY]),
    st.sampled_from(["t4", "v100-8", "v100-1", "cpu"]),
    st.lists(st.sampled_from([0, 250, 500, 1000]), min_size=8, max_size=8),
    st.integers(0, 3),
)
_PENDING = st.tuples(
    st.sampled_from([0, 1, 1, 1, 2, 8]), st.sampled_from([250, 500, 750, 1000]), st.sampled_from([1, 2, 2, 8])
)


@settings(max_examples=60, deadline=None)
@given(nodes=st.lists(_NODE, max_size=8), pending=st.lists(_PENDING, min_size=1, max_size=40))
def test_placement_scans_choose_the_bin_scoring_every_bin_chooses(
    nodes: list[tuple[NodeState, str, list[int], int]], pending: list[tuple[int, int, int]]
) -> None:
    """The scans skip work (bins by kind, the first kind with a fit decides, new bins in a state already
    scored are passed over); every plan must be the one scoring every bin gives, headroom, room moves and
    repacks included."""
    import capstan.capacity._work as work

    types = {"t4": T4x4, "v100-8": V100x8, "v100-1": V100x1, "cpu": CPU}
    views = []
    for i, (state, name, devs, used) in enumerate(nodes):
        nt = types[name]
        bound = tuple(pod(f"r{i}-{k}", 0, cpu=1000, mem=1024, arrival=-4000.0) for k in range(used))
        views.append(
            replace(
                node(f"n{i}", nt, state, devs=tuple(devs[: nt.gpu]), bound=bound),
                available_at=100.0 * (i + 1) if state is not NodeState.GPU_ALLOCATABLE else 0.0,
            )
        )
    queued = tuple(
        pod(f"p{i}", gpus, milli if gpus == 1 else 1000, cpu=cpu * 1000, mem=cpu * 2048, arrival=float(i))
        for i, (gpus, milli, cpu) in enumerate(pending)
    )
    snap = Snapshot(
        now=100.0, node_types=tuple(types.values()), nodes=tuple(views), pending=queued, recent=queued
    )
    cfg = PlannerConfig(repack_min_age_s=0.0)
    fast = plan(snap, cfg)
    original = work._Work.best_bin
    work._Work.best_bin = _best_bin_by_definition  # type: ignore[assignment]
    try:
        slow = plan(snap, cfg)
    finally:
        work._Work.best_bin = original  # type: ignore[method-assign]
    assert fast == slow


def test_a_new_node_alike_but_for_its_devices_is_scored_too() -> None:
    """Two planned T4 nodes with the same free CPU and memory, one GPU half used on the first and a quarter on
    the second: a pod asking for three quarters fills the second's device exactly, so it goes there."""
    from capstan.capacity._work import _Work
    from capstan.capacity.placement import choose_devices

    half, quarter, big = (pod(n, 1, m, cpu=2000, mem=4096) for n, m in (("h", 500), ("q", 250), ("b", 750)))
    snap = Snapshot(now=0.0, node_types=(T4x4,), nodes=(), pending=(half, quarter, big))
    w = _Work(snap, NO_HEADROOM, None)
    first, second = w.open_bin(T4x4), w.open_bin(T4x4)
    w.place(first, half, choose_devices(first.cap, half))
    w.place(second, quarter, choose_devices(second.cap, quarter))
    found = w.best_bin(big, ("ready", "inflight", "new"))
    assert found is not None and found[0] is second
    assert found == _best_bin_by_definition(w, big, ("ready", "inflight", "new"))


class _Announced:
    """A forecaster told of pods ahead: ``pods`` from ``start`` on, nothing before."""

    def __init__(self, pods: tuple[Pod, ...], start: float) -> None:
        self.pods = pods
        self.start = start
        self.asked: list[float] = []

    def forecast(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
        self.asked.append(snap.now)
        if snap.now < self.start:
            return Forecast((), self.start)
        return Forecast(self.pods, None)


def test_a_forecaster_of_its_own_decides_the_headroom_and_when_to_look_again() -> None:
    """With no recent arrivals the planner's own forecast holds nothing; a forecaster told of six one-GPU pods
    from t=6000 on holds nothing before then, says so in the plan's recheck time, and two 4-GPU nodes after."""
    from capstan.capacity import PlanCache

    told = _Announced(tuple(pod(f"a{i}") for i in range(6)), start=6000.0)
    cache = PlanCache(forecaster=told)
    cfg = PlannerConfig(consolidate=False)
    early = plan(Snapshot(now=5000.0, node_types=(T4x4,), nodes=(), pending=()), cfg, cache)
    assert not early.launches and early.recheck_at == 6000.0
    later = plan(Snapshot(now=6000.0, node_types=(T4x4,), nodes=(), pending=()), cfg, cache)
    assert [launch.purpose for launch in later.launches] == ["headroom", "headroom"]
    assert told.asked == [5000.0, 6000.0]
    assert not plan(Snapshot(now=6000.0, node_types=(T4x4,), nodes=(), pending=()), cfg).launches


def test_a_pod_larger_than_every_type_is_found_unplaceable_at_once_and_holds_no_headroom() -> None:
    """A pod asking for a million GPUs, pending and in the forecast: it is unplaceable, and headroom holds
    nothing for it (split into one phantom per GPU, it made a million phantoms in every decision)."""
    giant = pod("giant", gpus=10**6, arrival=4800.0)
    small = pod("small", arrival=4700.0)
    snap = Snapshot(now=5000.0, node_types=(T4x4, V100x8), nodes=(), pending=(giant,), recent=(small, giant))
    cfg = PlannerConfig(consolidate=False)
    cache = PlanCache(snap.node_types)
    decided = plan(snap, cfg, cache)
    assert [u[0] for u in decided.unplaceable] == ["giant"]
    assert "nvidia.com/gpu 1000000 > 8" in decided.unplaceable[0][1]
    held = cache.phantoms(cache.forecast(snap, cfg), cfg)  # what this plan held headroom for (cached)
    assert [p.name for p in held] == ["small"]


def test_an_empty_node_is_drained_sooner_when_the_forecast_holds_announced_pods_only() -> None:
    """An empty node idle for 100 s (``min_idle_s`` 300, ``known_idle_s`` 30): kept while the forecast guesses
    (the planner's own, or a queue beside it), drained when a queue's announcements are the whole forecast and none
    needs it; idle only 10 s, kept even then (a resumed Job's pods come a moment after it leaves the queue)."""
    from capstan.capacity import NoForecast, QueuedDemand, TraceLead

    later = pod("later", arrival=9000.0)  # announced, beyond the look-ahead: it needs no node now
    cfg = PlannerConfig(consolidate=False)

    def drains(idle_s: float, told: bool) -> list[str]:
        up = replace(node("up", T4x4), idle_since=5000.0 - idle_s)
        snap = Snapshot(now=5000.0, node_types=(T4x4,), nodes=(up,), pending=(), recent=())
        base = NoForecast() if told else None
        cache = PlanCache(
            snap.node_types, forecaster=QueuedDemand(TraceLead((later,), 3600.0), base, lookahead_s=390.0)
        )
        return [d.node for d in plan(snap, cfg, cache, scope="review").drains]

    assert drains(100.0, told=True) == ["up"]
    assert drains(100.0, told=False) == []
    assert drains(10.0, told=True) == []


def test_a_full_node_is_emptied_into_room_long_free_on_a_node_that_stays_when_every_pod_is_announced() -> (
    None
):
    """``big`` keeps a pod pinned to its V100s (no cheaper node takes it) and has four GPUs free; ``full``, a T4
    node, wastes nothing, so no repack looks at it. When the forecast guesses nothing and ``big``'s room has
    stood free for ``repack_min_age_s``, ``full``'s pods move into it and ``full`` is drained; with a guessed
    forecast, or room freed only just now, nothing moves."""
    types = (T4x4, V100x8)
    pinned = pod("pinned", models=frozenset({"V100"}))
    big = node(
        "big",
        V100x8,
        devs=(0, 0, 0, 0, 1000, 1000, 1000, 1000),
        bound=(pinned, pod("b1"), pod("b2"), pod("b3")),
    )
    full = node("full", T4x4, devs=(0, 0, 0, 0), bound=tuple(pod(f"f{i}") for i in range(4)))

    def at(now: float, cache: PlanCache) -> Plan:
        return plan(
            Snapshot(now=now, node_types=types, nodes=(big, full), pending=()), PlannerConfig(), cache
        )

    told = PlanCache(types, forecaster=NoForecast())
    assert not at(1800.0, told).drains  # the room is first seen now
    p = at(1800.0 + PlannerConfig().repack_min_age_s, told)
    assert [d.node for d in p.drains] == ["full"]
    assert sorted((m.pod, m.node) for m in p.moves) == [(f"f{i}", "big") for i in range(4)]
    guessed = PlanCache(types)
    at(1800.0, guessed)
    assert not at(1800.0 + PlannerConfig().repack_min_age_s, guessed).drains
