"""The controller over a cluster that is not the simulator: when it plans, at which scope, and what it applies.

The cluster here is a small recording implementation of :class:`capstan.capacity.Cluster` (pure code, no I/O):
the point is that the controller needs nothing of the simulator, so the live cluster can implement the same
protocol. The replays of the real traces (tests/unit/capacity/test_sim.py) drive the same controller through
:class:`capstan.capacity.Sim`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

import pytest

from capstan.capacity import (
    Activity,
    Controller,
    Delay,
    Drain,
    Launch,
    NodeState,
    NodeType,
    NodeView,
    Nomination,
    Plan,
    PlannerConfig,
    Pod,
    Snapshot,
    apply_plan,
)

pytestmark = pytest.mark.unit

GPU1 = NodeType(
    "g1", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 60), gpu_ready_delay=Delay("fixed", 0)
)


@dataclass
class RecordingCluster:
    """A cluster of ready nodes that records every action the controller takes, in order."""

    node_types: tuple[NodeType, ...] = (GPU1,)
    recent_window: float = 0.0
    now: float = 0.0
    pending: list[Pod] = field(default_factory=list)
    nodes: list[NodeView] = field(default_factory=list)
    seen: Activity = field(default_factory=lambda: Activity(0, 0, 0, (), False))
    actions: list[tuple[object, ...]] = field(default_factory=list)
    wakes: list[tuple[float, str]] = field(default_factory=list)

    def has_pending(self) -> bool:
        return bool(self.pending)

    def activity(self) -> Activity:
        return self.seen

    def snapshot(self) -> Snapshot:
        return Snapshot(self.now, self.node_types, tuple(self.nodes), tuple(self.pending))

    def launch(
        self, type_name: str, *, purpose: Literal["pods", "headroom", "repack"], node_id: str
    ) -> object:
        self.actions.append(("launch", type_name, purpose, node_id))
        return node_id

    def promise(self, pod_name: str, nid: str) -> bool:
        self.actions.append(("promise", pod_name, nid))
        return True

    def move(self, pod_name: str, nid: str) -> bool:
        self.actions.append(("move", pod_name, nid))
        return True

    def drain(self, nid: str) -> None:
        self.actions.append(("drain", nid))

    def hold_headroom(self, nids: Collection[str]) -> None:
        self.actions.append(("headroom", tuple(sorted(nids))))

    def wake(self, t: float, tag: str) -> None:
        self.wakes.append((t, tag))


def gpu_pod(name: str) -> Pod:
    return Pod(name, 0.0, 4000, 8192, 1, 1000, duration=600.0)


def test_a_pending_pod_is_placed_react_seconds_later_on_a_node_the_plan_launches() -> None:
    cluster = RecordingCluster(pending=[gpu_pod("p0")])
    controller = Controller(PlannerConfig(headroom=False), react=2.0)
    controller.start(cluster)
    assert cluster.recent_window >= 1.0

    controller.on_change(cluster, 10.0)
    assert (12.0, "place") in cluster.wakes
    cluster.now = 12.0
    controller.on_wake(cluster, 12.0, "place")
    launches = [a for a in cluster.actions if a[0] == "launch"]
    assert len(launches) == 1 and launches[0][1:3] == ("g1", "pods")
    # the pod is promised to the node the plan named, right after its launch
    assert cluster.actions[1] == ("promise", "p0", launches[0][3])
    assert controller.plans["place"] == 1


def test_a_review_with_nothing_changed_is_skipped_and_a_waiting_repack_node_forces_a_full_plan() -> None:
    cluster = RecordingCluster(seen=Activity(3, 1, 0, ("n1",), False))
    controller = Controller(PlannerConfig(headroom=False), repack_interval=900.0)
    controller.on_wake(cluster, 0.0, "review")  # the first review is a full plan (no repack yet)
    controller.on_wake(cluster, 100.0, "review")
    controller.on_wake(cluster, 200.0, "review")  # the same activity again: nothing to decide
    assert controller.plans == {"place": 0, "review": 1, "full": 1, "skipped": 1}

    cluster.seen = Activity(4, 1, 0, ("n1",), False)  # an arrival moves the forecast
    controller.on_wake(cluster, 300.0, "review")
    assert controller.plans["review"] == 2

    cluster.seen = Activity(4, 1, 0, ("n1",), True)  # a repack's node is up and empty
    controller.on_wake(cluster, 400.0, "review")
    assert controller.plans["full"] == 2


def test_a_repack_node_that_came_up_after_the_last_full_plan_forces_one_even_if_it_has_pods() -> None:
    # a node launched for a repack and announced demand: a pod placed on it as it came up leaves it not empty,
    # but the repack that wanted it can go on (on openb gpuspec20 told an hour ahead, without this the next
    # full plan came 391 h later, when the queue's next pod was announced)
    cluster = RecordingCluster(seen=Activity(3, 1, 0, (), False))
    controller = Controller(PlannerConfig(headroom=False), repack_interval=900.0)
    controller.on_wake(cluster, 0.0, "review")  # the first review is a full plan
    cluster.seen = Activity(4, 1, 0, (), False, repack_up_at=-1.0)  # came up before that full plan
    controller.on_wake(cluster, 100.0, "review")
    assert controller.plans == {"place": 0, "review": 1, "full": 1, "skipped": 0}
    cluster.seen = Activity(4, 1, 0, (), False, repack_up_at=150.0)
    controller.on_wake(cluster, 200.0, "review")
    assert controller.plans["full"] == 2
    controller.on_wake(cluster, 300.0, "review")  # seen by a full plan already
    assert controller.plans["full"] == 2


def test_a_recheck_asks_for_a_review_within_the_review_interval_and_forces_it() -> None:
    cluster = RecordingCluster(seen=Activity(0, 0, 0, (), False))
    controller = Controller(PlannerConfig(headroom=False), review_interval=60.0)
    controller.on_wake(cluster, 0.0, "review")
    controller.on_wake(cluster, 10.0, "recheck")
    assert cluster.wakes[-1] == (60.0, "review")  # not before the interval since the last review
    controller.on_wake(cluster, 60.0, "review")  # nothing changed, but the timer asked for it
    assert controller.plans["skipped"] == 0 and controller.plans["review"] == 1


def test_apply_plan_keeps_the_plans_order_and_a_placement_plan_touches_no_headroom_or_drain() -> None:
    full = Plan(
        launches=(Launch("n9", "g1", ("a",), "pods", ""),),
        nominations=(Nomination("b", "n1", ""),),
        drains=(Drain("n2", 0.0, "empty"),),
        moves=(Nomination("c", "n1", ""),),
        room_moves=(Nomination("d", "n3", ""),),
        headroom=("n4",),
        scope="full",
    )
    cluster = RecordingCluster()
    assert apply_plan(full, cluster) == 1
    assert cluster.actions == [
        ("launch", "g1", "pods", "n9"),
        ("promise", "a", "n9"),
        ("move", "d", "n3"),
        ("promise", "b", "n1"),
        ("headroom", ("n4",)),
        ("drain", "n2"),
        ("promise", "c", "n1"),
    ]
    placed = RecordingCluster()
    apply_plan(Plan(nominations=(Nomination("b", "n1", ""),), drains=full.drains, scope="place"), placed)
    assert placed.actions == [("promise", "b", "n1")]


def test_an_empty_node_the_forecast_does_not_need_is_drained_by_a_review() -> None:
    idle = NodeView("n1", "g1", NodeState.GPU_ALLOCATABLE, 8000, 32768, (1000,), 0, 0.0, idle_since=0.0)
    cluster = RecordingCluster(now=4000.0, nodes=[idle], seen=Activity(0, 1, 0, ("n1",), False))
    controller = Controller(PlannerConfig(headroom=False))
    controller.on_wake(cluster, 4000.0, "review")
    assert ("drain", "n1") in cluster.actions


def test_demand_announced_anew_gets_a_review_react_seconds_later_with_the_forecast_read_again() -> None:
    """A queue's announcement changes with no pod arriving (a ProvisioningRequest made while the cluster is
    quiet): the review comes ``react`` seconds later, not after the review interval, and is not skipped; the
    forecast is read again although no arrival moved it (without this a request made after start-up waited, with
    nothing launched, until the next full plan)."""
    from capstan.capacity import Forecast

    class Queue:
        def __init__(self) -> None:
            self.pods: tuple[Pod, ...] = ()

        def forecast(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
            return Forecast(self.pods, None, frozenset(p.name for p in self.pods), False)

    queue = Queue()
    cluster = RecordingCluster(seen=Activity(0, 0, 0, (), False))
    controller = Controller(
        PlannerConfig(headroom_wait_s=0.0), react=1.0, review_interval=60.0, forecaster=queue
    )
    controller.on_wake(cluster, 0.0, "review")  # the first review is a full plan: nothing to hold
    assert not [a for a in cluster.actions if a[0] == "launch"]
    queue.pods = (gpu_pod("announced"),)
    cluster.now = 10.0
    controller.on_announced(cluster, 10.0)
    assert cluster.wakes[-1] == (11.0, "review")  # not at 60 s
    cluster.now = 11.0
    controller.on_wake(cluster, 11.0, "review")
    assert controller.plans["skipped"] == 0 and controller.plans["review"] == 1
    assert [a[1:3] for a in cluster.actions if a[0] == "launch"] == [("g1", "headroom")]
