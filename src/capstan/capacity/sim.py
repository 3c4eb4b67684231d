"""Discrete-event simulator that replays a workload against a capacity policy and accounts every GPU-second.

The event core is a heap ordered by (time, sequence number), so equal times resolve in insertion order and a run
is a pure function of (workload, node types, policy, seed). The cluster has kube-scheduler's default behaviour
(:mod:`capstan.capacity.placement`): a pod that arrives is bound at once to the best-scoring allocatable node, or
waits; waiting pods are retried whenever capacity appears. Gangs are bound all-or-nothing (the
``GangScheduling`` plugin of KEP-4671). A policy reacts to state changes and wake-ups it asked for, and acts only
through :class:`Sim`'s methods: launch, promise (reserve a pod on a node), bind, drain. A pod a drain evicts keeps
its end time (its run goes on where it is placed again) unless it is not safe to evict
(:attr:`~capstan.capacity.model.Pod.safe_to_evict`): then it runs again from the start, and the run lost is
counted.

Accounting (conservation is checked by :meth:`SimResult.check`): every GPU-second of every node is either
allocated to a pod or idle for exactly one cause: ``booting`` (requested until GPUs allocatable), ``unallocated``
(allocatable, node has pods, free GPU shares: fragmentation), ``empty`` (no pods: waiting for scale-down,
draining, or a static cluster's spare node), ``headroom`` (held or launched on purpose for forecast demand) or
``duplicate`` (launched for pods, never ran one).

NOTE: one module of about 740 lines on purpose. :class:`Sim` is the event loop and the cluster state every event
mutates, and the accounting is exact only because each state change (launch, bind, evict, drain, gone) charges
the time before it through one method, ``_account``, in the same class; split across modules, a new event kind
could change state without charging it. :class:`SimResult`, the node and pod records and the :class:`Policy`
protocol are the data that loop produces and the interface it drives.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast

from capstan.capacity._plan_types import NodeChanges, NodeView, Snapshot
from capstan.capacity.controller import Activity
from capstan.capacity.model import GPU_MILLI, NodeState, NodeType, Pod, PodShape, Workload
from capstan.capacity.placement import (
    Assignment,
    Capacity,
    choose_devices,
    fits,
    give,
    least_allocated_score,
    take,
    why_incompatible,
)

IDLE_CAUSES = ("booting", "unallocated", "empty", "headroom", "duplicate")
STAGES = ("reaction", "boot", "gpu_ready", "scheduling")
Purpose = Literal["pods", "headroom", "repack", "static"]
"""Why a node was launched: for pending pods, forecast headroom, a repack's destination, or a static cluster."""
TERMINATION_S = 30.0
"""Seconds a drained node is still billed while it terminates."""


@dataclass(slots=True)
class SimNode:
    id: str
    nt: NodeType
    state: NodeState
    cap: Capacity
    requested_at: float
    purpose: Purpose = "pods"
    ready_at: float | None = None
    gpu_at: float | None = None
    gone_at: float | None = None
    pods: dict[str, Assignment] = field(default_factory=dict)
    promised: dict[str, Assignment] = field(default_factory=dict)
    headroom: bool = False
    cordoned: bool = False
    """Unschedulable (tainted ``NoSchedule``) while a replacement boots: it keeps its pods, takes no new ones."""
    ever_used: bool = False
    idle_since: float | None = None
    last: float = 0.0
    gpu_s: float = 0.0
    alloc_s: float = 0.0
    idle_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(IDLE_CAUSES, 0.0))
    view: NodeView | None = None

    allocatable: bool = False
    """Pods may be bound here: GPUs allocatable (Ready, for a node without GPUs) and not cordoned. Kept by
    :meth:`set_state` and :meth:`Sim.cordon` (read for every node a pod is scheduled against)."""

    def set_state(self, state: NodeState) -> None:
        self.state = state
        self.allocatable = (
            state is NodeState.GPU_ALLOCATABLE or (state is NodeState.READY and self.nt.gpu == 0)
        ) and not self.cordoned

    @property
    def live(self) -> bool:
        s = self.state
        return s is not NodeState.DRAINING and s is not NodeState.GONE


@dataclass(slots=True)
class SimPod:
    pod: Pod
    state: Literal["pending", "promised", "bound", "done", "unplaceable"] = "pending"
    node: str | None = None
    decided_at: float | None = None
    bound_at: float | None = None
    moves: int = 0
    reason: str = ""
    evicted_at: float | None = None
    move_waits: list[float] = field(default_factory=list)
    """Seconds from each eviction to the next bind (not part of the pod's pending time)."""
    end_at: float | None = None
    """When the current run ends; None while a pod that is not safe to evict waits to run again."""
    run_since: float | None = None
    """When the current run started (its last bind)."""
    restarts: int = 0
    """Evictions that lost the pod's work (it was not safe to evict), each followed by a run from the start."""
    lost_s: float = 0.0
    """Seconds of running that those evictions threw away."""


class Policy(Protocol):
    """A capacity policy: it sees state changes and its own wake-ups and acts through the :class:`Sim`."""

    name: str

    def start(self, sim: Sim) -> None: ...

    def on_change(self, sim: Sim, now: float) -> None: ...

    def on_wake(self, sim: Sim, now: float, tag: str) -> None: ...


@dataclass
class SimResult:
    policy: str
    workload: str
    end: float
    nodes: list[SimNode]
    pods: list[SimPod]
    events: list[tuple[float, str, str, str]]
    launches: int
    drains: int
    moves: int

    def gpu_hours(self) -> float:
        return sum(n.gpu_s for n in self.nodes) / 3600

    def allocated_gpu_hours(self) -> float:
        return sum(n.alloc_s for n in self.nodes) / 3600

    def idle_gpu_hours(self) -> dict[str, float]:
        return {c: sum(n.idle_s[c] for n in self.nodes) / 3600 for c in IDLE_CAUSES}

    def cost(self) -> float:
        return sum(
            ((n.gone_at if n.gone_at is not None else self.end) - n.requested_at) / 3600 * n.nt.price_per_hour
            for n in self.nodes
        )

    def boot_cost(self) -> float:
        """What this run's launches would add to :meth:`cost` if each paid its type's mean boot delay (and GPU-ready
        delay): for the oracle, whose nodes are ready the moment it asks, the price of the same launches made
        one boot delay early by a policy that knew the future."""
        return sum(
            (n.nt.boot_delay.mean() + (n.nt.gpu_ready_delay.mean() if n.nt.gpu else 0.0))
            / 3600
            * n.nt.price_per_hour
            for n in self.nodes
            if n.purpose != "static"
        )

    def pending_stages(self) -> dict[str, list[float]]:
        """Seconds each bound pod spent in each pending stage, plus ``total``."""
        nodes = {n.id: n for n in self.nodes}
        out: dict[str, list[float]] = {s: [] for s in (*STAGES, "total")}
        for sp in self.pods:
            if sp.bound_at is None:
                continue
            total = max(0.0, sp.bound_at - sp.pod.arrival)
            stages = dict.fromkeys(STAGES, 0.0)
            node = nodes.get(sp.node or "")
            if sp.decided_at is not None and total > 0 and node is not None:
                stages["reaction"] = min(total, max(0.0, sp.decided_at - sp.pod.arrival))
                left = total - stages["reaction"]
                start = max(sp.decided_at, sp.pod.arrival)
                if node.ready_at is not None and node.ready_at > start:
                    stages["boot"] = min(left, node.ready_at - start)
                    left -= stages["boot"]
                    start = node.ready_at
                if node.gpu_at is not None and node.gpu_at > start:
                    stages["gpu_ready"] = min(left, node.gpu_at - start)
                    left -= stages["gpu_ready"]
                stages["scheduling"] = left
            else:
                stages["scheduling"] = total
            for s in STAGES:
                out[s].append(stages[s])
            out["total"].append(total)
        return out

    def move_waits(self) -> list[float]:
        """Seconds each evicted pod waited to run again (an eviction whose pod ended first counts until then)."""
        out = [w for sp in self.pods for w in sp.move_waits]
        for sp in self.pods:
            if sp.evicted_at is not None:  # ended (or the run ended) before it ran again
                end = sp.end_at if sp.state == "done" and sp.end_at is not None else self.end
                out.append(max(0.0, min(end, self.end) - sp.evicted_at))
        return out

    def restarts(self) -> int:
        """Evictions of pods that were not safe to evict: each threw the pod's run so far away."""
        return sum(sp.restarts for sp in self.pods)

    def lost_gpu_hours(self) -> float:
        """GPU-hours of running those evictions threw away (each pod's GPU share × the run it lost)."""
        return sum(sp.lost_s * sp.pod.gpu_total_milli / GPU_MILLI for sp in self.pods) / 3600

    def unplaced(self) -> list[SimPod]:
        return [p for p in self.pods if p.state not in ("done", "bound")]

    def check(self) -> list[str]:
        """Conservation: every pod ended placed or reported with a reason, and GPU-seconds add up per node."""
        problems = []
        for sp in self.pods:
            if sp.state in ("pending", "promised", "unplaceable") and not sp.reason:
                problems.append(f"pod {sp.pod.name} ended {sp.state} without a reason")
            if sp.state == "done" and sp.bound_at is None:
                problems.append(f"pod {sp.pod.name} done but never bound")
        for n in self.nodes:
            total = n.alloc_s + sum(n.idle_s.values())
            if abs(total - n.gpu_s) > 1e-6 * max(1.0, n.gpu_s):
                problems.append(f"node {n.id}: allocated+idle {total:.3f} != provisioned {n.gpu_s:.3f} GPU-s")
            life = (n.gone_at if n.gone_at is not None else self.end) - n.requested_at
            if abs(n.gpu_s - life * n.nt.gpu) > 1e-6 * max(1.0, n.gpu_s):
                problems.append(
                    f"node {n.id}: provisioned {n.gpu_s:.3f} != life × GPUs {life * n.nt.gpu:.3f}"
                )
        return problems


QueueOrder = Literal["arrival", "drawn"]
"""The order the simulator's scheduler tries waiting pods in when room appears, within a priority: ``arrival``,
oldest first; ``drawn``, an order drawn afresh each time (seeded). kube-scheduler sorts its queue by priority and
then by when each pod was last put back in it, and a pod that failed within its backoff waits that out first, so
on a live cluster which of the waiting pods a new node's room goes to follows when each last failed, not when it
arrived: a pod an autoscaler launched a node for can lose that node to pods that came after it, and wait another
launch (``bench/capacity_live.py`` shows it live). ``drawn`` stands for that order, which nothing here can
predict pod by pod."""


class Sim:
    """One replay: the cluster, the event heap, the default scheduler, and the accounting."""

    def __init__(
        self,
        workload: Workload,
        node_types: tuple[NodeType, ...],
        policy: Policy,
        *,
        seed: int = 0,
        record: bool = True,
        zero_delay: bool = False,
        progress: Callable[[float], None] | None = None,
        recent_window: float = 3600.0,
        queue_order: QueueOrder = "arrival",
    ) -> None:
        self.workload = workload
        self.node_types = node_types
        self.types = {t.name: t for t in node_types}
        self.policy = policy
        self.rng = random.Random(seed)
        self.queue_order: QueueOrder = queue_order
        self._queue_rng = random.Random(f"queue-{seed}")
        self._shunned: frozenset[str] = frozenset()
        """Nodes with a ``PreferNoSchedule`` taint (:meth:`prefer_not`)."""
        """Draws the order waiting pods are tried in under ``queue_order="drawn"`` (apart from :attr:`rng`, so the
        boot delays drawn are the same in both orders)."""
        self.record = record
        self.zero_delay = zero_delay or bool(getattr(policy, "zero_delay", False))
        self.progress = progress
        self.recent_window = recent_window
        self.now = 0.0
        self._heap: list[tuple[float, int, str, str]] = []
        self._seq = 0
        self.nodes: dict[str, SimNode] = {}
        self.active: dict[str, SimNode] = {}
        """Nodes not yet gone (includes draining ones)."""
        self.pods: dict[str, SimPod] = {}
        self.pending: dict[str, SimPod] = {}
        self.recent: deque[Pod] = deque()
        self._recent_tuple: tuple[Pod, ...] | None = None
        self.events: list[tuple[float, str, str, str]] = []
        self.launches = 0
        self.arrivals = 0
        self.drains = 0
        self.moves = 0
        self._next_id = 0
        self._wakes: set[tuple[float, str]] = set()
        self._gangs: dict[str, list[str]] = {}
        self._ok_types: dict[PodShape, frozenset[str]] = {}
        self._changed = False
        # NOTE: what a controller reads is kept up to date from the nodes each event touched (``_touch``), so
        # a snapshot and an activity cost what changed since the last, not the cluster's size
        self._views: dict[str, NodeView | None] = {}
        """The live nodes' views in launch order (None until the next snapshot builds it)."""
        self._nodes: tuple[NodeView, ...] = ()
        self._stale: set[str] = set()
        """Nodes touched since the last snapshot."""
        self._stale_activity: set[str] = set()
        """Nodes touched since the last activity."""
        self._launch_no: dict[str, int] = {}
        self._promising: set[str] = set()
        """Nodes with pods promised to them, as of the last snapshot."""
        self._empty: set[str] = set()
        """Allocatable nodes without pods not yet gone, as of the last activity."""
        self._held: set[str] = set()
        """Nodes that may be held as headroom (a superset)."""
        self._repack_up_at = -math.inf
        """When a node launched for a repack last came to take pods with nothing promised to it
        (:attr:`Activity.repack_up_at`)."""

    # ----- event core -----
    def _push(self, t: float, kind: str, ref: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, ref))

    def wake(self, t: float, tag: str) -> None:
        """Ask for ``policy.on_wake(tag)`` at ``t`` (deduplicated)."""
        t = max(t, self.now)
        if (t, tag) in self._wakes:
            return
        self._wakes.add((t, tag))
        self._push(t, "wake", tag)

    def _log(self, kind: str, ref: str, detail: str = "") -> None:
        if self.record:
            self.events.append((self.now, kind, ref, detail))

    # ----- accounting -----
    def _account(self, n: SimNode) -> None:
        dt = self.now - n.last
        n.last = self.now
        if dt <= 0 or n.nt.gpu == 0:
            return
        gpus = n.nt.gpu
        n.gpu_s += gpus * dt
        if n.state in (NodeState.REQUESTED, NodeState.BOOTING, NodeState.READY):
            n.idle_s["headroom" if n.purpose == "headroom" else "booting"] += gpus * dt
            return
        if n.state == NodeState.DRAINING:
            n.idle_s["empty"] += gpus * dt
            return
        free = n.cap.free_gpu_milli() / GPU_MILLI
        n.alloc_s += (gpus - free) * dt
        if n.pods:
            n.idle_s["unallocated"] += free * dt
        elif n.headroom or (n.purpose == "headroom" and not n.ever_used):
            n.idle_s["headroom"] += free * dt
        else:
            n.idle_s["empty"] += free * dt

    def _touch(self, n: SimNode) -> None:
        n.view = None
        self._changed = True
        self._stale.add(n.id)
        self._stale_activity.add(n.id)

    # ----- node lifecycle -----
    def launch(self, type_name: str, *, purpose: Purpose = "pods", node_id: str = "") -> SimNode:
        nt = self.types[type_name]
        nid = node_id or f"n{self._next_id}"
        self._next_id = max(self._next_id, _id_num(nid)) + 1
        n = SimNode(nid, nt, NodeState.REQUESTED, Capacity.of(nt), self.now, purpose=purpose, last=self.now)
        self.nodes[nid] = n
        self.active[nid] = n
        self._launch_no[nid] = len(self._launch_no)
        self._views[nid] = None
        self.launches += 1
        self._log("node.requested", nid, type_name)
        n.set_state(NodeState.BOOTING)
        self._log("node.booting", nid)
        if self.zero_delay or purpose == "static":
            self._node_ready(n)
        else:
            self._push(self.now + nt.boot_delay.sample(self.rng), "ready", nid)
        self._touch(n)
        return n

    def _node_ready(self, n: SimNode) -> None:
        self._account(n)
        n.set_state(NodeState.READY)
        n.ready_at = self.now
        self._log("node.ready", n.id)
        if n.nt.gpu == 0:
            self._allocatable(n)
        elif self.zero_delay or n.purpose == "static":
            self._node_gpu(n)
        else:
            self._push(self.now + n.nt.gpu_ready_delay.sample(self.rng), "gpu", n.id)
        self._touch(n)

    def _node_gpu(self, n: SimNode) -> None:
        self._account(n)
        n.set_state(NodeState.GPU_ALLOCATABLE)
        n.gpu_at = self.now
        self._log("node.gpu_allocatable", n.id)
        self._allocatable(n)
        self._touch(n)

    def _allocatable(self, n: SimNode) -> None:
        if n.gpu_at is None:
            n.gpu_at = self.now
        if n.purpose == "repack" and not n.promised:
            self._repack_up_at = self.now
        for name in sorted(n.promised, key=lambda p: self.pods[p].pod.arrival):
            a = n.promised.pop(name)
            give(n.cap, self.pods[name].pod, a)
            self._bind(self.pods[name], n)
        if not n.pods:
            n.idle_since = self.now
        self._retry_pending([n])

    def hold_headroom(self, nids: Collection[str]) -> None:
        """Hold exactly ``nids`` of the live nodes empty for forecast demand (idle time on them is headroom)."""
        # only nodes held before (``_held``: every node whose flag is set) or now can change
        seen = self._held | set(nids)
        for nid in seen:
            n = self.active.get(nid)
            if n is None:
                continue
            held = nid in nids
            if n.headroom != held and n.live:
                self._account(n)
                n.headroom = held
        self._held = {nid for nid in seen if (n := self.active.get(nid)) is not None and n.headroom}

    # ----- what a controller reads -----
    def has_pending(self) -> bool:
        return bool(self.pending)

    def activity(self) -> Activity:
        for nid in self._stale_activity:
            n = self.nodes[nid]
            if n.allocatable and not n.pods and nid in self.active:
                self._empty.add(nid)
            else:
                self._empty.discard(nid)
        self._stale_activity.clear()
        empty = tuple(sorted(self._empty, key=self._launch_no.__getitem__))
        repack_waiting = any(self.nodes[nid].purpose == "repack" for nid in empty)
        return Activity(self.arrivals, self.launches, self.drains, empty, repack_waiting, self._repack_up_at)

    def cordon(self, nid: str) -> None:
        """Take no new pods on ``nid`` (its pods stay); a later :meth:`drain` evicts them."""
        n = self.nodes[nid]
        if n.live and not n.cordoned:
            n.cordoned = True
            n.set_state(n.state)
            self._log("node.cordoned", nid)
            self._touch(n)

    def drain(self, nid: str) -> None:
        n = self.nodes[nid]
        if not n.live:
            return
        for name, a in list(n.promised.items()):
            give(n.cap, self.pods[name].pod, a)
            del n.promised[name]
            sp = self.pods[name]
            sp.state, sp.node = "pending", None
            self.pending[name] = sp
        evicted = list(n.pods)
        self._account(n)
        n.set_state(NodeState.DRAINING)
        self.drains += 1
        self._log("node.draining", nid)
        for name in evicted:
            sp = self.pods[name]
            self._evict(sp, n)
            sp.state = "pending"
            self.pending[name] = sp
        self._push(self.now + TERMINATION_S, "gone", nid)
        self._touch(n)
        if evicted and not getattr(self.policy, "steers_placement", False):
            self._retry_pending(self.allocatable_nodes())

    def _node_gone(self, n: SimNode) -> None:
        self._account(n)
        n.set_state(NodeState.GONE)
        n.gone_at = self.now
        self.active.pop(n.id, None)
        if n.purpose in ("pods", "repack") and not n.ever_used:
            n.idle_s["duplicate"] += sum(n.idle_s[c] for c in IDLE_CAUSES if c != "duplicate")
            for c in IDLE_CAUSES:
                if c != "duplicate":
                    n.idle_s[c] = 0.0
        self._log("node.gone", n.id)
        self._touch(n)

    # ----- pods -----
    def compatible(self, nt: NodeType, pod: Pod) -> bool:
        return nt.name in self.ok_types(pod)

    def ok_types(self, pod: Pod) -> frozenset[str]:
        """Names of the node types ``pod`` could run on (cached by shape)."""
        ok = self._ok_types.get(pod.shape)
        if ok is None:
            ok = self._ok_types[pod.shape] = frozenset(
                nt.name for nt in self.node_types if why_incompatible(nt, pod) is None
            )
        return ok

    def allocatable_nodes(self) -> list[SimNode]:
        return [n for n in self.active.values() if n.allocatable]

    def _bind(self, sp: SimPod, n: SimNode) -> None:
        self._account(n)
        a = choose_devices(n.cap, sp.pod)
        take(n.cap, sp.pod, a)
        n.pods[sp.pod.name] = a
        n.ever_used = True
        n.idle_since = None
        n.headroom = False
        first = sp.bound_at is None
        if sp.evicted_at is not None:
            sp.move_waits.append(self.now - sp.evicted_at)
            sp.evicted_at = None
        sp.state, sp.node = "bound", n.id
        self.pending.pop(sp.pod.name, None)
        sp.run_since = self.now
        if first:
            sp.bound_at = self.now
        if sp.end_at is None:  # the first run, or a run again from the start
            sp.end_at = self.now + sp.pod.duration
            self._push(sp.end_at, "end", sp.pod.name)
        self._log("pod.bound", sp.pod.name, n.id)
        self._touch(n)

    def _unbind(self, sp: SimPod, n: SimNode) -> None:
        self._account(n)
        give(n.cap, sp.pod, n.pods.pop(sp.pod.name))
        if not n.pods and not n.promised:
            n.idle_since = self.now
        self._touch(n)

    def promise(self, pod_name: str, nid: str) -> bool:
        """Reserve ``pod`` on node ``nid`` (bound now if allocatable, else when its GPUs are)."""
        sp = self.pending.get(pod_name)
        n = self.nodes.get(nid)
        if sp is None or n is None or not n.live or not fits(n.cap, sp.pod):
            return False
        if sp.decided_at is None:
            sp.decided_at = self.now
        if n.allocatable:
            self._bind(sp, n)
            return True
        a = choose_devices(n.cap, sp.pod)
        take(n.cap, sp.pod, a)
        n.promised[pod_name] = a
        n.headroom = False
        sp.state, sp.node = "promised", nid
        self.pending.pop(pod_name, None)
        self._log("pod.promised", pod_name, nid)
        self._touch(n)
        return True

    def move(self, pod_name: str, nid: str) -> bool:
        """Evict a running pod and bind it on allocatable node ``nid`` at once (a move that frees room where it
        ran). Nothing happens unless the pod is bound elsewhere and ``nid`` is allocatable with room for it."""
        sp = self.pods.get(pod_name)
        n = self.nodes.get(nid)
        if sp is None or sp.state != "bound" or n is None or sp.node == nid:
            return False
        if not n.allocatable or not fits(n.cap, sp.pod):
            return False
        self._evict(sp, self.nodes[sp.node or ""])
        self._bind(sp, n)
        return True

    def _evict(self, sp: SimPod, n: SimNode) -> None:
        """Take running ``sp`` off ``n`` and count the move (the caller puts it back to pending or binds it)."""
        self._unbind(sp, n)
        sp.moves += 1
        sp.evicted_at = self.now
        if not sp.pod.safe_to_evict:  # its work is lost: it runs again from the start when bound
            sp.restarts += 1
            sp.lost_s += self.now - (sp.run_since if sp.run_since is not None else self.now)
            sp.end_at = None
        self.moves += 1
        self._log("pod.evicted", sp.pod.name, n.id)

    def mark_decided(self, pod_names: Iterable[str]) -> None:
        for name in pod_names:
            sp = self.pods.get(name)
            if sp is not None and sp.decided_at is None:
                sp.decided_at = self.now

    def schedule(self, sp: SimPod, candidates: list[SimNode]) -> SimNode | None:
        """kube-scheduler defaults: filter, then the best score: nodes without a ``PreferNoSchedule`` taint the
        pod does not tolerate (:meth:`prefer_not`; TaintToleration's weight 3 outweighs the rest) before those
        with one, then the highest LeastAllocated score. Ties: node order; under ``queue_order="drawn"``, scores
        in whole points as kube-scheduler's are, and a tie drawn among the best nodes, as its reservoir sampling
        does."""
        best: SimNode | None = None
        best_score = -1.0
        pod = sp.pod
        ok = self.ok_types(pod)
        shunned = self._shunned
        drawn = self.queue_order == "drawn"
        tied = 0
        for n in candidates:
            if n.nt.name not in ok or not n.allocatable or not fits(n.cap, pod):
                continue
            s = least_allocated_score(n.nt, n.cap, pod)
            if drawn:
                s = float(math.floor(s))
            if shunned and n.id not in shunned:
                s += 1000.0
            if s > best_score:
                best, best_score, tied = n, s, 1
            elif drawn and s == best_score:
                tied += 1
                if self._queue_rng.randrange(tied) == 0:
                    best = n
        return best

    def prefer_not(self, nids: Collection[str]) -> None:
        """Nodes that now carry a ``PreferNoSchedule`` taint (cluster-autoscaler's
        ``DeletionCandidateOfClusterAutoscaler`` on the nodes it found unneeded): the scheduler places pods there
        only when no other node has room. Replaces the last set given."""
        self._shunned = frozenset(nids)

    def _try_unit(self, unit: list[SimPod], candidates: list[SimNode]) -> bool:
        """Bind all of ``unit`` or none (gangs)."""
        if len(unit) == 1:
            n = self.schedule(unit[0], candidates)
            if n is None:
                return False
            self._bind(unit[0], n)
            return True
        trial: list[tuple[SimPod, SimNode, Assignment]] = []
        for sp in unit:
            n = self.schedule(sp, candidates)
            if n is None:
                for p, m, a in trial:
                    give(m.cap, p.pod, a)
                return False
            a = choose_devices(n.cap, sp.pod)
            take(n.cap, sp.pod, a)
            trial.append((sp, n, a))
        for p, m, a in trial:
            give(m.cap, p.pod, a)
        for p, m, _ in trial:
            self._bind(p, m)
        return True

    def _gang_unit(self, sp: SimPod) -> list[SimPod] | None:
        members = [self.pods[m] for m in self._gangs.get(sp.pod.gang, [])]
        if len(members) < sp.pod.gang_size or any(m.state != "pending" for m in members):
            return None
        return members

    def _retry_pending(self, candidates: list[SimNode]) -> None:
        if getattr(self.policy, "steers_placement", False) or not candidates or not self.pending:
            return
        if self.queue_order == "arrival":
            order = sorted(self.pending.values(), key=lambda s: (-s.pod.priority, s.pod.arrival, s.pod.name))
        else:
            waiting = sorted(self.pending.values(), key=lambda s: s.pod.name)
            draws = {s.pod.name: self._queue_rng.random() for s in waiting}
            order = sorted(waiting, key=lambda s: (-s.pod.priority, draws[s.pod.name]))
        tried: set[str] = set()
        for sp in order:
            if sp.state != "pending" or sp.pod.name in tried:
                continue
            unit = [sp]
            if sp.pod.gang:
                got = self._gang_unit(sp)
                if got is None:
                    continue
                unit = got
            tried.update(u.pod.name for u in unit)
            # a gang may need nodes other than the one that just changed
            self._try_unit(unit, self.allocatable_nodes() if len(unit) > 1 else candidates)

    def _arrive(self, sp: SimPod) -> None:
        pod = sp.pod
        self._log("pod.created", pod.name)
        self.recent.append(pod)
        self._recent_tuple = None
        self.arrivals += 1
        if not any(self.compatible(nt, pod) for nt in self.node_types):
            reasons = "; ".join(f"{nt.name}: {why_incompatible(nt, pod)}" for nt in self.node_types)
            sp.state = "unplaceable"
            sp.reason = f"fits no node type ({reasons})"
            self._log("pod.unplaceable", pod.name, sp.reason)
            return
        self.pending[pod.name] = sp
        if pod.gang:
            self._gangs.setdefault(pod.gang, []).append(pod.name)
        if getattr(self.policy, "steers_placement", False):
            return
        unit: list[SimPod] | None = [sp]
        if pod.gang:
            unit = self._gang_unit(sp)
        if unit is not None:
            self._try_unit(unit, self.allocatable_nodes())

    def _end(self, sp: SimPod) -> bool:
        """The pod's run ends; False (nothing happens) for the end of a run an eviction threw away."""
        if sp.end_at is None or self.now != sp.end_at:
            return False
        if sp.state != "bound":
            # evicted and not yet back: it keeps its original end time (its remaining run is lost)
            if sp.state == "promised":
                m = self.nodes[sp.node or ""]
                give(m.cap, sp.pod, m.promised.pop(sp.pod.name))
                self._touch(m)
            self.pending.pop(sp.pod.name, None)
            sp.state, sp.node = "done", sp.node
            self._log("pod.done", sp.pod.name, "while evicted")
            return True
        n = self.nodes[sp.node or ""]
        self._unbind(sp, n)
        sp.state = "done"
        self._log("pod.done", sp.pod.name, n.id)
        if n.allocatable:
            self._retry_pending([n])
        return True

    # ----- snapshot for planners -----
    def snapshot(self) -> Snapshot:
        while self.recent and self.recent[0].arrival < self.now - self.recent_window:
            self.recent.popleft()
            self._recent_tuple = None
        if self._recent_tuple is None:
            self._recent_tuple = tuple(self.recent)
        changes: NodeChanges | None = None
        if self._stale:
            changed: list[NodeView] = []
            removed: list[str] = []
            for nid in self._stale:  # the nodes touched since the last snapshot
                n = self.nodes[nid]
                if n.promised:
                    self._promising.add(nid)
                else:
                    self._promising.discard(nid)
                if not n.live:
                    if self._views.pop(nid, None) is not None:
                        removed.append(nid)
                    continue
                if n.view is None:
                    avail = n.gpu_at if n.gpu_at is not None else n.requested_at + n.nt.boot_delay.mean()
                    n.view = NodeView(
                        n.id,
                        n.nt.name,
                        n.state,
                        n.cap.cpu,
                        n.cap.mem,
                        tuple(n.cap.devs),
                        len(n.pods) + len(n.promised),
                        avail,
                        n.idle_since,
                        tuple(self.pods[p].pod for p in n.pods),
                        n.purpose,
                    )
                if self._views[nid] is not n.view:
                    self._views[nid] = n.view
                    changed.append(n.view)
            self._stale.clear()
            if changed or removed:
                changed.sort(key=lambda v: self._launch_no[v.id])  # nodes new since come in launch order
                since = self._nodes
                # every live node was touched at its launch, so each has its view by now
                self._nodes = cast("tuple[NodeView, ...]", tuple(self._views.values()))
                changes = NodeChanges(since, tuple(changed), tuple(removed))
        by_launch = sorted(self._promising, key=self._launch_no.__getitem__)
        promised = tuple((name, nid) for nid in by_launch for name in self.nodes[nid].promised)
        return Snapshot(
            now=self.now,
            node_types=self.node_types,
            nodes=self._nodes,
            pending=tuple(sp.pod for sp in self.pending.values()),
            changes=changes,
            promised=promised,
            recent=self._recent_tuple,
            next_id=self._next_id,
        )

    # ----- run -----
    def run(self, max_events: int | None = None, until: float | None = None) -> SimResult:
        """Replay the workload to its end, or with ``until`` only up to that time: the events after it are not
        processed, so :meth:`snapshot` then shows the cluster as it was at ``until`` (a stopped run cannot be
        continued)."""
        for p in self.workload.pods:
            if p.name in self.pods:
                raise ValueError(f"duplicate pod name {p.name!r} in {self.workload.name}")
            self.pods[p.name] = SimPod(p)
            self._push(p.arrival, "arrive", p.name)
        self.policy.start(self)
        limit = max_events if max_events is not None else 200 * len(self.workload.pods) + 100_000
        active = len(self.workload.pods)
        horizon = max(self.workload.horizon(), 1.0)
        stopped = False
        for _ in range(limit):
            if not self._heap:
                break
            if until is not None and self._heap[0][0] > until:
                self.now = max(self.now, until)
                stopped = True
                break
            t, _, kind, ref = heapq.heappop(self._heap)
            self.now = t
            if kind == "arrive":
                self._arrive(self.pods[ref])
                if self.pods[ref].state == "unplaceable":
                    active -= 1
            elif kind == "end":
                if self._end(self.pods[ref]):
                    active -= 1
            elif kind == "ready":
                n = self.nodes[ref]
                if n.state == NodeState.BOOTING:
                    self._node_ready(n)
            elif kind == "gpu":
                n = self.nodes[ref]
                if n.state == NodeState.READY:
                    self._node_gpu(n)
            elif kind == "gone":
                self._node_gone(self.nodes[ref])
            elif kind == "wake":
                self._wakes.discard((t, ref))
                self.policy.on_wake(self, t, ref)
            if active == 0:
                break
            if self._changed or kind == "arrive":
                self._changed = False
                self.policy.on_change(self, t)
            if self.progress is not None:
                self.progress(min(1.0, t / horizon))
        else:
            raise RuntimeError(f"simulation of {self.workload.name} did not finish within {limit} events")
        for sp in self.pods.values() if not stopped else ():  # a stopped run's pending pods may still run
            if sp.state in ("pending", "promised") and not sp.reason:
                sp.reason = "still pending when the trace ended (no capacity became available)"
        for n in self.nodes.values():
            if n.state != NodeState.GONE:
                self._account(n)
        return SimResult(
            policy=self.policy.name,
            workload=self.workload.name,
            end=self.now,
            nodes=list(self.nodes.values()),
            pods=list(self.pods.values()),
            events=self.events,
            launches=self.launches,
            drains=self.drains,
            moves=self.moves,
        )


def _id_num(nid: str) -> int:
    digits = "".join(ch for ch in nid if ch.isdigit())
    return int(digits) if digits else 0
