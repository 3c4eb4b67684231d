"""The planner's inputs (:class:`Snapshot` of :class:`NodeView` nodes, :class:`PlannerConfig`) and its output
(:class:`Plan`: :class:`Launch`, :class:`Nomination` and :class:`Drain` decisions, each with the Kubernetes
mechanism that carries it out, ``k8s``). Plain frozen data: :mod:`capstan.capacity.planner` decides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from capstan.capacity.model import NodeState, NodeType, Pod

Scope = Literal["place", "review", "full"]
PLANNED_NODE_LABEL = "capstan.io/planned-node"
K8S_LAUNCH = (
    "create a NodeClaim (or raise the node group) of this type labelled {label}={node}; its pods are held by a "
    "schedulingGate, get required nodeAffinity {label}={node}, then the gate is removed"
)
K8S_NOMINATE_EXISTING = (
    "pod held by a schedulingGate gets required nodeAffinity kubernetes.io/hostname={node}; gate removed"
)
K8S_NOMINATE_INFLIGHT = "pod keeps its schedulingGate with required nodeAffinity {label}={node} until the node's GPUs are allocatable"
K8S_HEADROOM = (
    "placeholder pods (PriorityClass value -10, preemptible) sized like the forecast pods, pinned by nodeAffinity "
    "to {node}, or a CapacityBuffer: the node autoscaler sees it as needed"
)
K8S_DRAIN = "taint capstan.io/draining:NoSchedule, cordon, then delete the Node/NodeClaim"
K8S_MOVE = (
    "evicted through the Eviction API (PodDisruptionBudgets hold); its replacement pod is held by a "
    "schedulingGate and gets required nodeAffinity kubernetes.io/hostname={node}, then the gate is removed"
)
K8S_CONSOLIDATE = (
    "taint capstan.io/draining:NoSchedule, evict its pods through the Eviction API (PodDisruptionBudgets hold), "
    "their replacements go where the plan's moves say, then delete the Node/NodeClaim"
)


@dataclass(frozen=True)
class NodeView:
    """One node as the planner sees it; free resources already exclude pods bound or promised to it."""

    id: str
    type: str
    state: NodeState
    cpu: int
    mem: int
    devs: tuple[int, ...]
    pods: int
    available_at: float
    idle_since: float | None = None
    bound: tuple[Pod, ...] = ()
    """Pods running on the node (used to decide whether they can move elsewhere)."""
    purpose: str = "pods"
    """Why it was launched (a label on the node): ``repack`` nodes wait for the repack that wants them."""


@dataclass(frozen=True)
class NodeChanges:
    """How a snapshot's ``nodes`` differ from an earlier snapshot's (``since``, that tuple itself): the views
    of ``removed`` nodes are gone, ``views`` replace those of the same id, and the views of ids not in
    ``since`` follow all the others in the order given. Only a hint: a planner that last saw a different
    tuple reads ``nodes`` whole, and a plan is the same either way."""

    since: tuple[NodeView, ...]
    views: tuple[NodeView, ...]
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    """Everything a decision needs; ``promised`` maps pending pods to the node a previous plan chose for them."""

    now: float
    node_types: tuple[NodeType, ...]
    nodes: tuple[NodeView, ...]
    pending: tuple[Pod, ...]
    promised: tuple[tuple[str, str], ...] = ()
    recent: tuple[Pod, ...] = ()
    next_id: int = 0
    """Nodes a plan launches are named ``{node_prefix}{next_id}``, ``{node_prefix}{next_id + 1}``, …"""
    node_prefix: str = "n"
    """A live cluster names its launches after the controller (``capstan-n12``), so they are valid, unique Node
    names; the simulator keeps ``n``."""
    changes: NodeChanges | None = field(default=None, repr=False, compare=False)
    """What changed in ``nodes`` since an earlier snapshot (the simulator says; None: not known), so a planner
    that kept that snapshot's nodes reads only these."""


@dataclass(frozen=True)
class PlannerConfig:
    forecast_windows: int = 96
    """How many past windows (each one GPU boot delay long) the forecast looks at for service replicas, and for
    batch pods when ``forecast_days`` is 0."""
    forecast_days: int = 7
    """Batch pods are forecast by time of day: from the windows that started within ``forecast_day_band_s`` of
    this time of day on each of the last this many days, and those of the last ``forecast_recent_s``
    (0: from every window of the last ``forecast_windows``)."""
    forecast_day_s: float = 86400.0
    """The period of the arrival pattern the daily windows follow."""
    forecast_day_band_s: float = 3600.0
    """How far either side of this time of day the daily windows may start."""
    forecast_day_step_s: float = 900.0
    """The daily bands move in steps of this, so time alone changes the forecast at most this often."""
    forecast_recent_s: float = 7200.0
    """With ``forecast_days``: the windows of this much of the immediate past are offered too."""
    forecast_quantile: float = 0.99
    """Headroom covers the arrivals of the window at this quantile of GPU demand among them."""
    service_half_life_s: float = 3600.0
    """Replicas of inference services get a window of their own, each window's demand halved for every this
    many seconds of its age, so an old ramp stops being held once newer ones weigh more (0: like batch pods)."""
    headroom: bool = True
    headroom_wait_s: float = 0.0
    """How long a pod may be asked to wait for capacity already on its way. Headroom covers the arrivals of one
    boot plus GPU-ready delay less the wait (:func:`headroom_window`), and a pending pod that must wait for an
    in-flight node takes the one that comes up first. The wait is the larger of this and
    ``headroom_wait_share``; both 0: headroom for no wait."""
    headroom_wait_share: float = 0.2
    """The wait as a share of one boot plus GPU-ready delay (:func:`headroom_wait`), so it scales with the boot.

    NOTE: a fixed wait is a larger share of a short boot than of a long one; a share keeps the pods that wait for
    an in-flight node waiting the same part of every boot. How it was chosen: docs/benchmarks-history.md."""
    max_headroom_nodes: int = 8
    max_phantoms: int = 32
    """At most this many forecast pods (largest first) are replayed for headroom: bounds the decision's cost."""
    lookahead: int = 24
    drain: bool = True
    consolidate: bool = True
    consolidation_threshold: float = 0.5
    """CPU nodes with less than this share of their CPU allocated may be emptied (GPU nodes: any free GPU)."""
    consolidation_candidates: int = 16
    repack_group: int = 4
    """Up to this many nodes are emptied together (their pods may move to fewer, cheaper new nodes)."""
    repack_min_saving: float = 0.05
    """A repack must cut the hourly price of the nodes it touches by more than this share."""
    repack_min_age_s: float = 1800.0
    """Only pods that have run this long are moved (they are likely to run on)."""
    min_idle_s: float = 300.0
    """An empty node is drained only after it has been empty this long (damps launch/drain flapping)."""
    known_idle_s: float = 30.0
    """The same wait when the forecast guesses nothing and holds announced pods only
    (:attr:`~capstan.capacity.Forecast.guessed`), if shorter than ``min_idle_s``: nothing comes unannounced, so
    only the moments between an announcement's end and its pods' arrival need covering (a Job resumed, the Job
    controller's pods a few seconds later)."""
    headroom_split_gpus: int = 4
    """Forecast pods asking for more whole GPUs than this are held as that many one-GPU phantoms (0: never)."""
    make_room_moves: int = 4
    """A pending pod that no allocatable node can take, before it waits for a node to boot, may have one
    allocatable node freed for it: that node's pods (at most this many, all safe to evict) move now onto
    other allocatable nodes (0: never). See :func:`_make_room`."""
    repack_both_orders: bool = True
    """A full plan whose repack search passed over a candidate because forecast headroom held room on it is
    made a second time with the repack search run before headroom is placed (repacks may then take room
    headroom would have held, and headroom finds room elsewhere or launches it); the plan whose launches less
    its drains cost less an hour is kept (ties: headroom first). See :func:`plan`."""
    pinned_headroom_node_ratio: float = 2.0
    """A node launched or kept empty for nothing but a headroom phantom limited to some GPU models has at most this
    many times the GPUs the phantom asks for, unless it costs no more than a type within that (0: no node is
    launched or kept for such phantoms alone; they hold free room on nodes in use or already held;
    ``math.inf``: no limit).

    NOTE: a scarce model often comes only in large nodes (openb's G2 and G3 nodes, the synthetic trace's A100
    nodes, have 8 GPUs each), and the pinned pods of a forecast window seldom come back at the same hour, so a
    large node held for one pinned phantom mostly idles. The exception for a node that costs no more than one
    within the limit: openb's 4-GPU T4 node costs less than its 2-GPU one. What the limit does to cost and waits:
    docs/benchmarks.md, "Headroom for pods pinned to GPU models"."""


@dataclass(frozen=True)
class Launch:
    node: str
    type: str
    pods: tuple[str, ...]
    purpose: Literal["pods", "headroom", "repack"]
    k8s: str


@dataclass(frozen=True)
class Nomination:
    pod: str
    node: str
    k8s: str


@dataclass(frozen=True)
class Drain:
    node: str
    at: float
    reason: str
    k8s: str = K8S_DRAIN


@dataclass(frozen=True)
class Plan:
    launches: tuple[Launch, ...] = ()
    nominations: tuple[Nomination, ...] = ()
    drains: tuple[Drain, ...] = ()
    moves: tuple[Nomination, ...] = ()
    """Pods of drained nodes and where they go (after the drain evicts them)."""
    room_moves: tuple[Nomination, ...] = ()
    """Running pods moved now, to free an allocatable node for a pending pod nominated to it (carried out
    before ``nominations``)."""
    headroom: tuple[str, ...] = ()
    """Existing or in-flight nodes held empty for forecast demand."""
    unplaceable: tuple[tuple[str, str], ...] = ()
    """(pod, reason) for pods no node type can ever run."""
    waiting: tuple[str, ...] = ()
    """Pods left pending on purpose: incomplete gangs, or node-type limits reached."""
    headroom_k8s: str = K8S_HEADROOM
    recheck_at: float | None = None
    """When this plan may change with no new event: an empty node's idle time runs out, or the forecast moves."""
    scope: Scope = "full"
    """What was decided (see :func:`plan`); headroom and drains only by ``review`` and ``full``."""
