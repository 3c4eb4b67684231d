"""Capstan's capacity planner: one pure function from a cluster snapshot to a plan.

``plan(snapshot, config)`` decides placement and provisioning together, so the scheduler and the autoscaler stop
disagreeing:

* every pending pod is packed onto an allocatable node, a node already in flight (no duplicate node for a pod
  already promised to a booting node) or a node launched by this plan, preferring the placement that strands the
  fewest GPU thousandths (FGD-style) and, for new nodes, the type that serves the most value per dollar: the pod,
  the pods queued behind it and the recent arrival mix, under the pods' GPU-model, selector and toleration
  constraints;
* gangs are provisioned atomically: all members get a place or none does (incomplete gangs wait);
* headroom comes from a forecast: the busiest window as long as one boot delay among the recent arrivals (a
  sliding window at a configurable rank) is replayed as phantom pods; capacity they use is held, nodes they still
  lack are launched;
* empty nodes that neither real nor phantom pods use are drained: the forecast says they will not be needed
  within their boot delay;
* repacks move long-running pods off wasteful nodes, onto free space elsewhere or onto fewer, cheaper new nodes
  (launched first; the pods move once they are up).

Each decision carries the Kubernetes mechanism that would carry it out (``k8s``), so the live controller (which
calls this same function) only has to apply them. There is no I/O here.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from capstan.capacity.forecast import (
    Forecast,
    Forecaster,
    SlidingForecast,
    gpu_horizon,
    headroom_wait,
    headroom_window,
)
from capstan.capacity.model import GPU_MILLI, NodeState, NodeType, Pod, PodShape
from capstan.capacity.nodetypes import CPU_PRICE_PER_CORE_HOUR, DEFAULT_GPU_PRICE, MEMORY_PRICE_PER_GIB_HOUR
from capstan.capacity.placement import (
    Assignment,
    Capacity,
    choose_devices,
    fits,
    fragmentation_cost,
    give,
    take,
    why_incompatible,
)

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

    @functools.cached_property
    def smallest_bound(self) -> tuple[int, int]:
        """The smallest CPU and memory requests among the bound pods (a view is reused while its node is
        unchanged, so this is computed once per change, not once per decision)."""
        return min((p.cpu_milli for p in self.bound), default=0), min(
            (p.memory_mib for p in self.bound), default=0
        )


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


@dataclass(slots=True, eq=False)
class _Bin:
    id: str
    nt: NodeType
    cap: Capacity
    kind: Literal["ready", "inflight", "new"]
    order: int
    pods: int = 0
    real: list[str] = field(default_factory=list)
    phantom: int = 0
    scanned: bool = False
    """In one of ``_Work``'s scan lists (it has room for the smallest pod of the decision)."""


def pod_value(pod: Pod) -> float:
    """A type-independent price of what the pod uses, so node types can be compared by value per dollar."""
    return (
        pod.gpu_total_milli / 1000 * DEFAULT_GPU_PRICE
        + pod.cpu_milli / 1000 * CPU_PRICE_PER_CORE_HOUR
        + pod.memory_mib / 1024 * MEMORY_PRICE_PER_GIB_HOUR
    )


def node_value(nt: NodeType) -> float:
    """:func:`pod_value` of a whole node of type ``nt``: no set of pods that fits on it is worth more."""
    return (
        nt.gpu * DEFAULT_GPU_PRICE
        + nt.cpu_milli / 1000 * CPU_PRICE_PER_CORE_HOUR
        + nt.memory_mib / 1024 * MEMORY_PRICE_PER_GIB_HOUR
    )


def _by_value_bound(types: tuple[NodeType, ...]) -> tuple[tuple[float, int, NodeType], ...]:
    """(highest value per dollar a node of the type can serve, index, type), highest first."""
    bounds = [(node_value(nt) / max(nt.price_per_hour, 1e-9), i, nt) for i, nt in enumerate(types)]
    return tuple(sorted(bounds, key=lambda b: (-b[0], b[1])))


def _constraint_key(pod: Pod) -> tuple[bool, int]:
    """Pods limited to fewer GPU models first; pods any model may serve last."""
    return (not pod.gpu_models, len(pod.gpu_models))


def _queue_key(pod: Pod) -> tuple[int, int, int, int, float, str]:
    return (-pod.priority, -pod.gang_size, -pod.gpu_total_milli, -pod.cpu_milli, pod.arrival, pod.name)


class PlanCache:
    """Memo of pure facts kept between decisions: which node types a pod shape may use and why not, which type
    a new node for a shape and the shapes queued behind it should be, the last forecast, and the last repack
    search that found nothing.

    It never changes a plan, only how fast it is made, except through the :class:`Forecaster` it may be given
    (what headroom is held for; the planner's own :class:`SlidingForecast` by default). It resets itself when
    the node-type tuple changes or it grows past ``limit`` entries, keeping that forecaster.
    """

    def __init__(
        self,
        node_types: tuple[NodeType, ...] = (),
        limit: int = 2_000_000,
        forecaster: Forecaster | None = None,
    ) -> None:
        self.node_types = node_types
        self.by_name: dict[str, NodeType] = {t.name: t for t in node_types}
        self.limit = limit
        self.ok: dict[PodShape, frozenset[str]] = {}
        self.cheapest: dict[tuple[PodShape, float], float] = {}
        self.why: dict[tuple[str, PodShape], str | None] = {}
        self._forecast: tuple[tuple[object, ...], Forecast] | None = None
        self.no_repack: dict[bool, tuple[object, ...]] = {}
        """Per order of the repack search (before headroom or not), the inputs of the last one that found
        nothing."""
        self.types: dict[tuple[object, ...], NodeType | str] = {}
        self._horizon: float | None = None
        self._by_bound: tuple[tuple[float, int, NodeType], ...] | None = None
        self._gpu_price: float | None = None
        self._forecaster = forecaster
        """What headroom is held for, if not the planner's own :class:`SlidingForecast`."""
        self._sliding: Forecaster = forecaster or SlidingForecast()
        self._phantoms: tuple[Forecast, PlannerConfig, list[Pod]] | None = None
        self.replans = 0
        """How many full plans made with this cache were made a second time, with the repack search first
        (``repack_both_orders``; see :func:`plan`). A count, not a memo: :meth:`reset` keeps it."""

    @property
    def horizon(self) -> float:
        """:func:`gpu_horizon` of the node types."""
        if self._horizon is None:
            self._horizon = gpu_horizon(self.node_types)
        return self._horizon

    @property
    def gpu_price(self) -> float:
        """The lowest price per GPU per hour of any node type with GPUs (0 if none has any)."""
        if self._gpu_price is None:
            self._gpu_price = min((t.price_per_hour / t.gpu for t in self.node_types if t.gpu), default=0.0)
        return self._gpu_price

    @property
    def by_value_bound(self) -> tuple[tuple[float, int, NodeType], ...]:
        """The node types, highest value per dollar a node of the type can serve first (:func:`node_value`)."""
        if self._by_bound is None:
            self._by_bound = _by_value_bound(self.node_types)
        return self._by_bound

    def forecast(self, snap: Snapshot, cfg: PlannerConfig) -> Forecast:
        """:func:`forecast` for ``snap`` (or the cache's own :class:`Forecaster`'s answer), reused while the
        recent arrivals are the same and it does not say it has changed, and otherwise updated from the last
        one's windows (:class:`SlidingForecast`)."""
        ends = (snap.recent[0].name, snap.recent[-1].name) if snap.recent else ("", "")
        key = (len(snap.recent), ends, cfg)
        stale = (
            self._forecast is not None and (at := self._forecast[1].changes_at) is not None and snap.now >= at
        )
        if self._forecast is None or self._forecast[0] != key or stale:
            self._forecast = (key, self._sliding.forecast(snap, cfg, headroom_window(cfg, self.horizon)))
        return self._forecast[1]

    def phantoms(
        self, fc: Forecast, cfg: PlannerConfig, fits: Callable[[Pod], frozenset[str]] | None = None
    ) -> list[Pod]:
        """The forecast's pods as headroom phantoms (:func:`_headroom_pods`), the first ``max_phantoms`` in
        queue order, placed most constrained first: those limited to fewest GPU models, then the rest, each in
        queue order. Kept while the forecast holds the same pods.

        NOTE: placed in queue order, phantoms any model may serve took the free room of scarce models first and
        the pinned ones found none (and, under ``pinned_headroom_node_ratio``, often no node either). Pinned
        first, fewer pods waited longer than a minute on openb gpuspec20 at every boot delay from 3 to 15
        minutes (docs/benchmarks.md)."""
        if self._phantoms is None or self._phantoms[0].pods != fc.pods or self._phantoms[1] != cfg:
            # NOTE: a forecast pod no node type can run (``fits``: the types it fits, by shape) is never held
            # as headroom: nothing could serve it, and split into one phantom per GPU, a pod asking for a
            # million GPUs made a million phantoms in every decision. What is left is at most a node's GPUs
            # per pod, whatever the trace asks for.
            wanted = fc.pods if fits is None else tuple(p for p in fc.pods if fits(p))
            pods = sorted(_headroom_pods(wanted, cfg), key=_queue_key)[: cfg.max_phantoms]
            pods.sort(key=_constraint_key)  # stable: queue order among equally constrained phantoms
            self._phantoms = (fc, cfg, pods)
        return self._phantoms[2]

    def reset(self, node_types: tuple[NodeType, ...]) -> PlanCache:
        self.node_types = node_types
        self.by_name = {t.name: t for t in node_types}
        self.ok.clear()
        self.cheapest.clear()
        self.why.clear()
        self._forecast = None
        self.no_repack.clear()
        self.types.clear()
        self._horizon = None
        self._by_bound = None
        self._gpu_price = None
        self._sliding = self._forecaster or SlidingForecast()
        self._phantoms = None
        return self


class _Work:
    """The mutable scratch state of one ``plan`` call (never escapes it)."""

    def __init__(self, snap: Snapshot, cfg: PlannerConfig, cache: PlanCache | None) -> None:
        self.snap = snap
        self.cfg = cfg
        if cache is None or cache.node_types is not snap.node_types or len(cache.why) > cache.limit:
            cache = PlanCache(snap.node_types) if cache is None else cache.reset(snap.node_types)
        self.cache = cache
        self.types = cache.by_name
        self.count: dict[str, int] = dict.fromkeys(self.types, 0)
        self.bins: list[_Bin] = []
        self.new_bins: list[_Bin] = []
        self.views: dict[str, NodeView] = {}
        self.next_id = snap.next_id
        self._mix: list[Pod] | None = None
        self.type_memo: dict[tuple[object, ...], NodeType | str] = {}
        self.live: set[str] = set()
        """Nodes neither draining nor gone (of any type)."""
        self.repack_first = False
        """This plan searches for repacks before it places headroom."""
        self.passed_over = False
        """The repack search passed over a candidate because forecast headroom held room on it."""
        self._evictable: dict[int, list[_Bin]] = {}
        self.room_moves: list[tuple[Pod, _Bin]] = []
        """Running pods moved in this plan, and where, to free allocatable nodes for pending pods (:func:`_make_room`)."""
        cpus: list[int] = []
        mems: list[int] = []
        bins, views, types, count = self.bins, self.views, self.types, self.count
        for i, n in enumerate(snap.nodes):
            if n.bound:
                cpu, mem = n.smallest_bound
                cpus.append(cpu)
                mems.append(mem)
            state = n.state  # enum members are singletons: identity is exact
            if state is NodeState.DRAINING or state is NodeState.GONE:
                continue
            self.live.add(n.id)
            nt = types.get(n.type)
            if nt is None:
                continue
            count[nt.name] += 1
            ready = state is NodeState.GPU_ALLOCATABLE or (state is NodeState.READY and nt.gpu == 0)
            bins.append(
                _Bin(
                    n.id,
                    nt,
                    Capacity(n.cpu, n.mem, list(n.devs)),
                    "ready" if ready else "inflight",
                    i,
                    n.pods,
                )
            )
            views[n.id] = n
        self.fc = self.cache.forecast(snap, cfg) if cfg.headroom else Forecast((), None)
        # the phantoms headroom places (big forecast pods split into smaller ones), not the forecast's own pods
        self.phantoms = self.cache.phantoms(self.fc, cfg, self.ok_types) if cfg.headroom else []
        # the smallest request this decision may place: bins with less free are left out of the scans
        cpus.extend(p.cpu_milli for p in (*snap.pending, *self.phantoms))
        mems.extend(p.memory_mib for p in (*snap.pending, *self.phantoms))
        self.floor_cpu = min(cpus, default=0)
        self.floor_mem = min(mems, default=0)
        # with a headroom wait, a pod that must wait for an in-flight node takes the one up first (best_bin)
        self.soonest = headroom_wait(cfg, cache.horizon) > 0
        # bins with room for the smallest pod, by kind (a bin's kind never changes) and then only those with a
        # free GPU thousandth (what pods asking for GPUs scan): each a list of sort keys and one of bins, most
        # free CPU first (ties: snapshot order), so a scan stops at the first bin with less free CPU than the
        # pod asks for
        self._scan: tuple[dict[str, tuple[list[tuple[int, int]], list[_Bin]]], ...] = tuple(
            {kind: ([], []) for kind in ("ready", "inflight", "new")} for _ in (False, True)
        )
        entries = sorted(
            ((-b.cap.cpu, b.order), b)
            for b in self.bins
            if b.cap.cpu >= self.floor_cpu and b.cap.mem >= self.floor_mem
        )
        scan = self._scan
        for k, b in entries:
            keys, scanned = scan[0][b.kind]
            keys.append(k)
            scanned.append(b)
            if any(b.cap.devs):
                keys, scanned = scan[1][b.kind]
                keys.append(k)
                scanned.append(b)
            b.scanned = True

    @property
    def mix(self) -> list[Pod]:
        """The newest ``lookahead + 1`` arrivals of the last ``forecast_windows`` horizons, newest first (gangs
        left out): what new nodes will be filled with (one more than a type choice reads, so it can leave out
        the pod it chooses for). ``recent`` may reach back days for the forecast; the mix does not."""
        if self._mix is None:
            since = self.snap.now - self.cache.horizon * self.cfg.forecast_windows
            mix = (p for p in reversed(self.snap.recent) if p.arrival >= since and not p.gang)
            self._mix = list(itertools.islice(mix, self.cfg.lookahead + 1))
        return self._mix

    def evictable(self, max_moves: int) -> list[_Bin]:
        """The allocatable nodes of the snapshot running 1..``max_moves`` pods, all safe to evict: fewest pods
        first, then the cheapest, then snapshot order (what the snapshot says; :func:`_make_room` checks what
        this plan has put on them since)."""
        got = self._evictable.get(max_moves)
        if got is None:
            cands: list[tuple[int, float, int, _Bin]] = []
            for b in self.bins:  # the snapshot's nodes: a plan's new bins are never allocatable
                if b.kind != "ready":
                    continue
                bound = self.views[b.id].bound
                if bound and len(bound) <= max_moves and all(p.safe_to_evict for p in bound):
                    cands.append((len(bound), b.nt.price_per_hour, b.order, b))
            cands.sort(key=lambda c: c[:3])
            got = self._evictable[max_moves] = [c[3] for c in cands]
        return got

    def cheapest(self, pod: Pod, max_gpus: float = math.inf) -> float:
        """The lowest hourly price of a node type ``pod`` may use with at most ``max_gpus`` GPUs (infinite if
        none)."""
        key = (pod.shape, max_gpus)
        got = self.cache.cheapest.get(key)
        if got is None:
            ok = self.ok_types(pod)
            got = self.cache.cheapest[key] = min(
                (t.price_per_hour for t in self.snap.node_types if t.name in ok and t.gpu <= max_gpus),
                default=math.inf,
            )
        return got

    def ok_types(self, pod: Pod) -> frozenset[str]:
        got = self.cache.ok.get(pod.shape)
        if got is None:
            got = frozenset(nt.name for nt in self.snap.node_types if self.incompatible(nt, pod) is None)
            self.cache.ok[pod.shape] = got
        return got

    def incompatible(self, nt: NodeType, pod: Pod) -> str | None:
        key = (nt.name, pod.shape)
        try:
            return self.cache.why[key]
        except KeyError:
            why = self.cache.why[key] = why_incompatible(nt, pod)
            return why

    def best_bin(
        self,
        pod: Pod,
        kinds: tuple[str, ...],
        exclude: frozenset[str] = frozenset(),
        first_fit: bool = False,
        max_empty_gpus: float = math.inf,
        max_empty_price: float = math.inf,
    ) -> tuple[_Bin, Assignment] | None:
        """Best placement among bins of ``kinds`` (earlier kinds first); ``first_fit`` takes the first one of
        the first kind instead of scoring fragmentation (cheap, for forecast phantoms). A node with nothing on
        it, more than ``max_empty_gpus`` GPUs and a price over ``max_empty_price`` is passed over."""
        best: tuple[tuple[float, ...], _Bin, Assignment] | None = None
        ok_types = self.ok_types(pod)
        cpu, mem = pod.cpu_milli, pod.memory_mib
        share = pod.gpu_milli if pod.is_fractional else 0
        whole = 0 if share or not pod.wants_gpu else pod.num_gpu
        first: tuple[int, _Bin] | None = None
        # NOTE: with a headroom wait, a pod that must wait for a node takes the one that is up first (that is
        # what bounds its wait). Without one, fragmentation decides among in-flight nodes as among allocatable
        # ones: taking the soonest there too cost 0.3 % less on openb default but let 79 pods wait longer than a
        # minute instead of 74, nearer the p99 goal's 81 (docs/benchmarks.md).
        soonest = self.soonest
        gpu = pod.wants_gpu
        # kinds in order: a bin of an earlier kind always beats one of a later kind, so the first kind with a
        # bin that fits decides
        scored: set[tuple[object, ...]] | None = None
        scan = self._scan[gpu]
        for rank, kind in enumerate(kinds):
            for b in scan[kind][1]:
                cap = b.cap
                if cpu > cap.cpu:
                    break  # the rest have even less free CPU
                if mem > cap.mem:
                    continue
                devs = cap.devs
                if share and (not devs or max(devs) < share):
                    continue
                if whole and devs.count(GPU_MILLI) < whole:
                    continue
                if b.nt.name not in ok_types or b.id in exclude:
                    continue
                if not b.pods and b.nt.gpu > max_empty_gpus and b.nt.price_per_hour > max_empty_price:
                    continue
                if first_fit and rank == 0:
                    # the first in snapshot order, as a scan in that order would find
                    if first is None or b.order < first[0]:
                        first = (b.order, b)
                    continue
                up = 0.0
                if kind == "new":
                    # a new bin in the same state as one scored before scores the same but comes later in
                    # snapshot order (equal free CPU: the scan is in snapshot order), so it cannot win; new
                    # nodes of one type are mostly alike (an exploratory count: a 1,000-pod decision scored
                    # 25,363 bins in 420 states)
                    state = (b.nt.name, cap.cpu, cap.mem, tuple(devs), b.pods > 0)
                    if scored is None:
                        scored = {state}
                    elif state in scored:
                        continue
                    else:
                        scored.add(state)
                elif soonest and kind == "inflight":
                    up = self.views[b.id].available_at
                a = choose_devices(cap, pod)
                used = 1.0 - cap.cpu / b.nt.cpu_milli
                key = (
                    up,
                    fragmentation_cost(cap, pod, a),
                    0 if b.pods else 1,
                    -used,
                    b.order,
                )
                if best is None or key < best[0]:
                    best = (key, b, a)
            if first is not None:
                return first[1], choose_devices(first[1].cap, pod)
            if best is not None:
                return best[1], best[2]
        return None

    def choose_type(
        self,
        pod: Pod,
        queue: list[Pod],
        start: int,
        *,
        mix: bool = True,
        max_gpus: float = math.inf,
        max_price: float = math.inf,
    ) -> NodeType | str:
        """The node type serving most value per dollar, or the reason none can take ``pod``.

        The value is ``pod`` plus what fits of the queued pods after it and, with ``mix``, of the recent
        arrivals (a node outlives the queue: the arrival mix says what will fill it). Types with more than
        ``max_gpus`` GPUs and a price over ``max_price`` are left out.
        """
        ahead = [q for q in queue[start : start + self.cfg.lookahead] if not q.gang]
        full = tuple(
            n
            for n, c in self.count.items()
            if (t := self.types[n]).max_count is not None and c >= t.max_count
        )
        # without the mix the answer depends only on shapes and which types are at their limit: keep it across
        # decisions; with it, only within this one (the mix changes with every arrival)
        memo = self.type_memo if mix else self.cache.types
        key = (pod.shape, tuple(q.shape for q in ahead), mix, full, max_gpus, max_price)
        got = memo.get(key)
        if got is not None:
            return got
        shapes = _group_by_shape(ahead)
        if mix and len(ahead) < self.cfg.lookahead:
            shapes += _group_by_shape(
                [q for q in self.mix if q.name != pod.name][: self.cfg.lookahead - len(ahead)]
            )
        groups = [(q, k, self.ok_types(q), pod_value(q)) for q, k in shapes]
        refused: list[tuple[int, str, str]] = []  # (index, type, why): joined only when no type is left
        best: tuple[tuple[float, float, str], NodeType] | None = None
        own = pod_value(pod)
        # types in order of the most value per dollar they could serve: once that bound is below the best
        # found, no later type can win (the margin keeps float rounding from ending the search early)
        for bound, i, nt in self.cache.by_value_bound:
            if best is not None and bound < -best[0][0] * (1 - 1e-9):
                break
            why = self.incompatible(nt, pod)
            if why is not None:
                refused.append((i, nt.name, why))
                continue
            if nt.max_count is not None and self.count[nt.name] >= nt.max_count:
                refused.append((i, nt.name, f"max_count {nt.max_count} reached"))
                continue
            if nt.gpu > max_gpus and nt.price_per_hour > max_price:
                refused.append(
                    (i, nt.name, f"more than {max_gpus:g} GPUs and dearer than a type within that")
                )
                continue
            cap = Capacity.of(nt)
            take(cap, pod, choose_devices(cap, pod))
            value = own
            for q, k, q_ok, q_value in groups:
                if nt.name in q_ok:
                    for _ in range(_fill(cap, q, k)):  # added one by one: the same rounding as pod by pod
                        value += q_value
            eff = value / max(nt.price_per_hour, 1e-9)
            rank = (-eff, nt.price_per_hour, nt.name)
            if best is None or rank < best[0]:
                best = (rank, nt)
        result: NodeType | str
        if best is not None:
            result = best[1]
        else:
            result = "; ".join(f"{name}: {why}" for _, name, why in sorted(refused)) or "no node types"
        if len(memo) > self.cache.limit:
            memo.clear()
        memo[key] = result
        return result

    def place(self, b: _Bin, pod: Pod, a: Assignment) -> None:
        """Put ``pod`` on ``b`` (devices ``a``), keeping the scan order."""
        self._leave(b)
        take(b.cap, pod, a)
        b.pods += 1
        self._enter(b)

    def empty(self, b: _Bin) -> None:
        """Give ``b`` its whole capacity back: every pod on it has moved elsewhere in this plan."""
        self._leave(b)
        b.cap = Capacity.of(b.nt)
        b.pods = 0
        self._enter(b)

    def withdraw(self, ids: set[str]) -> None:
        """Leave no room on the bins ``ids`` for the rest of this plan (their nodes are being drained)."""
        for b in self.bins:  # bounded by the snapshot's nodes and this plan's new ones
            if b.id in ids:
                self._leave(b)
                b.cap = Capacity(0, 0, [0] * len(b.cap.devs))

    def undo(self, done: list[tuple[Pod, _Bin, Assignment]], opened: list[_Bin]) -> None:
        """Take back placements and close the bins opened for them, newest first."""
        for pod, b, a in reversed(done):
            self._leave(b)
            give(b.cap, pod, a)
            b.pods -= 1
            self._enter(b)
        for b in reversed(opened):
            self.close_bin(b)

    def _enter(self, b: _Bin) -> None:
        if b.cap.cpu >= self.floor_cpu and b.cap.mem >= self.floor_mem:
            key = (-b.cap.cpu, b.order)
            keys, scanned = self._scan[0][b.kind]
            i = bisect.bisect_left(keys, key)
            keys.insert(i, key)
            scanned.insert(i, b)
            if any(b.cap.devs):
                keys, scanned = self._scan[1][b.kind]
                i = bisect.bisect_left(keys, key)
                keys.insert(i, key)
                scanned.insert(i, b)
            b.scanned = True

    def _leave(self, b: _Bin) -> None:
        if b.scanned:
            key = (-b.cap.cpu, b.order)
            keys, scanned = self._scan[0][b.kind]
            i = bisect.bisect_left(keys, key)
            del keys[i]
            del scanned[i]
            if any(b.cap.devs):
                keys, scanned = self._scan[1][b.kind]
                i = bisect.bisect_left(keys, key)
                del keys[i]
                del scanned[i]
            b.scanned = False

    def open_bin(self, nt: NodeType) -> _Bin:
        b = _Bin(f"n{self.next_id}", nt, Capacity.of(nt), "new", len(self.snap.nodes) + len(self.new_bins))
        self.next_id += 1
        self.count[nt.name] += 1
        self.bins.append(b)
        self.new_bins.append(b)
        self._enter(b)
        return b

    def close_bin(self, b: _Bin) -> None:
        self._leave(b)
        self.bins.remove(b)
        self.new_bins.remove(b)
        self.count[b.nt.name] -= 1
        self.next_id -= 1


def _fill(cap: Capacity, pod: Pod, k: int) -> int:
    """Place up to ``k`` copies of ``pod`` on ``cap`` one after another, as long as one fits; returns how many.

    Copies of a pod without a GPU share go in one step: each takes the same CPU, memory and whole free
    devices (the first free ones, as :func:`choose_devices` picks them), so the count is the smallest quotient.
    """
    if pod.is_fractional:
        n = 0
        while n < k and fits(cap, pod):  # bounded by k
            take(cap, pod, choose_devices(cap, pod))
            n += 1
        return n
    n = k
    if pod.cpu_milli > 0:
        n = min(n, cap.cpu // pod.cpu_milli)
    if pod.memory_mib > 0:
        n = min(n, cap.mem // pod.memory_mib)
    whole = pod.num_gpu if pod.wants_gpu else 0
    if whole:
        n = min(n, cap.devs.count(GPU_MILLI) // whole)
    if n <= 0:
        return 0
    cap.cpu -= n * pod.cpu_milli
    cap.mem -= n * pod.memory_mib
    left = n * whole
    for i, d in enumerate(cap.devs):  # bounded by the node's devices
        if not left:
            break
        if d == GPU_MILLI:
            cap.devs[i] = 0
            left -= 1
    return n


def _group_by_shape(pods: list[Pod]) -> list[tuple[Pod, int]]:
    """Equal-shaped pods as (first of them, how many), in order of first appearance."""
    first: dict[PodShape, Pod] = {}
    count: dict[PodShape, int] = {}
    for p in pods:
        first.setdefault(p.shape, p)
        count[p.shape] = count.get(p.shape, 0) + 1
    return [(first[k], count[k]) for k in first]


def _ever_fits(w: _Work, pod: Pod) -> str | None:
    """None if some node type can run ``pod``, else why none can."""
    if w.ok_types(pod):
        return None
    reasons = [
        f"{nt.name}: {why}" for nt in w.snap.node_types if (why := w.incompatible(nt, pod)) is not None
    ]
    return "; ".join(reasons) or "no node types"


def _place_unit(
    w: _Work, unit: list[Pod], queue: list[Pod], start: int, *, allow_new: bool, phantom: bool
) -> list[tuple[Pod, _Bin]] | str:
    """Place every pod of ``unit`` or none (rolled back); returns placements or why not."""
    done: list[tuple[Pod, _Bin, Assignment]] = []
    opened: list[_Bin] = []
    kinds = ("ready", "inflight", "new")
    for pod in unit:
        # a node kept or launched for nothing but a phantom pinned to GPU models is at most this large, unless
        # it costs no more than a type that is not (max_price -inf: no type is)
        max_gpus = max_price = math.inf
        if phantom and pod.gpu_models:
            max_gpus = w.cfg.pinned_headroom_node_ratio * math.ceil(pod.gpu_total_milli / GPU_MILLI)
            max_price = w.cheapest(pod, max_gpus)
            if max_price == math.inf:
                max_price = -math.inf
        found = w.best_bin(pod, kinds, first_fit=phantom, max_empty_gpus=max_gpus, max_empty_price=max_price)
        if (
            (found is None or found[0].kind != "ready")
            and not phantom
            and not pod.gang
            and w.cfg.make_room_moves
        ):
            found = (
                _make_room(w, pod, w.cfg.make_room_moves) or found
            )  # start now rather than wait for a node
        why: str
        if found is None and allow_new and max_price == -math.inf:
            # no type is small enough: say so without weighing every type against the arrival mix
            why = f"no node type of at most {max_gpus:g} GPUs"
        elif found is None and allow_new:
            choice = w.choose_type(pod, queue, start, max_gpus=max_gpus, max_price=max_price)
            if isinstance(choice, NodeType):
                b = w.open_bin(choice)
                opened.append(b)
                found = (b, choose_devices(b.cap, pod))
            else:
                why = choice
        elif found is None:
            why = "no free capacity"
        if found is None:
            w.undo(done, opened)
            return why
        b, a = found
        w.place(b, pod, a)
        done.append((pod, b, a))
    for pod, b, _ in done:
        if phantom:
            b.phantom += 1
        else:
            b.real.append(pod.name)
    return [(p, b) for p, b, _ in done]


def _make_room(w: _Work, pod: Pod, max_moves: int) -> tuple[_Bin, Assignment] | None:
    """Free an allocatable node for ``pod`` by moving every pod on it onto other allocatable nodes now.

    Candidates are allocatable nodes of a type ``pod`` may use, running 1..``max_moves`` pods that are all safe
    to evict and nothing else promised to them in this plan; fewest pods first, then the cheapest node, then
    snapshot order. The first whose pods all find room elsewhere (placed as pending pods are, on allocatable
    nodes only, so no moved pod waits) is emptied, its moves recorded in ``w.room_moves``. Returns the node and
    the devices ``pod`` would take there (the caller places it), or None (nothing changed).

    NOTE: written for openb's 8-GPU tasks (42 of the 77 pods that waited over a minute on openb default), it does
    nothing for them: when one arrives, each 8-GPU node runs another 8-GPU task or more than four pods. It acts a
    few times per replay, for 4-GPU tasks, and across 16 seeds of boot delays drawn within ±10 % it made Capstan
    cheaper on 13 and turned all three of issue 5's goals at a 5-minute boot from 8 seeds of 16 into 16 of 16,
    measured before the repack changes of commit b50e3b0 and against the oracle of that code
    (docs/benchmarks.md, "Making room for a pending pod"; the seeds: docs/benchmarks-history.md). The pods moved off the
    freed node take free room, often the headroom's, which the same plan replaces.
    """
    ok = w.ok_types(pod)
    cands = [
        b
        for b in w.evictable(max_moves)
        if b.nt.name in ok and not b.real and not b.phantom and b.pods == len(w.views[b.id].bound)
    ]
    for b in cands:  # bounded by the snapshot's nodes
        exclude = frozenset((b.id,))
        done: list[tuple[Pod, _Bin, Assignment]] = []
        for p in sorted(w.views[b.id].bound, key=_queue_key):
            found = w.best_bin(p, ("ready",), exclude=exclude)
            if found is None:
                w.undo(done, [])
                break
            w.place(found[0], p, found[1])
            done.append((p, found[0], found[1]))
        else:
            w.empty(b)
            for p, d, _ in done:
                d.real.append(p.name)
                w.room_moves.append((p, d))
            return b, choose_devices(b.cap, pod)
    return None


def _headroom_pods(pods: tuple[Pod, ...], cfg: PlannerConfig) -> list[Pod]:
    """The phantoms headroom is held for: the forecast's pods, with each pod of more than
    ``headroom_split_gpus`` whole GPUs held as that many one-GPU pods (its CPU and memory split alike).

    NOTE: pending time is counted per pod and pods of 5-8 GPUs are few, so keeping a whole 8-GPU machine
    free for one costs much and protects little; as single GPUs the same capacity sits in the free devices
    of busy nodes and on smaller nodes, where the many small arrivals use it. A big pod that then finds no
    room waits for a node like any pod beyond the forecast. On openb this cut cost by a tenth at the same p99
    (docs/benchmarks.md); 1, 2 and 4 were tried as the threshold, 4 did best.
    """
    split = cfg.headroom_split_gpus
    if split <= 0:
        return list(pods)
    out: list[Pod] = []
    for p in pods:
        if p.num_gpu <= split or p.is_fractional:
            out.append(p)
            continue
        n = p.num_gpu
        one = replace(  # one whole device each (a pod of several GPUs takes whole devices whatever its gpu_milli)
            p,
            num_gpu=1,
            gpu_milli=GPU_MILLI,
            cpu_milli=max(1, p.cpu_milli // n),
            memory_mib=max(1, p.memory_mib // n),
        )
        out.extend(replace(one, name=f"{p.name}#{i}") for i in range(n))
    return out


def _gpus_free(b: _Bin) -> float:
    return b.cap.free_gpu_milli() / 1000


def _repack_waste(w: _Work, nt: NodeType, gpus_free: float, cpu_free: int) -> float | None:
    """What a node of type ``nt`` with this much free costs an hour beyond its allocated GPUs at the lowest price
    per GPU of any type (GPU nodes), or beyond its allocated CPU share of its price (CPU nodes); None when that
    does not make it a repack candidate (no waste, or a CPU node at least ``consolidation_threshold`` used).

    NOTE: with only nodes that had free GPUs as candidates, a full node of dear GPUs was never repacked: on
    openb default two pods that ran for about 90 days held a 2-GPU P100 node (2.99 a GPU an hour against the T4
    node's 1.50) for 89 days. With these candidates too, Capstan cost 9.9 % less on openb default at 5
    minutes and 2.7 % less on gpuspec20, with the repack type chosen with the arrival mix
    (docs/benchmarks-history.md, "GPU capacity")."""
    if nt.gpu:
        waste = nt.price_per_hour - (nt.gpu - gpus_free) * w.cache.gpu_price
        return waste if waste > 1e-6 else None
    used = 1.0 - cpu_free / nt.cpu_milli
    return nt.price_per_hour * (1.0 - used) if used < w.cfg.consolidation_threshold else None


@dataclass
class _Repack:
    """One repack of a group of nodes: where each of their pods goes, and what it saves per hour."""

    nodes: list[_Bin]
    moves: list[tuple[Pod, _Bin]]
    saving: float
    waits: bool
    """Some destination is not allocatable yet (in flight or new): nothing is drained until it is."""


def _try_repack(w: _Work, group: list[_Bin], cfg: PlannerConfig, *, commit: bool = False) -> _Repack | None:
    """Pack the pods of ``group`` onto other nodes (busy, empty, in flight or new); return it if it pays.

    It pays when the hourly price of the nodes it empties exceeds the price of the nodes it brings into use by
    more than ``repack_min_saving`` (a share) and it leaves fewer GPUs unallocated on the nodes it empties and the
    nodes it fills (a full node of dear GPUs emptied into free room elsewhere counts). Unless ``commit``, every
    change is rolled back; packing is deterministic, so committing the same group later gives the same result.

    A new node's type is chosen as for pending pods, with the arrival mix (:meth:`_Work.choose_type`): the node
    outlives the group's pods, and later arrivals fill what they leave.

    NOTE: chosen for the group's pods alone (the rule until 2026-12-01), a repack took the cheapest
    type those pods fit, often a 2-GPU P100 node a cent an hour cheaper than a 4-GPU T4 one, and the next
    arrivals found no room: on openb default at 5 minutes (this change alone) Capstan cost 1.1 % more and moved 5,092 pods
    instead of 812, and the oracle, which packs the same way, cost 11 % more (docs/benchmarks-history.md).
    """
    exclude = frozenset(b.id for b in group)
    pods = sorted((p for b in group for p in w.views[b.id].bound), key=_queue_key)
    done: list[tuple[Pod, _Bin, Assignment]] = []
    opened: list[_Bin] = []
    woken: list[_Bin] = []
    before = sum(b.nt.price_per_hour for b in group)
    # the price of the nodes brought into use only grows: once it leaves no saving, stop packing (the final
    # test below would refuse it; the margin keeps float rounding from cutting short a repack that pays)
    hopeless = before - cfg.repack_min_saving * before + 1e-6
    spent = 0.0
    ok = True
    free_at_first: dict[str, float] = {}  # free GPUs of each destination before this repack placed anything
    for i, pod in enumerate(pods):
        found = w.best_bin(pod, ("ready", "inflight", "new"), exclude=exclude)
        if found is None:
            if spent + w.cheapest(pod) >= hopeless:
                ok = False
                break
            choice = w.choose_type(pod, pods, i + 1)
            if not isinstance(choice, NodeType):
                ok = False
                break
            b = w.open_bin(choice)
            opened.append(b)
            spent += choice.price_per_hour
            found = (b, choose_devices(b.cap, pod))
        b, a = found
        if b.pods == 0 and b.kind != "new":
            woken.append(b)
            spent += b.nt.price_per_hour
        free_at_first.setdefault(b.id, _gpus_free(b))
        w.place(b, pod, a)
        done.append((pod, b, a))
        if spent >= hopeless:
            ok = False
            break
    result: _Repack | None = None
    if ok:
        brought = woken + opened
        after = sum(b.nt.price_per_hour for b in brought)
        # unallocated GPUs of the nodes it empties and of every node it fills, before and after
        dests = {b.id: b for _, b, _ in done}
        free_before = sum(_gpus_free(b) for b in group) + sum(free_at_first.values())
        free_after = sum(_gpus_free(b) for b in dests.values())
        if before - after > cfg.repack_min_saving * before and free_after < free_before - 1e-9:
            waits = any(b.kind != "ready" for _, b, _ in done)
            result = _Repack(list(group), [(p, b) for p, b, _ in done], before - after, waits)
    if not (commit and result is not None):
        w.undo(done, opened)
    return result


def _repack(w: _Work, cfg: PlannerConfig) -> tuple[list[Drain], list[Nomination], set[str]]:
    """Replace wasteful nodes: empty those whose long-running pods fit elsewhere or on fewer, cheaper nodes.

    Candidates are allocatable nodes all of whose pods have run at least ``repack_min_age_s`` (a pod that has
    run long is likely to run on) and are safe to evict (:attr:`Pod.safe_to_evict`): GPU nodes that cost more
    than their allocated GPUs would at the lowest price per GPU of any type (free GPUs, or GPUs dearer than
    they need be, :func:`_repack_waste`), CPU nodes under ``consolidation_threshold``; the most waste first. Groups
    of the first 1..``repack_group``
    candidates are tried and the largest saving wins. If all its destinations are allocatable, the group is
    drained now and its pods nominated to them. If it needs new nodes they are launched (a later decision, when
    they are up, finds the same repack with allocatable destinations and drains); if it needs nodes already in
    flight, it waits for them. Returns the drains, the nominations for the evicted pods and the ids of the
    nodes the repack keeps (so they are neither drained as empty nor lent to forecast headroom).
    """
    now = w.snap.now
    wasteful: list[tuple[float, int, _Bin]] = []
    for b in w.bins:  # bounded by the snapshot's nodes
        if not (
            b.kind == "ready"
            and b.pods
            and not b.real
            and b.pods - b.phantom == len(w.views[b.id].bound)
            and all(now - p.arrival >= cfg.repack_min_age_s and p.safe_to_evict for p in w.views[b.id].bound)
        ):
            continue
        if b.phantom:
            # headroom holds room here; with it given back (the view's free room: nothing else was placed on
            # this node in this plan), would it be a candidate?
            view = w.views[b.id]
            if view.bound and not w.passed_over:
                gpus = sum(view.devs) / GPU_MILLI
                w.passed_over = _repack_waste(w, b.nt, gpus, view.cpu) is not None
            continue
        waste = _repack_waste(w, b.nt, _gpus_free(b), b.cap.cpu)
        if waste is not None:
            wasteful.append((-waste, b.order, b))
    wasteful.sort(key=lambda c: c[:2])
    cands = [b for _, _, b in wasteful[: cfg.consolidation_candidates]]
    if not cands:
        return [], [], set()
    # the trial packings depend only on the candidates and every bin's free resources: skip them when those
    # are exactly as they were when no repack paid
    key = (
        tuple(b.id for b in cands),
        tuple((b.id, b.nt.name, b.kind, b.cap.cpu, b.cap.mem, tuple(b.cap.devs), b.pods) for b in w.bins),
    )
    if w.cache.no_repack.get(w.repack_first) == key:
        return [], [], set()
    best: tuple[float, int] | None = None
    for size in range(1, min(cfg.repack_group, len(cands)) + 1):
        got = _try_repack(w, cands[:size], cfg)
        if got is not None and (best is None or got.saving > best[0] + 1e-9):
            best = (got.saving, size)
    if best is None:
        w.cache.no_repack[w.repack_first] = key
        return [], [], set()
    chosen = _try_repack(w, cands[: best[1]], cfg, commit=True)
    assert chosen is not None
    kept = {b.id for _, b in chosen.moves}
    if chosen.waits:
        return [], [], kept
    reason = f"repack: its pods fit on other nodes, saving {chosen.saving:.2f}/h"
    drains = [Drain(b.id, now, reason, K8S_CONSOLIDATE) for b in chosen.nodes]
    moves = [Nomination(p.name, b.id, K8S_MOVE.format(node=b.id)) for p, b in chosen.moves]
    return drains, moves, kept


def _launches(w: _Work, pod_bins: set[str], kept: set[str]) -> tuple[Launch, ...]:
    return tuple(
        Launch(
            b.id,
            b.nt.name,
            tuple(b.real),
            "pods" if b.id in pod_bins else "repack" if b.id in kept else "headroom",
            K8S_LAUNCH.format(label=PLANNED_NODE_LABEL, node=b.id),
        )
        for b in w.new_bins
    )


def plan(
    snapshot: Snapshot,
    config: PlannerConfig | None = None,
    cache: PlanCache | None = None,
    *,
    scope: Scope = "full",
) -> Plan:
    """Decide launches, nominations, drains and headroom for ``snapshot`` (pure; deterministic).

    ``scope`` says how much to decide. ``place``: pending pods (nominations and the launches they need) and
    headroom launches to replace what they used, the fast path a controller runs whenever pods turn pending.
    ``review``: also which nodes are held as headroom and drains of empty nodes. ``full``: also repacks
    (moving long-running pods). A controller runs the wider scopes on intervals,
    as Karpenter runs its disruption loop; a narrower plan leaves what it did not decide as it is.

    A full plan places headroom before it searches for repacks, so the room headroom holds is not packed
    away. With ``repack_both_orders``, when that plan's repack search passed over a candidate because
    headroom held room on it, the plan is also made with the repack search first, and the one whose
    launches less its drains cost less an hour is kept.

    NOTE: a second plan also for every first plan that launched nodes cut cost more on openb default but
    raised it on gpuspec20, whose pinned headroom launches often: there repacks first packed pods into the free
    GPUs of G2 nodes and idle GPU-hours rose by a fifth (docs/benchmarks.md, "Repacking in both orders").
    """
    cfg = config or PlannerConfig()
    if cache is None:
        cache = PlanCache(snapshot.node_types)
    first, passed_over = _plan_once(snapshot, cfg, cache, scope, repack_first=False)
    both = scope == "full" and cfg.repack_both_orders and cfg.consolidate and cfg.headroom
    if not both or not passed_over:
        return first
    cache.replans += 1
    second, _ = _plan_once(snapshot, cfg, cache, scope, repack_first=True)
    type_of = {n.id: n.type for n in snapshot.nodes}
    by_name = cache.by_name

    def hourly(p: Plan) -> float:
        """What the plan's launches cost an hour, less what its drains save."""
        up = sum(by_name[launch.type].price_per_hour for launch in p.launches)
        return up - sum(by_name[type_of[d.node]].price_per_hour for d in p.drains)

    return second if hourly(second) < hourly(first) - 1e-9 else first


def _plan_once(
    snapshot: Snapshot, cfg: PlannerConfig, cache: PlanCache, scope: Scope, *, repack_first: bool
) -> tuple[Plan, bool]:
    """One plan (see :func:`plan`), the repack search after headroom or, with ``repack_first``, before it;
    also whether the repack search passed over a candidate because headroom held room on it."""
    w = _Work(snapshot, cfg, cache)
    w.repack_first = repack_first
    promised = {pod: node for pod, node in snapshot.promised if node in w.live}

    unplaceable: list[tuple[str, str]] = []
    waiting: list[str] = []
    queue = sorted((p for p in snapshot.pending if p.name not in promised), key=_queue_key)
    gangs: dict[str, list[Pod]] = {}
    for p in queue:
        if p.gang:
            gangs.setdefault(p.gang, []).append(p)
    seen_gangs: set[str] = set()
    nominations: list[Nomination] = []
    for i, pod in enumerate(queue):
        if pod.gang:
            if pod.gang in seen_gangs:
                continue
            seen_gangs.add(pod.gang)
            unit = gangs[pod.gang]
            if len(unit) < pod.gang_size:
                waiting.extend(p.name for p in unit)
                continue
        else:
            unit = [pod]
        never = [(p.name, why) for p in unit if (why := _ever_fits(w, p)) is not None]
        if never:
            reasons = dict(never)
            unplaceable.extend((name, f"fits no node type ({why})") for name, why in never)
            waiting.extend(p.name for p in unit if p.name not in reasons)
            continue
        placed = _place_unit(w, unit, queue, i + 1, allow_new=True, phantom=False)
        if isinstance(placed, str):
            waiting.extend(p.name for p in unit)
            continue
        for p, b in placed:
            if b.kind == "ready":
                nominations.append(Nomination(p.name, b.id, K8S_NOMINATE_EXISTING.format(node=b.id)))
            elif b.kind == "inflight":
                nominations.append(
                    Nomination(
                        p.name, b.id, K8S_NOMINATE_INFLIGHT.format(label=PLANNED_NODE_LABEL, node=b.id)
                    )
                )

    pod_bins = {b.id for b in w.new_bins}
    room_moves = tuple(Nomination(p.name, d.id, K8S_MOVE.format(node=d.id)) for p, d in w.room_moves)
    headroom_new = 0
    recheck: list[float] = []
    early: tuple[list[Drain], list[Nomination], set[str]] | None = None
    if repack_first and cfg.consolidate and scope == "full":
        early = _repack(w, cfg)
        w.withdraw({d.node for d in early[0]})  # headroom may not count on room that is being drained
    if cfg.headroom:
        fc = w.fc
        if fc.changes_at is not None:
            recheck.append(fc.changes_at)
        phantoms = w.phantoms
        last: tuple[PodShape, _Bin] | None = None
        for j, ph in enumerate(phantoms):
            if last is not None and last[0] == ph.shape and fits(last[1].cap, ph):
                # the same shape as the phantom before, which took the first ready bin that fitted: bins
                # before that one did not fit it and have not changed, so it is still the first fit
                w.place(last[1], ph, choose_devices(last[1].cap, ph))
                last[1].phantom += 1
                continue
            allow = headroom_new < cfg.max_headroom_nodes
            before = len(w.new_bins)
            placed = _place_unit(w, [ph], phantoms, j + 1, allow_new=allow, phantom=True)
            headroom_new += len(w.new_bins) - before
            last = (
                (ph.shape, placed[0][1])
                if not isinstance(placed, str) and placed[0][1].kind == "ready"
                else None
            )

    if scope == "place":
        return Plan(
            launches=_launches(w, pod_bins, set()),
            nominations=tuple(nominations),
            room_moves=room_moves,
            unplaceable=tuple(unplaceable),
            waiting=tuple(waiting),
            scope=scope,
        ), False
    headroom: list[str] = []
    drains: list[Drain] = []
    moves: list[Nomination] = []
    kept: set[str] = set()
    if early is not None:
        drains, moves, kept = early
    elif cfg.consolidate and scope == "full":
        drains, moves, kept = _repack(w, cfg)
    drained = {d.node for d in drains}
    for b in w.bins:
        if b.id in drained:
            continue
        if b.kind == "new":
            continue
        if b.pods - b.phantom > 0 or b.id in kept:
            continue
        view = w.views[b.id]
        if b.phantom:
            headroom.append(b.id)
        elif b.kind == "inflight":
            continue  # let it come up: cancelling and relaunching churns; it is drained once idle if unused
        elif view.purpose == "repack" and scope != "full":
            continue  # only a full plan (which repacks) knows whether it still wants this node
        elif view.idle_since is not None and snapshot.now < view.idle_since + cfg.min_idle_s:
            recheck.append(view.idle_since + cfg.min_idle_s)
            continue
        elif cfg.drain:
            drains.append(
                Drain(b.id, snapshot.now, "empty and not needed by the forecast within its boot delay")
            )
    result = Plan(
        launches=_launches(w, pod_bins, kept),
        moves=tuple(moves),
        room_moves=room_moves,
        nominations=tuple(nominations),
        drains=tuple(drains),
        headroom=tuple(headroom),
        unplaceable=tuple(unplaceable),
        waiting=tuple(waiting),
        recheck_at=min(recheck, default=None),
        scope=scope,
    )
    return result, w.passed_over
