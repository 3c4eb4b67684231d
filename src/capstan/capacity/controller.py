"""Capstan's capacity controller: when to plan, at which scope, and how a :class:`Plan` is applied to a cluster.

The controller is the same code over every cluster. It sees a cluster only through :class:`Cluster`, a small
protocol: a :class:`Snapshot` of what is there, what has changed since (:class:`Activity`), and the actions a plan
needs (launch a node of a type, promise a pending pod to a node, move a running pod, drain a node, hold a set of
nodes as headroom, and wake the controller up at a time). :class:`capstan.capacity.Sim` implements it over a
replayed trace; a live cluster implements it over the informer's state and a node provider.

The timing, as Karpenter's provisioning and disruption loops do it:

* a placement-only plan (``place``) ``react`` seconds after pods turn pending;
* a review (headroom, drains of empty nodes) at most every ``review_interval`` seconds while anything changes,
  skipped when nothing a review looks at changed and no timer asked for one;
* every ``repack_interval`` seconds, or as soon as a node launched for a repack is up (still empty, or
  come up with nothing promised to it), a full plan that may also move long-running pods.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal, Protocol

from capstan.capacity.forecast import Forecaster, forecast_lookback, gpu_horizon
from capstan.capacity.model import NodeType
from capstan.capacity.planner import Plan, PlanCache, PlannerConfig, Scope, Snapshot, plan

__all__ = ["Activity", "Cluster", "Controller", "apply_plan"]


@dataclass(frozen=True)
class Activity:
    """What a review depends on besides the clock: counters that only grow, and the nodes standing empty."""

    arrivals: int
    """Pods that have arrived so far (the forecast moves with them)."""
    launches: int
    drains: int
    empty: tuple[str, ...]
    """Live nodes that take pods and have none (candidates for a drain)."""
    repack_waiting: bool
    """A node launched for a repack takes pods and is still empty: the repack that wanted it can go on."""
    repack_up_at: float = -math.inf
    """When a node launched for a repack last came to take pods with nothing promised to it (-inf: none has, or
    the cluster does not say): the repack that waited for it can go on even if a pod was placed there first.

    NOTE: announced pods are not promised, so on openb gpuspec20 told an hour ahead the G2 node a repack and an
    announced pinned pod both wanted came up, the pod was placed there within a second, the node was no longer
    empty when the review came, and no other event came for 391 h: the repack into its 7 free GPUs waited for
    the queue's next announcement. With this, 1.055× the oracle's cost instead of 1.073× (p99 59 s); no replay
    without a queue changed (exploratory replays, 2026-12-07). Counting also nodes that came up with pods
    promised cost more (1.061×) and changed gpuspec20 without a queue."""


class Cluster(Protocol):
    """What the controller needs of a cluster: its state, what changed, and the actions a plan takes."""

    node_types: tuple[NodeType, ...]
    recent_window: float
    """Seconds of past arrivals each :meth:`snapshot` carries (the controller sets it from its forecast)."""

    def has_pending(self) -> bool:
        """Some pod waits for a place."""
        ...

    def activity(self) -> Activity: ...

    def snapshot(self) -> Snapshot: ...

    def launch(
        self, type_name: str, *, purpose: Literal["pods", "headroom", "repack"], node_id: str
    ) -> object:
        """Start a node of ``type_name`` called ``node_id`` (the plan names it, so pods can be promised to it)."""
        ...

    def promise(self, pod_name: str, nid: str) -> bool:
        """Reserve pending ``pod_name`` on ``nid``: bound now if ``nid`` takes pods, else once it does."""
        ...

    def move(self, pod_name: str, nid: str) -> bool:
        """Evict running ``pod_name`` and bind it on ``nid`` at once."""
        ...

    def drain(self, nid: str) -> None: ...

    def hold_headroom(self, nids: Collection[str]) -> None:
        """Hold exactly ``nids`` of the live nodes empty for forecast demand (the others are released)."""
        ...

    def wake(self, t: float, tag: str) -> None:
        """Call the controller's :meth:`Controller.on_wake` with ``tag`` at ``t``."""
        ...


def apply_plan(p: Plan, cluster: Cluster) -> int:
    """Carry out ``p`` on ``cluster`` in the plan's order: launches (and the pods promised to them), the moves
    that free room, the nominations; then, for a review or full plan, the headroom held, the drains and the moves
    of drained nodes' pods. Returns how many room moves were made."""
    moved = 0
    for launch in p.launches:
        cluster.launch(launch.type, purpose=launch.purpose, node_id=launch.node)
        for pod in launch.pods:
            cluster.promise(pod, launch.node)
    for move in p.room_moves:
        moved += cluster.move(move.pod, move.node)
    for nom in p.nominations:
        cluster.promise(nom.pod, nom.node)
    if p.scope == "place":
        return moved
    cluster.hold_headroom(frozenset(p.headroom))
    for d in p.drains:
        cluster.drain(d.node)
    for move in p.moves:
        cluster.promise(move.pod, move.node)
    return moved


class Controller:
    """Runs the planner over a :class:`Cluster`: a placement-only plan ``react`` seconds after pods turn
    pending; a review (headroom, drains of empty nodes) at most every ``review_interval`` seconds while anything
    changes, like Karpenter's disruption loop; and every ``repack_interval`` seconds a review that may also move
    long-running pods. It is a :class:`capstan.capacity.Policy`, so the simulator drives it as it drives the
    emulated autoscalers.

    NOTE: with the planner's ``repack_both_orders`` a full plan may be made twice, so full plans come every
    900 s by default: across seeds that costs what every 300 or 600 s does, for about the work of one plan
    every 300 s (docs/benchmarks.md, "Repacking in both orders")."""

    steers_placement = True
    """The controller, not the scheduler's own retries, places pending pods (the simulator leaves them)."""

    def __init__(
        self,
        config: PlannerConfig | None = None,
        react: float = 1.0,
        name: str = "capstan",
        review_interval: float = 60.0,
        repack_interval: float = 900.0,
        forecaster: Forecaster | None = None,
    ) -> None:
        """``forecaster``: what headroom is held for, if not the planner's own forecast of recent arrivals."""
        self.config = config or PlannerConfig()
        self.react = react
        self.review_interval = review_interval
        self.repack_interval = repack_interval
        self.name = name
        self.plans = {"place": 0, "review": 0, "full": 0, "skipped": 0}
        """Plans made per scope, and reviews skipped because nothing they look at had changed."""
        self.room_moves = 0
        """Running pods moved to free an allocatable node for a pending pod (:attr:`Plan.room_moves`)."""
        self._last_repack = -math.inf
        self._place_at: float | None = None
        self._review_at: float | None = None
        self._last_review = -math.inf
        self._reviewed: tuple[object, ...] = ()
        self._forced = False
        self._cache = PlanCache(forecaster=forecaster)

    def start(self, cluster: Cluster) -> None:
        horizon = gpu_horizon(cluster.node_types)
        cluster.recent_window = max(forecast_lookback(self.config, horizon), 1.0)

    def on_change(self, cluster: Cluster, now: float) -> None:
        if (self._place_at is None or self._place_at < now) and cluster.has_pending():
            self._place_at = now + self.react
            cluster.wake(self._place_at, "place")
        if self._review_at is None or self._review_at < now:
            self._review_at = max(now + self.react, self._last_review + self.review_interval)
            cluster.wake(self._review_at, "review")

    def on_announced(self, cluster: Cluster, now: float) -> None:
        """Demand announced ahead has changed (a queued Job, a ProvisioningRequest, read by the forecaster): the
        forecast is read afresh, and a review comes ``react`` seconds from now rather than after the review
        interval, since what was announced is waiting for its nodes."""
        self._cache.forget_forecast()
        self._forced = True
        at = now + self.react
        if self._review_at is None or self._review_at < now or self._review_at > at:
            self._review_at = at
            cluster.wake(at, "review")

    def _scope_at(self, cluster: Cluster, now: float, tag: str) -> Scope | None:
        """What a wake-up tagged ``tag`` at ``now`` decides (None: nothing); updates the controller's timers."""
        if tag == "recheck":  # a timer a plan asked for: review then, within the review interval
            self._forced = True
            if self._review_at is None or self._review_at < now:
                self._review_at = max(now, self._last_review + self.review_interval)
                cluster.wake(self._review_at, "review")
            return None
        if tag == "place":
            if self._place_at is not None and self._place_at <= now:
                self._place_at = None
            return "place"
        if self._review_at is not None and self._review_at <= now:
            self._review_at = None
        self._last_review = now
        seen = cluster.activity()
        scope: Scope = "review"
        if (
            now >= self._last_repack + self.repack_interval
            or seen.repack_waiting
            or seen.repack_up_at > self._last_repack
        ):
            scope = "full"
            self._last_repack = now
        else:
            # a review only acts on arrivals (the forecast), launches, drains and empty nodes: when none of them
            # changed and no timer asked for it, it would decide what the last one did
            inputs = (seen.arrivals, seen.launches, seen.drains, seen.empty)
            if inputs == self._reviewed and not self._forced:
                self.plans["skipped"] += 1
                return None
            self._reviewed = inputs
        self._forced = False
        return scope

    def on_wake(self, cluster: Cluster, now: float, tag: str) -> None:
        scope = self._scope_at(cluster, now, tag)
        if scope is None:
            return
        self.plans[scope] += 1
        p = plan(cluster.snapshot(), self.config, self._cache, scope=scope)
        self.room_moves += apply_plan(p, cluster)
        if p.scope != "place" and p.recheck_at is not None:
            cluster.wake(p.recheck_at, "recheck")
