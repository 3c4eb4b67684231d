"""A live cluster behind :class:`capstan.capacity.Cluster`: the informers' view in, the plan's actions out.

The controller is synchronous and pure of I/O, as in the simulator: it reads :meth:`LiveCluster.snapshot` (built
from the Node and Pod informers' state) and calls the action methods, which only *record* what to do. The loop
then awaits :meth:`LiveCluster.carry_out`, which makes the API calls (through the provider for nodes), each
retried on the next pass if it fails. Until the informers show an action's result, the cluster remembers it (a
node launched, a pod promised), so the next plan does not launch a second node for the same pods; a remembered
action that never shows up within :data:`FORGET_AFTER_S` is forgotten and planned again.

A decision on a large cluster costs what changed since the last one, as in the simulator: each Node and Pod
object is read once (the informer replaces an object when it changes), a node whose object, pods and idle clock
are unchanged keeps its view object and its place in the snapshot's order, and the snapshot says which views
changed (:class:`capstan.capacity.Snapshot` ``changes``), so the planner reads only those.

What the live cluster does not do yet (the simulator does): move running pods (room moves, repacks); a live plan
is made with ``consolidate`` and ``make_room_moves`` off. The nodes it holds as headroom are not drained, and
with a placeholder namespace placeholder pods hold their free GPUs.
"""

from __future__ import annotations

import heapq
import logging
import math
import operator
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from capstan.capacity._plan_types import NodeChanges
from capstan.capacity.controller import Activity
from capstan.capacity.live._objects import (
    GATE,
    GPU_AT_ANNOTATION,
    GPU_RESOURCE,
    PLACEHOLDER_LABEL,
    PLACEHOLDER_PRIORITY_CLASS,
    PROMISED_ANNOTATION,
    PURPOSE_LABEL,
    epoch,
    free_resources,
    is_managed,
    is_placeholder,
    is_running_on,
    node_state,
    node_type_of,
    pod_from_object,
    pod_key,
)
from capstan.capacity.model import GPU_MILLI, IN_FLIGHT, NodeState, NodeType, Pod
from capstan.capacity.planner import PLANNED_NODE_LABEL, NodeView, Snapshot
from capstan.kube import ApiError, KubeClient, Resource, resources

log = logging.getLogger(__name__)

PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
FORGET_AFTER_S = 60.0
"""A launch or promise the informers have not shown after this long is forgotten (and planned again)."""
NODE_PREFIX = "capstan-n"


class Provider(Protocol):
    """What launches and removes nodes: kwok in the sandbox, Karpenter NodeClaims on a cloud."""

    name: str

    async def check(self) -> None:
        """Raise :class:`capstan.errors.UserError` (one line) if this provider cannot run on the cluster."""
        ...

    async def launch(self, nt: NodeType, name: str, purpose: str, now: float) -> None: ...

    async def drain(self, name: str, node: Mapping[str, Any]) -> None:
        """Remove the node planned as ``name`` (``node`` is its Node object)."""
        ...

    async def in_flight(self) -> dict[str, tuple[str, str, float]]:
        """Nodes being launched that have no Node object yet: planned id → (type name, purpose, requested at)."""
        ...

    async def advance(self, nodes: Collection[Mapping[str, Any]], busy: set[str], now: float) -> int:
        """The provider's own progress (boot, GPUs, deleting drained nodes); returns how many nodes changed."""
        ...


class EventSink(Protocol):
    async def emit(
        self, obj: Mapping[str, Any], reason: str, message: str, now: float, *, warning: bool = False
    ) -> None: ...


@dataclass
class _Launch:
    type: NodeType
    purpose: Literal["pods", "headroom", "repack"]
    at: float
    sent: bool = False


@dataclass
class ActionLog:
    """What the controller asked for, counted (the dry run logs these and does nothing else)."""

    launches: list[tuple[str, str, str]] = field(default_factory=list)
    promises: list[tuple[str, str]] = field(default_factory=list)
    drains: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Actions the live cluster does not carry out (a move, a drain of a node Capstan did not launch)."""
    headroom: tuple[str, ...] = ()
    reported: tuple[int, int, int] = (0, 0, 0)
    """How many launches, promises and drains have been logged."""


class LiveCluster:
    """The cluster as the controller sees it: ``nodes`` and ``pods`` are the informers' state (key → object),
    read, never written; ``namespace`` limits the managed pods to one namespace (None: all)."""

    def __init__(
        self,
        node_types: tuple[NodeType, ...],
        nodes: Mapping[str, Mapping[str, Any]],
        pods: Mapping[str, Mapping[str, Any]],
        *,
        clock: Callable[[], float],
        namespace: str | None = None,
        placeholder_namespace: str | None = None,
    ) -> None:
        """``placeholder_namespace``: where placeholder pods hold the free GPUs of headroom nodes (None: none are
        made, and headroom nodes are only kept from being drained)."""
        self.node_types = node_types
        self.types = {t.name: t for t in node_types}
        self.recent_window = 3600.0
        self.nodes = nodes
        self._by_id: dict[str, Mapping[str, Any]] = {}
        """The live nodes by the id plans use: their planned-node label (the plan's name for a node Capstan
        launched, whatever name the provider gave it), else the node's name."""
        self._id_of: dict[str, str] = {}
        """Node name → id."""
        self.pods = pods
        self.namespace = namespace
        self.placeholder_namespace = placeholder_namespace
        self._priority_class_made = False
        self.clock = clock
        self.log = ActionLog()
        self.arrivals = 0
        self.launches = 0
        self.drains = 0
        self._seen: set[str] = set()
        self._first_seen: dict[str, float] = {}
        """Managed pod → when :meth:`observe` first saw it (a closer arrival than its creationTimestamp)."""
        self._recent: deque[Pod] = deque()
        self._idle: dict[str, float] = {}
        self._repack_up: set[str] = set()
        """Nodes launched for a repack seen taking pods (each counts once for :attr:`Activity.repack_up_at`)."""
        self._repack_up_at = -math.inf
        self._launched: dict[str, _Launch] = {}
        self._promised: dict[str, tuple[str, float]] = {}
        """pod → (node, when): promises made and not yet seen in the pod's annotations (or its binding)."""
        self._to_drain: list[str] = []
        self._held: frozenset[str] = frozenset()
        self._wakes: list[tuple[float, str]] = []
        self._wake_set: set[tuple[float, str]] = set()
        self._next_id = 0
        self._pods_read: dict[str, tuple[Mapping[str, Any], Pod]] = {}
        self._pod_facts: dict[str, tuple[Mapping[str, Any], bool, str, str, str]] = {}
        """Informer key → (object, managed here, node it holds resources on, node Capstan released it to,
        namespace/name), read once per object as :attr:`_pods_read` is."""
        self._node_facts: dict[str, tuple[Mapping[str, Any], NodeType | None, NodeState]] = {}
        """Node id → (object, type, state), read once per object."""
        self._views: dict[str, tuple[tuple[object, ...], NodeView]] = {}
        """Node id → (what its view was made from, the view): a node whose object, pods and idle clock are
        unchanged keeps its view object, so the planner, which compares views by identity, reads only the
        nodes that changed (:attr:`Snapshot.changes`)."""
        self._nodes_shown: tuple[NodeView, ...] = ()
        """The last snapshot's nodes: the next one keeps their order and says what changed since."""
        self.event_failures = 0
        """Events that could not be written (they are not retried)."""

    # ----- what the informers show -----
    def _facts(self, key: str, obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool, str, str, str]:
        """(``obj``, managed here, the node it holds resources on, the node Capstan released it to, its
        namespace/name), read once per object: a decision on a large cluster reads every pod, and most are the
        same objects as before."""
        cached = self._pod_facts.get(key)
        if cached is not None and cached[0] is obj:
            return cached
        managed = is_managed(obj) and (
            self.namespace is None or (obj.get("metadata") or {}).get("namespace") == self.namespace
        )
        facts = (obj, managed, is_running_on(obj), _released_to(obj), pod_key(obj))
        self._pod_facts[key] = facts
        return facts

    def _scan(self) -> tuple[list[tuple[str, Mapping[str, Any]]], dict[str, list[Pod]]]:
        """One pass over the pods: the managed ones (namespace/name and object, in the informer's order) and the pods
        holding resources per node: bound and not finished, or released to a node by Capstan (gate off, pinned
        to it) and not yet bound by the scheduler."""
        managed: list[tuple[str, Mapping[str, Any]]] = []
        running: dict[str, list[Pod]] = {}
        facts, id_of = self._facts, self._id_of
        for key, obj in self.pods.items():  # bounded by the informer's pods
            _, mine, on, released, name = facts(key, obj)
            if mine:
                managed.append((name, obj))
            node = id_of.get(on, on) if on else released
            if node:
                running.setdefault(node, []).append(self._pod(obj, name))
        return managed, running

    def _managed(self) -> list[Mapping[str, Any]]:
        facts = self._facts
        return [obj for key, obj in self.pods.items() if facts(key, obj)[1]]

    def _node(self, nid: str, obj: Mapping[str, Any]) -> tuple[NodeType | None, NodeState]:
        """A node's type and state, read once per object."""
        cached = self._node_facts.get(nid)
        if cached is not None and cached[0] is obj:
            return cached[1], cached[2]
        nt, state = node_type_of(obj, self.types), node_state(obj)
        self._node_facts[nid] = (obj, nt, state)
        return nt, state

    def _pod(self, obj: Mapping[str, Any], key: str | None = None) -> Pod:
        """The planner's view of a pod object, read once per object (the informer replaces an object when it
        changes, so the same object is the same pod); entries of pods that are gone are dropped by observe.
        ``key``: its namespace/name, if known."""
        key = pod_key(obj) if key is None else key
        cached = self._pods_read.get(key)
        if cached is not None and cached[0] is obj:
            return cached[1]
        pod = pod_from_object(obj)
        seen = self._first_seen.get(key)
        if seen is not None and pod.arrival <= seen:
            # creationTimestamp is whole seconds, so a pod arrived within the second after it: when this
            # controller saw it within that second, when it saw it is the closer (a compressed replay's 20
            # trace seconds), and at most a second late otherwise
            pod = replace(pod, arrival=min(seen, pod.arrival + 1.0))
        self._pods_read[key] = (obj, pod)
        return pod

    def _promise_of(self, obj: Mapping[str, Any]) -> str:
        annotated = str(((obj.get("metadata") or {}).get("annotations") or {}).get(PROMISED_ANNOTATION, ""))
        mine = self._promised.get(pod_key(obj))
        return mine[0] if mine is not None else annotated

    def observe(self, in_flight: Mapping[str, tuple[str, str, float]] | None = None) -> None:
        """Fold what the informers show into the counters: new managed pods are arrivals; actions the
        informers now show (or that never showed within :data:`FORGET_AFTER_S`) are forgotten. ``in_flight``:
        nodes the provider is launching that have no Node yet (id → type name, purpose, requested at), so a
        restarted controller counts them as launched. Call it before reading the cluster (the loop does)."""
        now = self.clock()
        self._by_id, self._id_of = {}, {}
        for name, obj in self.nodes.items():
            labels = (obj.get("metadata") or {}).get("labels") or {}
            nid = str(labels.get(PLANNED_NODE_LABEL) or name)
            self._by_id[nid] = obj
            self._id_of[name] = nid
        for nid, (type_name, purpose, at) in (in_flight or {}).items():
            nt = self.types.get(type_name)
            if nt is not None and nid not in self._by_id and nid not in self._launched:
                kind: Literal["pods", "headroom", "repack"] = (
                    "headroom" if purpose == "headroom" else "repack" if purpose == "repack" else "pods"
                )
                self._launched[nid] = _Launch(nt, kind, at, sent=True)
        fresh = []
        for obj in self._managed():
            key = pod_key(obj)
            if key not in self._seen:
                self._seen.add(key)
                self._first_seen[key] = now
                self.arrivals += 1
                fresh.append(self._pod(obj))
        # the forecast reads arrivals in time order (ties by name, for determinism)
        fresh.sort(key=lambda p: (p.arrival, p.name))
        if fresh and self._recent and fresh[0].arrival < self._recent[-1].arrival:
            self._recent = deque(sorted([*self._recent, *fresh], key=lambda p: (p.arrival, p.name)))
        else:
            self._recent.extend(fresh)
        for name, launch in list(self._launched.items()):
            if name in self._by_id or (launch.sent and now - launch.at > FORGET_AFTER_S):
                del self._launched[name]
        for key, (node, at) in list(self._promised.items()):
            current = self.pods.get(key)
            shown = current is not None and self._annotated(current) == node
            if current is None or not is_managed(current) or shown or now - at > FORGET_AFTER_S:
                del self._promised[key]
        for nid in (*self._by_id, *self._launched):
            self._next_id = max(self._next_id, _id_num(nid) + 1)
        if len(self._seen) > 2 * len(self.pods) + 1024:  # bounded: forget pods that are gone
            self._seen &= set(self.pods)
            self._first_seen = {k: v for k, v in self._first_seen.items() if k in self.pods}
        if len(self._pods_read) > 2 * len(self.pods) + 1024:
            self._pods_read = {k: v for k, v in self._pods_read.items() if k in self.pods}
        if len(self._pod_facts) > 2 * len(self.pods) + 1024:
            self._pod_facts = {k: v for k, v in self._pod_facts.items() if k in self.pods}
        if len(self._node_facts) > 2 * len(self._by_id) + 1024:
            self._node_facts = {k: v for k, v in self._node_facts.items() if k in self._by_id}

    @staticmethod
    def _annotated(obj: Mapping[str, Any]) -> str:
        return str(((obj.get("metadata") or {}).get("annotations") or {}).get(PROMISED_ANNOTATION, ""))

    def has_pending(self) -> bool:
        return any(not self._live_promise(obj) for obj in self._managed())

    def pending_count(self) -> int:
        """Managed pods not promised to a live node."""
        return sum(1 for obj in self._managed() if not self._live_promise(obj))

    def _live_promise(self, obj: Mapping[str, Any]) -> str:
        """The node a managed pod is promised to, if that node is still there and not draining."""
        node = self._promise_of(obj)
        if not node:
            return ""
        if node in self._launched:
            return node
        n = self._by_id.get(node)
        if n is None or self._node(node, n)[1] is NodeState.DRAINING:
            return ""
        return node

    def _running(self) -> dict[str, list[Pod]]:
        """Pods holding resources per node (:meth:`_scan`)."""
        return self._scan()[1]

    def activity(self) -> Activity:
        running = self._running()
        empty = []
        repack_waiting = False
        # the nodes any pod is promised to: read only when a repack node is seen for the first time
        promised: set[str] | None = None
        self._repack_up &= self._by_id.keys()
        for name, node in self._by_id.items():
            nt, state = self._node(name, node)
            if nt is None or state is not NodeState.GPU_ALLOCATABLE:
                continue
            labels = (node.get("metadata") or {}).get("labels") or {}
            is_repack = labels.get(PURPOSE_LABEL) == "repack"
            if is_repack and name not in self._repack_up:
                # first seen taking pods: as the simulator's node coming up, it counts if no pod was promised to
                # it (the promise annotation stays on a pod after its release), pods the scheduler put there or not
                self._repack_up.add(name)
                if promised is None:
                    promised = {self._promise_of(obj) for obj in self.pods.values()}
                if name not in promised:
                    self._repack_up_at = self.clock()
            if not running.get(name):
                empty.append(name)
                repack_waiting = repack_waiting or is_repack
        return Activity(
            self.arrivals,
            self.launches,
            self.drains,
            tuple(sorted(empty)),
            repack_waiting,
            self._repack_up_at,
        )

    def snapshot(self, *, peek: bool = False) -> Snapshot:
        """The cluster as a plan reads it, the actions recorded and not yet seen included. With ``peek`` (a look
        between plans, not for one) the next snapshot still says what changed since the last plan's."""
        now = self.clock()
        while self._recent and self._recent[0].arrival < now - self.recent_window:
            self._recent.popleft()
        managed, running = self._scan()
        # name order: a plan's ties are broken the same way each time
        managed.sort(key=operator.itemgetter(0))
        pending: list[Pod] = []
        promised: list[tuple[str, str]] = []
        waiting_on: dict[str, list[Pod]] = {}
        for key, obj in managed:
            pod = self._pod(obj, key)
            node = self._live_promise(obj)
            if node:
                promised.append((pod.name, node))
                waiting_on.setdefault(node, []).append(pod)
            else:
                pending.append(pod)
        here: dict[str, NodeView] = {}
        views: dict[str, tuple[tuple[object, ...], NodeView]] = {}
        for name, node_obj in self._by_id.items():
            nt, state = self._node(name, node_obj)
            if nt is None or state is NodeState.DRAINING:
                continue
            on, promised_to = running.get(name), waiting_on.get(name)
            bound = tuple(on) if on else ()
            waiting = tuple(promised_to) if promised_to else ()
            usable = state not in IN_FLIGHT or (state is NodeState.READY and nt.gpu == 0)
            if bound or waiting or not usable:
                # empty only once it could take pods, as in the simulator: a node's boot is not idle time
                # towards min_idle_s, or a headroom node whose boot outlasts that wait is drained the moment
                # it comes up
                self._idle.pop(name, None)
                idle_since = None
            else:
                idle_since = self._idle.setdefault(name, now)
            made_of: tuple[object, ...] = (node_obj, nt, state, bound, waiting, idle_since)
            cached = self._views.get(name)
            if cached is not None and cached[0] == made_of:
                view = cached[1]
            else:
                view = _node_view(name, node_obj, nt, state, bound, waiting, idle_since, now)
            views[name] = (made_of, view)
            here[name] = view
        for name, launch in self._launched.items():
            if name in self._by_id:
                continue
            taken = tuple(waiting_on.get(name, ()))
            made_of = (launch.type, launch.purpose, launch.at, taken)
            cached = self._views.get(name)
            if cached is not None and cached[0] == made_of:
                view = cached[1]
            else:
                view = _launch_view(name, launch, taken)
            views[name] = (made_of, view)
            here[name] = view
        self._views = views
        # bounded: a node gone (drained, deleted) leaves no idle clock behind
        if len(self._idle) > len(views):
            self._idle = {k: v for k, v in self._idle.items() if k in views}
        nodes, changes = self._in_order(here, peek=peek)
        return Snapshot(
            now=now,
            node_types=self.node_types,
            nodes=nodes,
            pending=tuple(pending),
            promised=tuple(promised),
            recent=tuple(self._recent),
            next_id=self._next_id,
            node_prefix=NODE_PREFIX,
            changes=changes,
        )

    def _in_order(
        self, here: dict[str, NodeView], *, peek: bool = False
    ) -> tuple[tuple[NodeView, ...], NodeChanges | None]:
        """The snapshot's nodes: the last snapshot's still here, in its order (each the same view object while
        it is unchanged), then new ones in launch order; and what changed since the last snapshot (None if
        nothing did: then the nodes are the last snapshot's tuple itself)."""
        since = self._nodes_shown
        kept: list[NodeView] = []
        changed: list[NodeView] = []
        removed: list[str] = []
        for old in since:  # bounded by the last snapshot's nodes
            view = here.pop(old.id, None)
            if view is None:
                removed.append(old.id)
                continue
            kept.append(view)
            if view is not old:
                changed.append(view)
        fresh = sorted(here.values(), key=lambda v: (_id_num(v.id), v.id))
        if not changed and not removed and not fresh:
            return since, None
        nodes = (*kept, *fresh)
        if not peek:
            self._nodes_shown = nodes
        return nodes, NodeChanges(since, (*changed, *fresh), tuple(removed))

    # ----- what the controller asks for (recorded; carried out by carry_out) -----
    def launch(
        self, type_name: str, *, purpose: Literal["pods", "headroom", "repack"], node_id: str
    ) -> object:
        nt = self.types[type_name]
        self._launched[node_id] = _Launch(nt, purpose, self.clock())
        self._next_id = max(self._next_id, _id_num(node_id) + 1)
        self.launches += 1
        self.log.launches.append((node_id, type_name, purpose))
        return node_id

    def promise(self, pod_name: str, nid: str) -> bool:
        obj = self.pods.get(pod_name)
        if obj is None or not is_managed(obj):
            return False
        if nid not in self._launched and nid not in self._by_id:
            return False
        self._promised[pod_name] = (nid, self.clock())
        self.log.promises.append((pod_name, nid))
        return True

    def move(self, pod_name: str, nid: str) -> bool:
        self.log.refused.append(f"move {pod_name} to {nid}: moving running pods is not done live yet")
        return False

    def drain(self, nid: str) -> None:
        node = self._by_id.get(nid)
        labels = ((node or {}).get("metadata") or {}).get("labels") or {}
        if node is None or PURPOSE_LABEL not in labels:
            self.log.refused.append(f"drain {nid}: not a node Capstan launched")
            return
        if nid not in self._to_drain:
            self._to_drain.append(nid)
            self.drains += 1
            self.log.drains.append(nid)

    def hold_headroom(self, nids: Collection[str]) -> None:
        self._held = frozenset(nids)
        self.log.headroom = tuple(sorted(self._held))

    def wake(self, t: float, tag: str) -> None:
        t = max(t, self.clock())
        if (t, tag) not in self._wake_set:
            self._wake_set.add((t, tag))
            heapq.heappush(self._wakes, (t, tag))

    def due(self, now: float) -> list[str]:
        """The wake-up tags whose time has come, in time order (removed)."""
        out = []
        while self._wakes and self._wakes[0][0] <= now:
            t, tag = heapq.heappop(self._wakes)
            self._wake_set.discard((t, tag))
            out.append(tag)
        return out

    def next_wake(self) -> float | None:
        return self._wakes[0][0] if self._wakes else None

    # ----- carrying it out -----
    async def carry_out(
        self,
        client: KubeClient,
        provider: Provider,
        *,
        dry_run: bool = False,
        events: EventSink | None = None,
    ) -> list[str]:
        """Make the API calls the recorded actions need; returns one line per call that failed (each is tried
        again on the next pass). A dry run makes no call. ``events`` gets an Event on each pod and node acted
        for (a failed Event is counted in :attr:`event_failures`, never retried)."""
        if dry_run:
            self._to_drain.clear()
            for launch in self._launched.values():
                launch.sent = True
            return []
        failed: list[str] = []
        now = self.clock()
        for name, launch in sorted(self._launched.items()):
            if launch.sent or name in self._by_id:
                continue
            try:
                await provider.launch(launch.type, name, launch.purpose, now)
                launch.sent = True
                launch.at = now
                for key, (node, _) in sorted(self._promised.items()):
                    if node == name and key in self.pods:
                        msg = f"launched node {name} ({launch.type.name}) for this pod"
                        await self._event(events, self.pods[key], "CapstanLaunched", msg, now)
            except ApiError as exc:
                if exc.conflict:  # already there (an earlier attempt went through)
                    launch.sent = True
                else:
                    failed.append(f"launch {name}: {exc}")
        for key, (node, _) in sorted(self._promised.items()):
            obj = self.pods.get(key)
            if obj is None or self._annotated(obj) == node or self._takes_pods(node):
                continue  # a node that takes pods gets the pod released to it at once (below)
            namespace, name = key.split("/", 1)
            try:
                await client.patch(
                    resources.PODS,
                    name,
                    {"metadata": {"annotations": {PROMISED_ANNOTATION: node}}},
                    namespace=namespace,
                )
            except ApiError as exc:
                failed.append(f"promise {key} to {node}: {exc}")
                continue
            msg = f"promised to node {node}; the pod stays gated until the node's GPUs are allocatable"
            await self._event(events, obj, "CapstanPromised", msg, now)
        for name in list(self._to_drain):
            node_obj = self._by_id.get(name)
            if node_obj is None:
                self._to_drain.remove(name)
                continue
            try:
                await provider.drain(name, node_obj)
                self._to_drain.remove(name)
                msg = "empty, and not needed by the forecast within its boot delay: draining"
                await self._event(events, {"kind": "Node", **node_obj}, "CapstanDraining", msg, now)
            except ApiError as exc:
                failed.append(f"drain {name}: {exc}")
        failed += await self._release(client, events, now)
        if self.placeholder_namespace is not None:
            failed += await self._hold_with_placeholders(client, self.placeholder_namespace)
        return failed

    def _placeholders_wanted(self) -> dict[str, tuple[str, int]]:
        """Placeholder pod name → (node id, free whole GPUs) for each held node that takes pods."""
        running = self._running()
        out: dict[str, tuple[str, int]] = {}
        for nid in sorted(self._held):
            node = self._by_id.get(nid)
            nt, state = self._node(nid, node) if node is not None else (None, NodeState.DRAINING)
            if nt is None or state is not NodeState.GPU_ALLOCATABLE:
                continue
            free = nt.gpu - sum(p.num_gpu for p in running.get(nid, []))
            if free > 0:
                out[f"capstan-headroom-{nid}"[:63]] = (nid, free)
        return out

    async def _hold_with_placeholders(self, client: KubeClient, namespace: str) -> list[str]:
        """Placeholder pods for the held nodes' free GPUs (PriorityClass ``capstan-headroom``, value -10): the
        scheduler preempts them for any real pod, and no other pod takes the room meanwhile. A placeholder
        whose node is no longer held, or whose size no longer matches, is deleted (and made again)."""
        failed: list[str] = []
        if not self._priority_class_made:
            try:
                await client.create(PRIORITY_CLASSES, placeholder_priority_class())
                self._priority_class_made = True
            except ApiError as exc:
                if exc.conflict:
                    self._priority_class_made = True
                else:
                    return [f"PriorityClass {PLACEHOLDER_PRIORITY_CLASS}: {exc}"]
        wanted = self._placeholders_wanted()
        have = {
            str(obj["metadata"]["name"]): obj
            for obj in self.pods.values()
            if is_placeholder(obj) and (obj.get("metadata") or {}).get("namespace") == namespace
        }
        for name, obj in sorted(have.items()):
            nid, gpus = wanted.get(name, ("", 0))
            if not nid or _placeholder_gpus(obj) != gpus:
                try:
                    await client.delete(resources.PODS, name, namespace, grace_seconds=0)
                except ApiError as exc:
                    failed.append(f"placeholder {name}: {exc}")
        for name, (nid, gpus) in sorted(wanted.items()):
            if name in have:
                continue
            node = self._by_id[nid]
            try:
                await client.create(resources.PODS, placeholder_manifest(name, namespace, nid, node, gpus))
            except ApiError as exc:
                if not exc.conflict:
                    failed.append(f"placeholder {name}: {exc}")
        return failed

    async def _event(
        self, events: EventSink | None, obj: Mapping[str, Any], reason: str, message: str, now: float
    ) -> None:
        if events is None:
            return
        try:
            await events.emit(obj, reason, message, now)
        except (ApiError, OSError) as exc:
            self.event_failures += 1
            log.debug("event %s not written: %s", reason, exc)

    async def _release(self, client: KubeClient, events: EventSink | None, now: float) -> list[str]:
        """Promised pods whose node now takes pods: required node affinity to it, and the gate removed (one
        patch: the API server allows adding node affinity to a pod while it is gated)."""
        failed = []
        for obj in self._managed():
            node = self._live_promise(obj)
            if not node or not self._takes_pods(node):
                continue
            meta = obj.get("metadata") or {}
            spec = obj.get("spec") or {}
            gates = [g for g in spec.get("schedulingGates") or [] if (g or {}).get("name") != GATE]
            affinity = dict(spec.get("affinity") or {})
            node_affinity = dict(affinity.get("nodeAffinity") or {})
            required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
            node_obj = self._by_id[node]
            node_meta = node_obj.get("metadata") or {}
            if PLANNED_NODE_LABEL in (node_meta.get("labels") or {}):
                pin = {"key": PLANNED_NODE_LABEL, "operator": "In", "values": [node]}
            else:
                pin = {
                    "key": "kubernetes.io/hostname",
                    "operator": "In",
                    "values": [str(node_meta.get("name"))],
                }
            terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
            for t in terms:  # terms are ORed: the pin goes into each
                t["matchExpressions"] = [*(t.get("matchExpressions") or []), pin]
            required["nodeSelectorTerms"] = terms
            node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
            affinity["nodeAffinity"] = node_affinity
            # a merge patch (no resourceVersion): lists are replaced whole, so the gate list and the terms are
            # exactly these, whatever else changed on the pod meanwhile
            body = {
                "metadata": {"annotations": {PROMISED_ANNOTATION: node}},
                "spec": {"schedulingGates": gates, "affinity": affinity},
            }
            try:
                await client.patch(
                    resources.PODS, str(meta.get("name")), body, namespace=meta.get("namespace")
                )
            except ApiError as exc:
                failed.append(f"release {pod_key(obj)} to {node}: {exc}")
                continue
            msg = f"released to node {node} for the scheduler to bind"
            await self._event(events, obj, "CapstanPlaced", msg, now)
        return failed

    def _takes_pods(self, name: str) -> bool:
        n = self._by_id.get(name)
        return n is not None and self._node(name, n)[1] is NodeState.GPU_ALLOCATABLE

    def placeholders(self) -> list[str]:
        """The placeholder pods the informers show (namespace/name)."""
        return sorted(pod_key(obj) for obj in self.pods.values() if is_placeholder(obj))

    def busy_nodes(self) -> set[str]:
        facts = self._facts
        return {n for key, obj in self.pods.items() if (n := facts(key, obj)[2])}


def placeholder_priority_class() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PLACEHOLDER_PRIORITY_CLASS},
        "value": -10,
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": "Capstan's headroom placeholders: any real pod preempts them.",
    }


def placeholder_manifest(
    name: str, namespace: str, nid: str, node: Mapping[str, Any], gpus: int
) -> dict[str, Any]:
    """A pause pod holding ``gpus`` GPUs on node ``nid`` (pinned by its planned-node label, else its hostname)."""
    meta = node.get("metadata") or {}
    if PLANNED_NODE_LABEL in (meta.get("labels") or {}):
        pin = {"key": PLANNED_NODE_LABEL, "operator": "In", "values": [nid]}
    else:
        pin = {"key": "kubernetes.io/hostname", "operator": "In", "values": [str(meta.get("name"))]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {PLACEHOLDER_LABEL: nid}},
        "spec": {
            "priorityClassName": PLACEHOLDER_PRIORITY_CLASS,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [pin]}]
                    }
                }
            },
            "containers": [
                {
                    "name": "hold",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "1m", "memory": "1Mi", GPU_RESOURCE: str(gpus)},
                        "limits": {GPU_RESOURCE: str(gpus)},
                    },
                }
            ],
        },
    }


def _placeholder_gpus(obj: Mapping[str, Any]) -> int:
    try:
        containers = (obj.get("spec") or {}).get("containers") or [{}]
        return int(str(((containers[0].get("resources") or {}).get("requests") or {}).get(GPU_RESOURCE, "0")))
    except ValueError:
        return 0


def _released_to(obj: Mapping[str, Any]) -> str:
    """The node Capstan released an unbound pod to ('' if it did not, or the pod is bound, gated or done)."""
    spec = obj.get("spec") or {}
    if is_placeholder(obj):
        return ""
    if (
        spec.get("nodeName")
        or is_managed(obj)
        or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    ):
        return ""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return ""
    return str(((obj.get("metadata") or {}).get("annotations") or {}).get(PROMISED_ANNOTATION, ""))


def _devices(nt: NodeType, used: int) -> tuple[int, ...]:
    free = max(0, nt.gpu - used)
    return tuple([GPU_MILLI] * free + [0] * (nt.gpu - free))


def _node_view(
    name: str,
    node: Mapping[str, Any],
    nt: NodeType,
    state: NodeState,
    bound: tuple[Pod, ...],
    waiting: tuple[Pod, ...],
    idle_since: float | None,
    now: float,
) -> NodeView:
    """The planner's view of a live node running ``bound`` with ``waiting`` promised to it."""
    meta = node.get("metadata") or {}
    cpu, mem, devs = free_resources(node, nt, [*bound, *waiting])
    annotations = meta.get("annotations") or {}
    created = epoch(meta.get("creationTimestamp"), now)
    try:
        avail = float(annotations.get(GPU_AT_ANNOTATION, created))
    except ValueError:
        avail = created
    purpose = str((meta.get("labels") or {}).get(PURPOSE_LABEL, "static"))
    return NodeView(
        name, nt.name, state, cpu, mem, devs, len(bound) + len(waiting), avail, idle_since, bound, purpose
    )


def _launch_view(name: str, launch: _Launch, taken: tuple[Pod, ...]) -> NodeView:
    """The planner's view of a node launched and not yet a Node, with ``taken`` promised to it."""
    nt = launch.type
    avail = launch.at + nt.boot_delay.mean() + (nt.gpu_ready_delay.mean() if nt.gpu else 0.0)
    return NodeView(
        name,
        nt.name,
        NodeState.REQUESTED,
        nt.cpu_milli - sum(p.cpu_milli for p in taken),
        nt.memory_mib - sum(p.memory_mib for p in taken),
        _devices(nt, sum(p.num_gpu for p in taken)),
        len(taken),
        avail,
        None,
        (),
        launch.purpose,
    )


def _id_num(name: str) -> int:
    if not name.startswith(NODE_PREFIX):
        return -1
    digits = name[len(NODE_PREFIX) :]
    return int(digits) if digits.isdigit() else -1


_OTHER_AUTOSCALERS = (
    ("cluster-autoscaler", "cluster-autoscaler"),
    ("karpenter", "karpenter-leader-election"),
)
"""(name, leader Lease in kube-system) of the node autoscalers Capstan would fight over the same pods."""


async def other_autoscalers(client: KubeClient, *, allow: Collection[str] = (), now: float) -> list[str]:
    """Node autoscalers already running on the cluster, one line each: a Deployment of that name in any
    namespace, or its leader Lease in kube-system renewed within its duration. ``allow`` names the ones that may
    run (Karpenter, when it is the provider)."""
    from capstan.kube import parse_timestamp

    found = []
    for name, lease_name in _OTHER_AUTOSCALERS:
        if name in allow:
            continue
        deployments, _ = await client.list(resources.DEPLOYMENTS, field_selector=f"metadata.name={name}")
        for d in deployments:
            meta = d.get("metadata") or {}
            if ((d.get("spec") or {}).get("replicas") or 0) > 0:
                found.append(f"{name} is running (Deployment {meta.get('namespace')}/{meta.get('name')})")
        try:
            lease = await client.get(resources.LEASES, lease_name, "kube-system")
        except ApiError as exc:
            if exc.not_found:
                continue
            raise
        spec = lease.get("spec") or {}
        renewed = parse_timestamp(spec.get("renewTime")) or 0.0
        if spec.get("holderIdentity") and now - renewed <= float(spec.get("leaseDurationSeconds") or 15):
            found.append(
                f"{name} is running (it holds the Lease kube-system/{lease_name}: {spec['holderIdentity']})"
            )
    return found
