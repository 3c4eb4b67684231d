"""The policies a simulation compares: Capstan's planner and the incumbents it must beat, emulated fairly.

* ``capstan``: calls :func:`capstan.capacity.planner.plan` as a controller would (placement 1 s after pods turn
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
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass

from capstan.capacity.forecast import Forecaster, forecast_lookback, gpu_horizon
from capstan.capacity.model import GPU_MILLI, IN_FLIGHT, NodeState, NodeType, Pod, PodShape
from capstan.capacity.placement import (
    Assignment,
    Capacity,
    choose_devices,
    fits,
    give,
    take,
    why_incompatible,
)
from capstan.capacity.planner import PlanCache, PlannerConfig, Scope, plan
from capstan.capacity.sim import Policy, Sim, SimNode, SimPod
from capstan.errors import UserError

POLICY_NAMES = ("capstan", "cluster-autoscaler", "ca-buffer", "karpenter", "static", "oracle")


def _grid(now: float, interval: float, last: float) -> float:
    t = math.ceil(now / interval - 1e-9) * interval
    return t if t > last else last + interval


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


def _live_count(sim: Sim, nt: NodeType) -> int:
    return sum(1 for n in sim.active.values() if n.nt.name == nt.name and n.live)


def _ffd(pods: list[Pod], nt: NodeType, limit: int | None) -> tuple[int, list[Pod]]:
    """First-fit decreasing of ``pods`` onto new nodes of ``nt``: (node count, pods placed)."""
    bins: list[Capacity] = []
    placed: list[Pod] = []
    order = sorted(pods, key=lambda p: (-(p.cpu_milli / nt.cpu_milli + p.memory_mib / nt.memory_mib), p.name))
    for p in order:
        for cap in bins:
            if fits(cap, p):
                take(cap, p, choose_devices(cap, p))
                placed.append(p)
                break
        else:
            if limit is not None and len(bins) >= limit:
                continue
            cap = Capacity.of(nt)
            take(cap, p, choose_devices(cap, p))
            bins.append(cap)
            placed.append(p)
    return len(bins), placed


@dataclass
class CAConfig:
    scan_interval: float = 10.0
    scale_down_unneeded_time: float = 600.0
    scale_down_delay_after_add: float = 600.0
    utilization_threshold: float = 0.5
    gpu_utilization_threshold: float = 0.5
    max_empty_bulk_delete: int = 10
    gpu_unready_is_upcoming: bool = True
    """CA's GPU hack: a node whose GPUs are not yet allocatable counts as upcoming, not as a node without GPUs."""
    buffer_gpus: int | None = 0
    """A CapacityBuffer of this many virtual one-GPU pods (0: none; None: the trace's peak burst,
    :func:`peak_burst_gpus`)."""


def buffer_template(pods: list[Pod] | tuple[Pod, ...]) -> Pod:
    """The CapacityBuffer's pod template: one whole GPU with the median CPU and memory per GPU of the trace's
    whole-GPU pods (its GPU pods', if none asks for whole GPUs), no GPU-model constraint."""
    gpu_pods = [p for p in pods if p.wants_gpu]
    whole = [p for p in gpu_pods if p.gpu_milli >= GPU_MILLI] or gpu_pods
    if not whole:
        return Pod("buffer", 0.0, 1000, 4096, num_gpu=1, gpu_milli=GPU_MILLI)
    per_gpu = [max(1.0, p.gpu_total_milli / GPU_MILLI) for p in whole]
    cpu = sorted(p.cpu_milli / g for p, g in zip(whole, per_gpu, strict=True))[len(whole) // 2]
    mem = sorted(p.memory_mib / g for p, g in zip(whole, per_gpu, strict=True))[len(whole) // 2]
    return Pod("buffer", 0.0, max(1, int(cpu)), max(1, int(mem)), num_gpu=1, gpu_milli=GPU_MILLI)


def buffer_size_and_template(
    pods: list[Pod] | tuple[Pod, ...], types: tuple[NodeType, ...], count: int | None
) -> tuple[int, Pod]:
    """A CapacityBuffer of ``count`` one-GPU pods (None: the peak burst over one boot plus GPU-ready delay of
    ``types``) and its pod template (:func:`buffer_template`)."""
    # pods no node type can run are no burst a buffer could absorb (and may ask for any number of GPUs)
    fit: dict[PodShape, bool] = {}
    servable = [
        p for p in pods if fit.setdefault(p.shape, any(why_incompatible(t, p) is None for t in types))
    ]
    if count is None:
        count = peak_burst_gpus(servable, gpu_horizon(types))
    return count, buffer_template(servable)


def peak_burst_gpus(pods: list[Pod] | tuple[Pod, ...], horizon: float) -> int:
    """The most GPUs asked for by pods arriving within any window of ``horizon`` seconds (whole GPUs, rounded up)."""
    gpu_pods = sorted((p for p in pods if p.wants_gpu), key=lambda p: p.arrival)
    best = total = 0
    lo = 0
    for p in gpu_pods:
        total += p.gpu_total_milli
        while gpu_pods[lo].arrival <= p.arrival - horizon:
            total -= gpu_pods[lo].gpu_total_milli
            lo += 1
        best = max(best, total)
    return -(-best // GPU_MILLI)


class ClusterAutoscalerPolicy:
    name = "cluster-autoscaler"

    def __init__(self, config: CAConfig | None = None, name: str = "cluster-autoscaler") -> None:
        self.name = name
        self.cfg = config or CAConfig()
        self.buffer: list[SimPod] = []
        """The CapacityBuffer's virtual pods (never given to the simulator's scheduler)."""
        self.unneeded_since: dict[str, float] = {}
        self.last_scale_up = -math.inf
        self.last_scan = -math.inf
        self.scale_ups: list[tuple[float, str, int]] = []
        self.removals: list[tuple[float, str]] = []

    def start(self, sim: Sim) -> None:
        count, template = buffer_size_and_template(sim.workload.pods, sim.node_types, self.cfg.buffer_gpus)
        if count:
            self.buffer = [SimPod(dataclasses.replace(template, name=f"buffer-{i}")) for i in range(count)]
            sim.wake(0.0, "scan")

    def on_change(self, sim: Sim, now: float) -> None:
        sim.wake(_grid(now, self.cfg.scan_interval, self.last_scan), "scan")

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        self.last_scan = now
        # the buffer's pods stand on free capacity for this scan only, as CA injects them into its simulation
        standing, homeless = self._place_buffer(sim)
        try:
            self._scale_up(sim, now, homeless)
            self._scale_down(sim, now, standing, bool(homeless))
        finally:
            for n, sp, a in standing:
                give(n.cap, sp.pod, a)

    def _place_buffer(self, sim: Sim) -> tuple[list[tuple[SimNode, SimPod, Assignment]], list[Pod]]:
        """Put the buffer's pods on free allocatable capacity (taken until the scan ends); the rest have no
        room. A node that holds buffer pods and no real pod is headroom in the accounting."""
        if not self.buffer:
            return [], []
        nodes = sim.allocatable_nodes()
        standing: list[tuple[SimNode, SimPod, Assignment]] = []
        # first fit in node order, as CA's hinting simulator places the pods it injects; the buffer's pods are
        # alike, so that fills each node in turn as far as they fit
        todo = iter(self.buffer)
        sp = next(todo, None)
        for n in nodes:
            if sp is None:
                break
            if not sim.compatible(n.nt, sp.pod):
                continue
            while sp is not None and fits(n.cap, sp.pod):
                a = choose_devices(n.cap, sp.pod)
                take(n.cap, sp.pod, a)
                standing.append((n, sp, a))
                sp = next(todo, None)
        homeless = [] if sp is None else [sp.pod, *(rest.pod for rest in todo)]
        held = {n.id for n, _, _ in standing if not n.pods}
        for n in nodes:
            sim.set_headroom(n.id, n.id in held)
        return standing, homeless

    def _upcoming(self, sim: Sim) -> list[SimNode]:
        states = (
            set(IN_FLIGHT) if self.cfg.gpu_unready_is_upcoming else {NodeState.REQUESTED, NodeState.BOOTING}
        )
        return [n for n in sim.active.values() if n.state in states and not n.allocatable]

    def _scale_up(self, sim: Sim, now: float, buffer: list[Pod]) -> None:
        pending = sorted(
            (sp for sp in sim.pending.values() if sp.state == "pending"),
            key=lambda s: (s.pod.arrival, s.pod.name),
        )
        if not pending and not buffer:
            return
        templates = [(n, Capacity.of(n.nt)) for n in self._upcoming(sim)]
        left: list[Pod] = []
        for pod in [sp.pod for sp in pending] + buffer:  # real pods first, then the buffer's
            for n, cap in templates:
                if fits(cap, pod) and sim.compatible(n.nt, pod):
                    take(cap, pod, choose_devices(cap, pod))
                    break
            else:
                left.append(pod)
        if not left:
            return
        best: tuple[tuple[float, str], NodeType, int, list[Pod]] | None = None
        for nt in sim.node_types:
            ok = [p for p in left if sim.compatible(nt, p)]
            if not ok:
                continue
            quota = None if nt.max_count is None else nt.max_count - _live_count(sim, nt)
            if quota is not None and quota <= 0:
                continue
            count, placed = _ffd(ok, nt, quota)
            if not placed:
                continue
            cpu = sum(p.cpu_milli for p in placed)
            mem = sum(p.memory_mib for p in placed)
            waste = (count * nt.cpu_milli - cpu) / (count * nt.cpu_milli) + (count * nt.memory_mib - mem) / (
                count * nt.memory_mib
            )
            key = (waste, nt.name)
            if best is None or key < best[0]:
                best = (key, nt, count, placed)
        if best is None:
            return
        _, nt, count, placed = best
        real = {id(sp.pod) for sp in pending}
        for_pods = any(id(p) in real for p in placed)
        for _ in range(count):
            sim.launch(nt.name, purpose="pods" if for_pods else "headroom")
        sim.mark_decided(p.name for p in placed if id(p) in real)
        self.last_scale_up = now
        self.scale_ups.append((now, nt.name, count))
        if len(placed) < len(left):
            sim.wake(now + self.cfg.scan_interval, "scan")

    def _utilization(self, n: SimNode) -> float:
        if n.nt.gpu:
            return 1.0 - n.cap.free_gpu_milli() / (n.nt.gpu * 1000)
        return max(1.0 - n.cap.cpu / n.nt.cpu_milli, 1.0 - n.cap.mem / n.nt.memory_mib)

    def _scale_down(
        self,
        sim: Sim,
        now: float,
        buffer: list[tuple[SimNode, SimPod, Assignment]],
        buffer_full: bool = False,
    ) -> None:
        """Nodes unneeded for ``scale_down_unneeded_time`` go; ``buffer`` are the buffer's pods standing on nodes,
        ``buffer_full`` says some had no room (so no node has room for one)."""
        ready = [n for n in sim.active.values() if n.allocatable and not n.promised]
        standing: dict[str, list[SimPod]] = {}
        for n, sp, _ in buffer:
            standing.setdefault(n.id, []).append(sp)
        cands = sorted(
            (
                n
                for n in ready
                if self._utilization(n) < self._threshold(n)
                # a pod annotated safe-to-evict: "false" blocks its node's scale-down
                and all(sim.pods[name].pod.safe_to_evict for name in n.pods)
            ),
            key=lambda n: (self._utilization(n), n.requested_at, n.id),
        )
        removing: set[str] = set()
        undo: list[tuple[Capacity, SimPod, tuple[tuple[int, int], ...]]] = []
        # the ready nodes a pod shape fits, in node order; room only shrinks during the scan (a failed trial
        # gives back only what it took), so a list made before a trial holds every node the shape fits during it
        room: dict[PodShape, list[SimNode]] = {}
        # pods that earlier removals would move onto a node: in CA's snapshot they are that node's pods now
        incoming: dict[str, list[SimPod]] = {}
        for n in cands:
            if standing.get(n.id) and buffer_full:
                continue  # no node has room for another buffer pod, so the ones on n cannot move
            moving = [sim.pods[name] for name in n.pods] + standing.get(n.id, []) + incoming.get(n.id, [])
            for sp in moving:
                if sp.pod.shape not in room:
                    room[sp.pod.shape] = [
                        m for m in ready if fits(m.cap, sp.pod) and sim.compatible(m.nt, sp.pod)
                    ]
            trial: list[tuple[Capacity, SimPod, tuple[tuple[int, int], ...]]] = []
            moved: list[tuple[str, SimPod]] = []
            ok = True
            # its pods, the buffer's pods standing on it and those earlier removals moved there must all fit
            # elsewhere
            for sp in moving:
                targets = [m for m in room[sp.pod.shape] if m is not n and m.id not in removing]
                dest = sim.schedule(sp, targets)
                if dest is None:
                    ok = False
                    break
                a = choose_devices(dest.cap, sp.pod)
                take(dest.cap, sp.pod, a)
                trial.append((dest.cap, sp, a))
                moved.append((dest.id, sp))
            if ok:
                removing.add(n.id)
                undo.extend(trial)  # its pods stay where they would go while later candidates are tried
                for dest_id, sp in moved:
                    incoming.setdefault(dest_id, []).append(sp)
            else:
                for cap, sp, a in reversed(trial):  # as CA reverts the snapshot of a removal that fails
                    give(cap, sp.pod, a)
        for cap, sp, a in reversed(undo):
            give(cap, sp.pod, a)
        for nid in list(self.unneeded_since):
            if nid not in removing:
                del self.unneeded_since[nid]
        for nid in removing:
            self.unneeded_since.setdefault(nid, now)
        if not removing:
            return
        cooldown_end = self.last_scale_up + self.cfg.scale_down_delay_after_add
        due = sorted(
            (nid for nid in removing if now - self.unneeded_since[nid] >= self.cfg.scale_down_unneeded_time),
            key=lambda nid: (self.unneeded_since[nid], nid),
        )
        if now >= cooldown_end and due:
            empty = [nid for nid in due if not sim.nodes[nid].pods][: self.cfg.max_empty_bulk_delete]
            busy = [nid for nid in due if sim.nodes[nid].pods][:1]
            for nid in empty + busy:
                sim.drain(nid)
                self.removals.append((now, nid))
                self.unneeded_since.pop(nid, None)
        pending_due = [
            self.unneeded_since[nid] + self.cfg.scale_down_unneeded_time for nid in self.unneeded_since
        ]
        if pending_due:
            at = max(min(pending_due), cooldown_end)
            sim.wake(_grid(max(at, now + 1e-6), self.cfg.scan_interval, now), "scan")

    def _threshold(self, n: SimNode) -> float:
        return self.cfg.gpu_utilization_threshold if n.nt.gpu else self.cfg.utilization_threshold


@dataclass
class KarpenterConfig:
    batch_idle: float = 1.0
    batch_max: float = 10.0
    disruption_interval: float = 10.0
    budget_fraction: float = 0.1
    replace: bool = True
    """Single-node replacement consolidation: a node whose pods do not all fit elsewhere is replaced by one
    cheaper node that holds the rest (Karpenter's ``WhenEmptyOrUnderutilized``); False: delete only."""


class KarpenterPolicy:
    name = "karpenter"

    def __init__(self, config: KarpenterConfig | None = None) -> None:
        self.cfg = config or KarpenterConfig()
        self.batch_start: float | None = None
        self.batch_last = 0.0
        self.seen: set[str] = set()
        self.last_poll = -math.inf
        self.replacing: dict[str, str] = {}
        """Nodes cordoned for replacement consolidation → their replacement, until it is up."""
        self.moving: dict[str, list[Pod]] = {}
        """A replacement in flight → the pods it was launched for (new pods may use only the rest of it)."""
        self._cheaper: dict[tuple[str, frozenset[PodShape]], tuple[NodeType, ...]] = {}
        self._nothing_at: object = None
        """The ready nodes' state at the last poll where no node could be consolidated."""
        self.polls_skipped = 0
        """Polls skipped because the ready nodes were in that state."""
        self.replacements: list[tuple[float, str, str, str]] = []
        """(time, node, its type, the cheaper type that replaced it) for every replacement started."""

    def start(self, sim: Sim) -> None:
        return None

    def on_change(self, sim: Sim, now: float) -> None:
        new = [name for name, sp in sim.pending.items() if sp.state == "pending" and name not in self.seen]
        if new:
            self.seen.update(new)
            if self.batch_start is None:
                self.batch_start = now
            self.batch_last = now
            sim.wake(
                min(self.batch_last + self.cfg.batch_idle, self.batch_start + self.cfg.batch_max), "batch"
            )
        sim.wake(_grid(now, self.cfg.disruption_interval, self.last_poll), "disrupt")

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        if tag == "batch":
            if self.batch_start is None:
                return
            close = min(self.batch_last + self.cfg.batch_idle, self.batch_start + self.cfg.batch_max)
            if now + 1e-9 < close:
                sim.wake(close, "batch")
                return
            self.batch_start = None
            self._provision(sim)
        else:
            self.last_poll = now
            self._disrupt(sim, now)

    def _provision(self, sim: Sim) -> None:
        pods = sorted(
            (sp.pod for sp in sim.pending.values() if sp.state == "pending"),
            key=lambda p: (-p.cpu_milli, -p.memory_mib, p.name),
        )
        # a cordoned node takes no pods; a replacement in flight keeps room for the pods it was launched for
        inflight = [n for n in sim.active.values() if n.live and not n.allocatable and not n.cordoned]
        room = {n.id: self._room(n) for n in inflight}
        claims: list[tuple[list[Pod], dict[str, Capacity]]] = []
        for pod in pods:
            placed = False
            for n in inflight:
                if fits(room[n.id], pod) and sim.compatible(n.nt, pod):
                    placed = sim.promise(pod.name, n.id)
                    if placed:
                        take(room[n.id], pod, choose_devices(room[n.id], pod))
                    break
            if placed:
                continue
            for claim_pods, caps in claims:
                ok = {t: c for t, c in caps.items() if fits(c, pod) and sim.compatible(sim.types[t], pod)}
                if ok:
                    for t in list(caps):
                        if t not in ok:
                            del caps[t]
                    for c in ok.values():
                        take(c, pod, choose_devices(c, pod))
                    claim_pods.append(pod)
                    placed = True
                    break
            if placed:
                continue
            caps = {}
            for nt in sim.node_types:
                if not sim.compatible(nt, pod):
                    continue
                if (
                    nt.max_count is not None
                    and _live_count(sim, nt) + sum(1 for _, cs in claims if nt.name in cs) >= nt.max_count
                ):
                    continue
                c = Capacity.of(nt)
                take(c, pod, choose_devices(c, pod))
                caps[nt.name] = c
            if caps:
                claims.append(([pod], caps))
        for claim_pods, caps in claims:
            nt = min((sim.types[t] for t in caps), key=lambda t: (t.price_per_hour, t.name))
            node = sim.launch(nt.name)
            for pod in claim_pods:
                sim.promise(pod.name, node.id)

    def _disrupt(self, sim: Sim, now: float) -> None:
        for old, new in list(self.replacing.items()):
            # the replacement is initialized (or failed): the cordoned node is drained, its pods rescheduled
            if sim.nodes[new].allocatable or not sim.nodes[new].live:
                del self.replacing[old]
                self.moving.pop(new, None)
                sim.drain(old)
        live = [n for n in sim.active.values() if n.live]
        budget = max(1, int(len(live) * self.cfg.budget_fraction))
        ready = [n for n in live if n.allocatable and not n.promised]
        empty = sorted((n for n in ready if not n.pods), key=lambda n: n.id)
        for n in empty[:budget]:
            sim.drain(n.id)
        if empty or len(self.replacing) >= budget:
            return
        counts = Counter(n.nt.name for n in live)
        key = self._poll_key(sim, ready, counts)
        if key == self._nothing_at:
            self.polls_skipped += 1
            return
        self._nothing_at = None
        for n in sorted(ready, key=lambda n: (len(n.pods), -n.nt.price_per_hour, n.id)):
            if not all(sim.pods[name].pod.safe_to_evict for name in n.pods):
                continue  # a karpenter.sh/do-not-disrupt pod blocks its node's consolidation
            # replacement needs a cheaper type that could run every pod of n; without one, stop at the first
            # pod with no room, as delete consolidation does
            cheaper = self._cheaper_types(sim, n) if self.cfg.replace else ()
            targets = [m for m in ready if m is not n]
            undo = []
            left: list[Pod] = []
            for name in n.pods:
                sp = sim.pods[name]
                dest = sim.schedule(sp, targets)
                if dest is None:
                    left.append(sp.pod)
                    if not cheaper:
                        break
                    continue
                a = choose_devices(dest.cap, sp.pod)
                take(dest.cap, sp.pod, a)
                undo.append((dest.cap, sp.pod, a))
            for cap, p, a in reversed(undo):
                give(cap, p, a)
            if not left:
                sim.drain(n.id)  # delete consolidation
                return
            nt = self._replacement(cheaper, left, counts) if cheaper else None
            if nt is not None:
                # replace consolidation: taint the node, launch the cheaper one, drain when it is up
                sim.cordon(n.id)
                new = sim.launch(nt.name, purpose="repack").id
                self.replacing[n.id] = new
                self.moving[new] = left
                self.replacements.append((now, n.id, n.nt.name, nt.name))
                return
        self._nothing_at = key

    @staticmethod
    def _poll_key(sim: Sim, ready: list[SimNode], counts: Counter[str]) -> object:
        """What the candidates' trials depend on: the ready nodes' pods and free room, and the type limits a
        replacement checks. A poll whose key equals the last one that found nothing finds nothing either."""
        return (
            tuple((n.id, n.cap.cpu, n.cap.mem, tuple(n.cap.devs), tuple(n.pods)) for n in ready),
            tuple(counts[nt.name] for nt in sim.node_types if nt.max_count is not None),
        )

    def _room(self, n: SimNode) -> Capacity:
        """What pods may still be promised on in-flight node ``n``: its free capacity, less the pods a
        replacement was launched for."""
        cap = n.cap.copy()
        for p in self.moving.get(n.id, []):
            if fits(cap, p):
                take(cap, p, choose_devices(cap, p))
        return cap

    def _cheaper_types(self, sim: Sim, n: SimNode) -> tuple[NodeType, ...]:
        """Types cheaper than ``n``'s on which every pod of ``n`` could run, cheapest first (cached by shapes)."""
        shapes = frozenset(sim.pods[name].pod.shape for name in n.pods)
        key = (n.nt.name, shapes)
        got = self._cheaper.get(key)
        if got is None:
            pods = [sim.pods[name].pod for name in n.pods]
            got = self._cheaper[key] = tuple(
                sorted(
                    (
                        nt
                        for nt in sim.node_types
                        if nt.price_per_hour < n.nt.price_per_hour
                        and all(sim.compatible(nt, p) for p in pods)
                    ),
                    key=lambda nt: (nt.price_per_hour, nt.name),
                )
            )
        return got

    @staticmethod
    def _replacement(cheaper: tuple[NodeType, ...], pods: list[Pod], counts: Counter[str]) -> NodeType | None:
        """The first of ``cheaper`` (cheapest first) one node of which holds all of ``pods``, within its
        type's limit (``counts``: live nodes per type; None if none)."""
        for nt in cheaper:
            if nt.max_count is not None and counts[nt.name] >= nt.max_count:
                continue
            count, placed = _ffd(pods, nt, 1)
            if count == 1 and len(placed) == len(pods):
                return nt
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
