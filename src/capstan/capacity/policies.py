"""The policies a simulation compares: Capstan's planner and the incumbents it must beat, emulated fairly.

* ``capstan``: calls :func:`capstan.capacity.plan` as a controller would (placement 1 s after pods turn
  pending, reviews at most every 60 s, repacks every 900 s) and applies each plan.
* ``cluster-autoscaler``: cluster-autoscaler's documented defaults: a scan every 10 s; pending pods first fill
  upcoming (in-flight) nodes; one scale-up per scan, node group chosen by the ``least-waste`` expander (CPU and
  memory only) from a first-fit-decreasing estimate; a node is unneeded below 0.5 utilisation (GPU requests only
  on GPU nodes) when its pods fit elsewhere, and removed after 10 min unneeded and not within 10 min of a
  scale-up (empty nodes up to 10 at once, one non-empty drain per scan). Scans are only run when something can
  have changed (after an event, or when a timer expires), which gives the same decisions as scanning every 10 s.
* ``karpenter``: batches pending pods (1 s idle / 10 s max), packs them onto in-flight NodeClaims first, then new
  ones whose instance type is the cheapest that holds the pods packed onto it; disruption every 10 s: empty nodes
  at once (``consolidateAfter: 0s``), then one node whose pods all fit elsewhere (delete consolidation) or whose
  pods left without room fit one node of a cheaper type (single-node replacement: the node is cordoned, the
  cheaper one launched, and the old one drained when the new one is up; multi-node consolidation is not
  modelled), at most 10 % of nodes at a time.
* ``ca-buffer``: the cluster-autoscaler emulation with a CapacityBuffer (``autoscaling.x-k8s.io``, the
  ``active-capacity`` strategy): that many virtual one-GPU pods are injected into each scan, as CA injects a
  buffer's pods into its simulation. The real scheduler never sees them: real pods take the free capacity they
  stand on, and the next scan scales up for the buffer pods left without room; a node the buffer pods stand on is
  not unneeded unless they fit elsewhere. By default the buffer is sized to the trace's peak burst (the most GPUs
  asked for within one boot plus GPU-ready delay, known in hindsight, as the static cluster is): the headroom
  recipe platform teams use today, with a number picked for the worst case.
* ``static``: a fixed cluster (counts per node type, normally the oracle's peak) ready from the start.
* ``oracle``: Capstan's packing with every node ready the moment it is requested and no headroom: the lower bound.

No policy moves a pod that is not safe to evict (:attr:`capstan.capacity.model.Pod.safe_to_evict`): its node is
neither scaled down, consolidated nor repacked while it runs, as cluster-autoscaler and Karpenter honour their
annotations.

This module holds Capstan's controller loop (:class:`CapstanPolicy`), the oracle, the static cluster and
:func:`make_policy`; the incumbents' emulations are modules of their own (``_cluster_autoscaler``,
``_karpenter``, and ``_scans`` for what both share).
"""

from __future__ import annotations

import math

from capstan.capacity._cluster_autoscaler import CAConfig, ClusterAutoscalerPolicy
from capstan.capacity._karpenter import KarpenterPolicy
from capstan.capacity.forecast import Forecaster, forecast_lookback, gpu_horizon
from capstan.capacity.planner import PlanCache, PlannerConfig, Scope, plan
from capstan.capacity.sim import Policy, Sim
from capstan.errors import UserError

POLICY_NAMES = ("capstan", "cluster-autoscaler", "ca-buffer", "karpenter", "static", "oracle")


class CapstanPolicy:
    """Runs the planner as the live controller would: a placement-only plan ``react`` seconds after pods turn
    pending; a review (headroom, drains of empty nodes) at most every ``review_interval`` seconds while anything
    changes, like Karpenter's disruption loop; and every ``repack_interval`` seconds a review that may also
    move long-running pods.

    NOTE: with the planner's ``repack_both_orders`` a full plan may be made twice, so full plans come every
    900 s by default: across seeds that costs what every 300 or 600 s does, for about the work of one plan
    every 300 s (docs/benchmarks.md, "Repacking in both orders")."""

    name = "capstan"
    steers_placement = True

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
        self._last_repack = -math.inf
        self.name = name
        self.plans = {"place": 0, "review": 0, "full": 0, "skipped": 0}
        """Plans made per scope, and reviews skipped because nothing they look at had changed."""
        self.room_moves = 0
        """Running pods moved to free an allocatable node for a pending pod (:attr:`Plan.room_moves`)."""
        self._place_at: float | None = None
        self._review_at: float | None = None
        self._last_review = -math.inf
        self._reviewed: tuple[object, ...] = ()
        self._forced = False
        self._cache = PlanCache(forecaster=forecaster)
        self._horizon = 0.0

    def start(self, sim: Sim) -> None:
        self._horizon = gpu_horizon(sim.node_types)
        sim.recent_window = max(forecast_lookback(self.config, self._horizon), 1.0)

    def on_change(self, sim: Sim, now: float) -> None:
        if sim.pending and (self._place_at is None or self._place_at < now):
            self._place_at = now + self.react
            sim.wake(self._place_at, "place")
        if self._review_at is None or self._review_at < now:
            self._review_at = max(now + self.react, self._last_review + self.review_interval)
            sim.wake(self._review_at, "review")

    @staticmethod
    def _review_inputs(sim: Sim) -> tuple[object, ...]:
        empty = tuple(n.id for n in sim.active.values() if n.live and n.allocatable and not n.pods)
        return (sim.arrivals, sim.launches, sim.drains, empty)

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        if tag == "recheck":  # a timer a plan asked for: review then, within the review interval
            self._forced = True
            if self._review_at is None or self._review_at < now:
                self._review_at = max(now, self._last_review + self.review_interval)
                sim.wake(self._review_at, "review")
            return
        scope: Scope = "place"
        if tag != "place":
            if self._review_at is not None and self._review_at <= now:
                self._review_at = None
            self._last_review = now
            scope = "review"
            if now >= self._last_repack + self.repack_interval or any(
                n.purpose == "repack" and n.allocatable and not n.pods for n in sim.active.values()
            ):
                scope = "full"
                self._last_repack = now
            else:
                # a review only acts on arrivals (the forecast), launches, drains and empty nodes: when none
                # of them changed and no timer asked for it, it would decide what the last one did
                seen = self._review_inputs(sim)
                if seen == self._reviewed and not self._forced:
                    self.plans["skipped"] += 1
                    return
                self._reviewed = seen
            self._forced = False
        elif self._place_at is not None and self._place_at <= now:
            self._place_at = None
        self.plans[scope] += 1
        p = plan(sim.snapshot(), self.config, self._cache, scope=scope)
        for launch in p.launches:
            node = sim.launch(launch.type, purpose=launch.purpose, node_id=launch.node)
            for pod in launch.pods:
                sim.promise(pod, node.id)
        for move in p.room_moves:
            self.room_moves += sim.move(move.pod, move.node)
        for nom in p.nominations:
            sim.promise(nom.pod, nom.node)
        if p.scope == "place":
            return
        held = set(p.headroom)
        for n in sim.active.values():
            if n.live:
                sim.set_headroom(n.id, n.id in held)
        for d in p.drains:
            sim.drain(d.node)
        for move in p.moves:
            sim.promise(move.pod, move.node)
        if p.recheck_at is not None:
            sim.wake(p.recheck_at, "recheck")


class OraclePolicy(CapstanPolicy):
    zero_delay = True

    def __init__(self) -> None:
        # its nodes are up at once and it holds no headroom: it repacks every 300 s, which on openb default
        # cost less than 600 or 900 s (101,069 against 101,282 and 101,307)
        super().__init__(PlannerConfig(headroom=False), react=0.0, name="oracle", repack_interval=300.0)


class StaticPolicy:
    name = "static"

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def start(self, sim: Sim) -> None:
        for nt in sim.node_types:
            for _ in range(self.counts.get(nt.name, 0)):
                sim.launch(nt.name, purpose="static")

    def on_change(self, sim: Sim, now: float) -> None:
        return None

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        return None


def make_policy(
    name: str,
    static_counts: dict[str, int] | None = None,
    planner: PlannerConfig | None = None,
    buffer_gpus: int | None = None,
    review_interval: float | None = None,
    repack_interval: float | None = None,
) -> Policy:
    """The policy called ``name``; ``planner`` configures Capstan's planner (the oracle keeps its own),
    ``buffer_gpus`` the size of ``ca-buffer``'s CapacityBuffer (None: the trace's peak burst), and the two
    intervals Capstan's controller loop (None: its defaults)."""
    if name == "capstan":
        capstan = CapstanPolicy(planner)
        if review_interval is not None:
            capstan.review_interval = review_interval
        if repack_interval is not None:
            capstan.repack_interval = repack_interval
        return capstan
    if name == "cluster-autoscaler":
        return ClusterAutoscalerPolicy()
    if name == "ca-buffer":
        return ClusterAutoscalerPolicy(CAConfig(buffer_gpus=buffer_gpus), name="ca-buffer")
    if name == "karpenter":
        return KarpenterPolicy()
    if name == "oracle":
        return OraclePolicy()
    if name == "static":
        return StaticPolicy(static_counts or {})
    raise UserError(f"--policy {name}: unknown policy; choose from {', '.join(POLICY_NAMES)}")
