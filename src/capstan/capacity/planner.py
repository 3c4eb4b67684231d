"""Capstan's capacity planner: one pure function from a cluster snapshot to a plan.

``plan(snapshot, config)`` decides placement and provisioning together, so the scheduler and the autoscaler stop
disagreeing:

* every pending pod is packed onto an allocatable node, a node already in flight (no duplicate node for a pod
  already promised to a booting node) or a node launched by this plan, preferring the placement that strands the
  fewest GPU thousandths (FGD-style) and, for new nodes, the type that serves the most queued demand per dollar
  under the pods' GPU-model, selector and toleration constraints;
* gangs are provisioned atomically: all members get a place or none does (incomplete gangs wait);
* headroom comes from a forecast: the arrivals of the busiest recent window as long as one boot delay (a
  quantile over the last few windows) are replayed as phantom pods; capacity they use is held, nodes they still
  lack are launched;
* empty nodes that neither real nor phantom pods use are drained now: the forecast says they will not be needed
  within their boot delay.

Each decision carries the Kubernetes mechanism that would carry it out (``k8s``), so the live controller (which
calls this same function) only has to apply them. There is no I/O here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from capstan.capacity.model import NodeState, NodeType, Pod
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
K8S_CONSOLIDATE = (
    "taint capstan.io/draining:NoSchedule, evict its pods through the Eviction API (PodDisruptionBudgets hold), "
    "re-place them by nodeAffinity on the next decision, then delete the Node/NodeClaim"
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
    forecast_windows: int = 6
    forecast_quantile: float = 0.9
    headroom: bool = True
    max_headroom_nodes: int = 8
    max_phantoms: int = 32
    """At most this many forecast pods (largest first) are replayed for headroom: bounds the decision's cost."""
    lookahead: int = 48
    drain: bool = True
    consolidate: bool = True
    consolidation_threshold: float = 0.5
    """Only nodes with less than this share of their GPUs (CPU for CPU nodes) allocated are emptied."""
    max_consolidations: int = 1
    consolidation_candidates: int = 16
    min_idle_s: float = 60.0
    """An empty node is drained only after it has been empty this long (damps launch/drain flapping)."""


@dataclass(frozen=True)
class Launch:
    node: str
    type: str
    pods: tuple[str, ...]
    purpose: Literal["pods", "headroom"]
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
    headroom: tuple[str, ...] = ()
    """Existing or in-flight nodes held empty for forecast demand."""
    unplaceable: tuple[tuple[str, str], ...] = ()
    """(pod, reason) for pods no node type can ever run."""
    waiting: tuple[str, ...] = ()
    """Pods left pending on purpose: incomplete gangs, or node-type limits reached."""
    headroom_k8s: str = K8S_HEADROOM
    recheck_at: float | None = None
    """When this plan may change with no new event (an empty node's idle time runs out)."""


@dataclass(slots=True)
class _Bin:
    id: str
    nt: NodeType
    cap: Capacity
    kind: Literal["ready", "inflight", "new"]
    order: int
    pods: int = 0
    real: list[str] = field(default_factory=list)
    phantom: int = 0


def pod_value(pod: Pod) -> float:
    """A type-independent price of what the pod uses, so node types can be compared by value per dollar."""
    return (
        pod.gpu_total_milli / 1000 * DEFAULT_GPU_PRICE
        + pod.cpu_milli / 1000 * CPU_PRICE_PER_CORE_HOUR
        + pod.memory_mib / 1024 * MEMORY_PRICE_PER_GIB_HOUR
    )


def _queue_key(pod: Pod) -> tuple[int, int, int, int, float, str]:
    return (-pod.priority, -pod.gang_size, -pod.gpu_total_milli, -pod.cpu_milli, pod.arrival, pod.name)


class PlanCache:
    """Memo of pure per-pod facts (which node types a pod may use, and why not) kept between decisions.

    It never changes a plan, only how fast it is made; it assumes a pod name always means the same pod spec
    and resets itself when the node-type tuple changes or it grows past ``limit`` entries.
    """

    def __init__(self, node_types: tuple[NodeType, ...] = (), limit: int = 2_000_000) -> None:
        self.node_types = node_types
        self.limit = limit
        self.ok: dict[str, frozenset[str]] = {}
        self.why: dict[tuple[str, str], str | None] = {}

    def reset(self, node_types: tuple[NodeType, ...]) -> PlanCache:
        self.node_types = node_types
        self.ok.clear()
        self.why.clear()
        return self


class _Work:
    """The mutable scratch state of one ``plan`` call (never escapes it)."""

    def __init__(self, snap: Snapshot, cfg: PlannerConfig, cache: PlanCache | None) -> None:
        self.snap = snap
        self.cfg = cfg
        self.types = {t.name: t for t in snap.node_types}
        if cache is None or cache.node_types is not snap.node_types or len(cache.why) > cache.limit:
            cache = PlanCache(snap.node_types) if cache is None else cache.reset(snap.node_types)
        self.cache = cache
        self.count: dict[str, int] = {t.name: 0 for t in snap.node_types}
        self.bins: list[_Bin] = []
        self.new_bins: list[_Bin] = []
        self.views: dict[str, NodeView] = {}
        self.next_id = snap.next_id
        for i, n in enumerate(snap.nodes):
            nt = self.types.get(n.type)
            if nt is None or n.state in (NodeState.DRAINING, NodeState.GONE):
                continue
            self.count[nt.name] += 1
            ready = n.state == NodeState.GPU_ALLOCATABLE or (n.state == NodeState.READY and nt.gpu == 0)
            kind: Literal["ready", "inflight"] = "ready" if ready else "inflight"
            self.bins.append(_Bin(n.id, nt, Capacity(n.cpu, n.mem, list(n.devs)), kind, i, n.pods))
            self.views[n.id] = n

    def ok_types(self, pod: Pod) -> frozenset[str]:
        got = self.cache.ok.get(pod.name)
        if got is None:
            got = frozenset(nt.name for nt in self.snap.node_types if self.incompatible(nt, pod) is None)
            self.cache.ok[pod.name] = got
        return got

    def incompatible(self, nt: NodeType, pod: Pod) -> str | None:
        key = (nt.name, pod.name)
        if key not in self.cache.why:
            self.cache.why[key] = why_incompatible(nt, pod)
        return self.cache.why[key]

    def best_bin(
        self,
        pod: Pod,
        kinds: tuple[str, ...],
        exclude: frozenset[str] = frozenset(),
        busy_only: bool = False,
        first_fit: bool = False,
    ) -> tuple[_Bin, Assignment] | None:
        """Best placement among bins of ``kinds`` (earlier kinds first); ``first_fit`` takes the first one of
        the first kind instead of scoring fragmentation (cheap, for forecast phantoms)."""
        best: tuple[tuple[float, ...], _Bin, Assignment] | None = None
        ok_types = self.ok_types(pod)
        for b in self.bins:
            if b.kind not in kinds or b.nt.name not in ok_types or not fits(b.cap, pod):
                continue
            if (busy_only and not b.pods) or b.id in exclude:
                continue
            if first_fit and b.kind == kinds[0]:
                return b, choose_devices(b.cap, pod)
            a = choose_devices(b.cap, pod)
            kind_rank = kinds.index(b.kind)
            used = 1.0 - b.cap.cpu / b.nt.cpu_milli
            key = (kind_rank, fragmentation_cost(b.cap, pod, a), 0 if b.pods else 1, -used, b.order)
            if best is None or key < best[0]:
                best = (key, b, a)
        return (best[1], best[2]) if best else None

    def choose_type(self, pod: Pod, queue: list[Pod], start: int) -> NodeType | str:
        """The node type serving most queued value per dollar, or the reason none can take ``pod``."""
        reasons: list[str] = []
        best: tuple[tuple[float, float, str], NodeType] | None = None
        ahead = [q for q in queue[start : start + self.cfg.lookahead] if not q.gang]
        for nt in self.snap.node_types:
            why = self.incompatible(nt, pod)
            if why is not None:
                reasons.append(f"{nt.name}: {why}")
                continue
            if nt.max_count is not None and self.count[nt.name] >= nt.max_count:
                reasons.append(f"{nt.name}: max_count {nt.max_count} reached")
                continue
            cap = Capacity.of(nt)
            take(cap, pod, choose_devices(cap, pod))
            value = pod_value(pod)
            for q in ahead:
                if fits(cap, q) and self.incompatible(nt, q) is None:
                    take(cap, q, choose_devices(cap, q))
                    value += pod_value(q)
            eff = value / max(nt.price_per_hour, 1e-9)
            key = (-eff, nt.price_per_hour, nt.name)
            if best is None or key < best[0]:
                best = (key, nt)
        if best is None:
            return "; ".join(reasons) or "no node types"
        return best[1]

    def open_bin(self, nt: NodeType) -> _Bin:
        b = _Bin(f"n{self.next_id}", nt, Capacity.of(nt), "new", len(self.snap.nodes) + len(self.new_bins))
        self.next_id += 1
        self.count[nt.name] += 1
        self.bins.append(b)
        self.new_bins.append(b)
        return b

    def close_bin(self, b: _Bin) -> None:
        self.bins.remove(b)
        self.new_bins.remove(b)
        self.count[b.nt.name] -= 1
        self.next_id -= 1


def _ever_fits(w: _Work, pod: Pod) -> str | None:
    reasons = [
        f"{nt.name}: {why}" for nt in w.snap.node_types if (why := w.incompatible(nt, pod)) is not None
    ]
    return None if len(reasons) < len(w.snap.node_types) else ("; ".join(reasons) or "no node types")


def _place_unit(
    w: _Work, unit: list[Pod], queue: list[Pod], start: int, *, allow_new: bool, phantom: bool
) -> list[tuple[Pod, _Bin]] | str:
    """Place every pod of ``unit`` or none (rolled back); returns placements or why not."""
    done: list[tuple[Pod, _Bin, Assignment]] = []
    opened: list[_Bin] = []
    kinds = ("ready", "inflight", "new")
    for pod in unit:
        found = w.best_bin(pod, kinds, first_fit=phantom)
        if found is None and allow_new:
            choice = w.choose_type(pod, queue, start)
            if isinstance(choice, NodeType):
                b = w.open_bin(choice)
                opened.append(b)
                found = (b, choose_devices(b.cap, pod))
            else:
                why: str = choice
        elif found is None:
            why = "no free capacity"
        if found is None:
            for p, b, a in reversed(done):
                give(b.cap, p, a)
                b.pods -= 1
            for b in reversed(opened):
                w.close_bin(b)
            return why
        b, a = found
        take(b.cap, pod, a)
        b.pods += 1
        done.append((pod, b, a))
    for pod, b, _ in done:
        if phantom:
            b.phantom += 1
        else:
            b.real.append(pod.name)
    return [(p, b) for p, b, _ in done]


def forecast_pods(snap: Snapshot, cfg: PlannerConfig, horizon: float) -> list[Pod]:
    """The arrivals of the recent window (length ``horizon``) at the configured quantile of GPU demand."""
    if horizon <= 0 or not snap.recent:
        return []
    buckets: list[list[Pod]] = [[] for _ in range(cfg.forecast_windows)]
    for p in snap.recent:
        age = snap.now - p.arrival
        k = int(age // horizon)
        if 0 <= k < cfg.forecast_windows and p.wants_gpu and not p.gang:
            buckets[k].append(p)
    ranked = sorted(
        range(cfg.forecast_windows), key=lambda k: (sum(p.gpu_total_milli for p in buckets[k]), -k)
    )
    idx = min(len(ranked) - 1, max(0, math.ceil(cfg.forecast_quantile * len(ranked)) - 1))
    return buckets[ranked[idx]]


def gpu_horizon(types: tuple[NodeType, ...]) -> float:
    """How far ahead headroom must look: the longest mean time from request to allocatable GPUs."""
    return max((t.boot_delay.mean() + t.gpu_ready_delay.mean() for t in types if t.gpu), default=0.0)


def _utilization(b: _Bin) -> float:
    if b.nt.gpu:
        return 1.0 - b.cap.free_gpu_milli() / (1000 * b.nt.gpu)
    return 1.0 - b.cap.cpu / b.nt.cpu_milli


def _consolidate(w: _Work, cfg: PlannerConfig) -> list[Drain]:
    """Empty the least-used nodes whose pods all fit on other busy nodes (best fit), up to the configured count.

    Kubernetes: the node is tainted and drained (Eviction API, PodDisruptionBudgets respected); its pods come back
    through the scheduling gate and get nodeAffinity to the nodes chosen on the next decision.
    """
    untouched = [b for b in w.bins if b.kind == "ready" and b.pods and not b.real and not b.phantom]
    cands = sorted(
        (b for b in untouched if _utilization(b) < cfg.consolidation_threshold and w.views[b.id].bound),
        key=lambda b: (_utilization(b), -b.nt.price_per_hour, b.order),
    )[: cfg.consolidation_candidates]
    drains: list[Drain] = []
    removed: set[str] = set()
    for b in cands:
        if len(drains) >= cfg.max_consolidations:
            break
        if b.pods != len(w.views[b.id].bound):
            continue  # pods promised to it: keep
        exclude = frozenset(removed | {b.id})
        undo: list[tuple[_Bin, Pod, Assignment]] = []
        ok = True
        for pod in sorted(w.views[b.id].bound, key=_queue_key):
            found = w.best_bin(pod, ("ready",), exclude=exclude, busy_only=True)
            if found is None:
                ok = False
                break
            dest, a = found
            take(dest.cap, pod, a)
            undo.append((dest, pod, a))
        if not ok:
            for dest, pod, a in reversed(undo):
                give(dest.cap, pod, a)
            continue
        removed.add(b.id)
        drains.append(
            Drain(
                b.id, w.snap.now, f"consolidate: its {len(undo)} pod(s) fit on other nodes", K8S_CONSOLIDATE
            )
        )
    return drains


def plan(snapshot: Snapshot, config: PlannerConfig | None = None, cache: PlanCache | None = None) -> Plan:
    """Decide launches, nominations, drains and headroom for ``snapshot`` (pure; deterministic)."""
    cfg = config or PlannerConfig()
    w = _Work(snapshot, cfg, cache)
    live = {n.id: n for n in snapshot.nodes if n.state not in (NodeState.DRAINING, NodeState.GONE)}
    promised = {pod: node for pod, node in snapshot.promised if node in live}

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
    headroom_new = 0
    if cfg.headroom:
        phantoms = sorted(forecast_pods(snapshot, cfg, gpu_horizon(snapshot.node_types)), key=_queue_key)[
            : cfg.max_phantoms
        ]
        for j, ph in enumerate(phantoms):
            allow = headroom_new < cfg.max_headroom_nodes
            before = len(w.new_bins)
            _place_unit(w, [ph], phantoms, j + 1, allow_new=allow, phantom=True)
            headroom_new += len(w.new_bins) - before

    launches = tuple(
        Launch(
            b.id,
            b.nt.name,
            tuple(b.real),
            "pods" if b.id in pod_bins else "headroom",
            K8S_LAUNCH.format(label=PLANNED_NODE_LABEL, node=b.id),
        )
        for b in w.new_bins
    )
    headroom: list[str] = []
    drains: list[Drain] = _consolidate(w, cfg) if cfg.consolidate else []
    drained = {d.node for d in drains}
    recheck: list[float] = []
    for b in w.bins:
        if b.id in drained:
            continue
        if b.kind == "new":
            continue
        if b.pods - b.phantom > 0:
            continue
        view = w.views[b.id]
        if b.phantom:
            headroom.append(b.id)
        elif b.kind == "inflight":
            continue  # let it come up: cancelling and relaunching churns; it is drained once idle if unused
        elif view.idle_since is not None and snapshot.now < view.idle_since + cfg.min_idle_s:
            recheck.append(view.idle_since + cfg.min_idle_s)
            continue
        elif cfg.drain:
            drains.append(
                Drain(b.id, snapshot.now, "empty and not needed by the forecast within its boot delay")
            )
    return Plan(
        launches=launches,
        nominations=tuple(nominations),
        drains=tuple(drains),
        headroom=tuple(headroom),
        unplaceable=tuple(unplaceable),
        waiting=tuple(waiting),
        recheck_at=min(recheck, default=None),
    )
