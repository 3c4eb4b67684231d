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

Three behaviours of a live cluster are options, off by default so that every figure measured before them stands
(``bench/capacity_live.py`` turns them on to compare each emulation with its real autoscaler):
``KarpenterConfig.nominate_only`` (Karpenter only nominates the pods it launched a NodeClaim for, and
kube-scheduler may give the node to later pods), ``CAConfig.soft_taint_unneeded`` (cluster-autoscaler's
``DeletionCandidateOfClusterAutoscaler:PreferNoSchedule`` keeps new pods off the nodes it means to remove) and
``Sim(queue_order="drawn")`` (the scheduler tries waiting pods, and picks among equally scored nodes, in a drawn
order rather than oldest and first).

No policy moves a pod that is not safe to evict (:attr:`capstan.capacity.model.Pod.safe_to_evict`): its node is
neither scaled down, consolidated nor repacked while it runs, as cluster-autoscaler and Karpenter honour their
annotations.

This module is the registry of those policies by name (:func:`make_policy`). Capstan's controller is
:class:`capstan.capacity.controller.Controller`, the same code a live cluster runs; the others are modules of their
own (``_cluster_autoscaler``, ``_karpenter`` and ``_scans`` for what both share, ``_oracle``, ``_static``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from capstan.capacity._cluster_autoscaler import CAConfig, ClusterAutoscalerPolicy
from capstan.capacity._karpenter import KarpenterPolicy
from capstan.capacity._oracle import OraclePolicy
from capstan.capacity._static import StaticPolicy
from capstan.capacity.controller import Controller
from capstan.capacity.forecast import Forecaster
from capstan.capacity.planner import PlannerConfig
from capstan.capacity.sim import Policy
from capstan.errors import UserError


@dataclass(frozen=True)
class PolicyOptions:
    """What :func:`make_policy` may pass on: each policy takes the options that concern it."""

    static_counts: dict[str, int] | None = None
    planner: PlannerConfig | None = None
    buffer_gpus: int | None = None
    review_interval: float | None = None
    repack_interval: float | None = None
    forecaster: Callable[[], Forecaster] | None = None
    """Makes Capstan's forecast for one replay (a forecaster keeps state: one per run); None: its own."""


def _controller(o: PolicyOptions) -> Policy:
    c = Controller(o.planner, forecaster=o.forecaster() if o.forecaster is not None else None)
    if o.review_interval is not None:
        c.review_interval = o.review_interval
    if o.repack_interval is not None:
        c.repack_interval = o.repack_interval
    return c


_POLICIES: dict[str, Callable[[PolicyOptions], Policy]] = {
    "capstan": _controller,
    "cluster-autoscaler": lambda o: ClusterAutoscalerPolicy(),
    "ca-buffer": lambda o: ClusterAutoscalerPolicy(CAConfig(buffer_gpus=o.buffer_gpus), name="ca-buffer"),
    "karpenter": lambda o: KarpenterPolicy(),
    "static": lambda o: StaticPolicy(o.static_counts or {}),
    "oracle": lambda o: OraclePolicy(),
}
POLICY_NAMES = tuple(_POLICIES)


def make_policy(
    name: str,
    static_counts: dict[str, int] | None = None,
    planner: PlannerConfig | None = None,
    buffer_gpus: int | None = None,
    review_interval: float | None = None,
    repack_interval: float | None = None,
    forecaster: Callable[[], Forecaster] | None = None,
) -> Policy:
    """The policy called ``name``; ``planner`` configures Capstan's planner (the oracle keeps its own),
    ``buffer_gpus`` the size of ``ca-buffer``'s CapacityBuffer (None: the trace's peak burst), the two
    intervals Capstan's controller loop (None: its defaults), and ``forecaster`` makes Capstan's forecast (None:
    its own)."""
    factory = _POLICIES.get(name)
    if factory is None:
        raise UserError(f"--policy {name}: unknown policy; choose from {', '.join(POLICY_NAMES)}")
    return factory(
        PolicyOptions(static_counts, planner, buffer_gpus, review_interval, repack_interval, forecaster)
    )
