"""What the planner keeps of a snapshot's nodes between decisions (:class:`_Nodes`), so a decision costs what
changed since the last one, not what the cluster holds: one bin per live node (:class:`_Bin`), the bins grouped
by state into the scan lists that find the best bin fast, and the indexes the repack search, room moves and
drains read (nodes safe to empty, wasteful nodes, empty nodes).

A plan works on these bins in place and gives every bin it changed back its node's state when it ends
(:meth:`_Nodes.restore`), so the next decision starts from the snapshot again; :meth:`_Nodes.sync` then folds the
next snapshot's changes in: a node whose view is the same object as before is not looked at (the simulator
reuses a node's view while the node is unchanged). It changes no plan, only how fast it is made.

NOTE: a group holds the bins of one kind whose free resources, type, "has pods" and time up are equal: every
test and score of the placement search gives them the same answer but for snapshot order, so the search looks
at the group's first bin only (the first not excluded). On a cluster of 5,000 nodes most live nodes share a
state with others (full nodes, empty nodes of a type), so a pod's search reads a few dozen groups, not every
node with room for it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from capstan.capacity._plan_types import NodeChanges, NodeView
from capstan.capacity.model import NodeState, NodeType
from capstan.capacity.placement import Capacity

Kind = Literal["ready", "inflight", "new"]
KINDS: tuple[Kind, ...] = ("ready", "inflight", "new")
_ID = operator.attrgetter("id")
_ORDER = operator.attrgetter("order")

State = tuple[str, str, int, int, tuple[int, ...], bool, float]
"""A bin's group: (kind, type, free CPU, free memory, free thousandths per device, has pods, time up)."""
ScanList = tuple[list[tuple[int, int]], list[list["_Bin"]]]
"""Sort keys (minus free CPU, first bin's order) and the groups they key, most free CPU first."""


@dataclass(slots=True, eq=False)
class _Bin:
    id: str
    nt: NodeType
    cap: Capacity
    kind: Kind
    order: int
    pods: int = 0
    real: list[str] = field(default_factory=list)
    phantom: int = 0
    avail: float = 0.0
    """When the node's GPUs are (or are expected to be) allocatable (the view's ``available_at``)."""
    state: State | None = None
    """The group it is in (None: in no scan list, e.g. withdrawn by the plan)."""
    touched: bool = False
    """Changed by the plan under way (:meth:`_Nodes.restore` gives it its node's state back)."""


def repack_waste(
    nt: NodeType, gpus_free: float, cpu_free: int, gpu_price: float, threshold: float
) -> float | None:
    """What a node of type ``nt`` with this much free costs an hour beyond its allocated GPUs at ``gpu_price``, the
    lowest price per GPU of any type (GPU nodes), or beyond its allocated CPU share of its price (CPU nodes); None
    when that does not make it a repack candidate (no waste, or a CPU node at least ``threshold`` used)."""
    if nt.gpu:
        waste = nt.price_per_hour - (nt.gpu - gpus_free) * gpu_price
        return waste if waste > 1e-6 else None
    used = 1.0 - cpu_free / nt.cpu_milli
    return nt.price_per_hour * (1.0 - used) if used < threshold else None


def _kind(view: NodeView, nt: NodeType) -> Kind:
    state = view.state
    ready = state is NodeState.GPU_ALLOCATABLE or (state is NodeState.READY and nt.gpu == 0)
    return "ready" if ready else "inflight"


class _Nodes:
    """The bins of a snapshot's live nodes and their scan lists and indexes, kept up to date across snapshots."""

    def __init__(self) -> None:
        self.generation = 0
        """Changes whenever a bin's node state changes (the repack search's memo compares it)."""
        self.dirty = False
        """A plan is under way (or failed before it restored the bins): the next sync rebuilds."""
        self.key: tuple[object, ...] = ()
        """The node types and settings the indexes were built for."""
        self._waste: Callable[[NodeType, float, int], float | None] = lambda nt, gpus, cpu: None
        self.now = -math.inf
        """The time of the snapshot being synced."""
        self.freed: dict[str, float] = {}
        """Per live node: when its free GPU room last grew (it appeared, or pods on it ended or left), as far as
        the snapshots synced show; kept across rebuilds."""
        self._clear({})

    def _clear(self, types: dict[str, NodeType]) -> None:
        self.generation += 1
        self.types = types
        self.prev: tuple[NodeView, ...] = ()
        self._prev_ids: list[str] | None = []
        self.bins: dict[str, _Bin] = {}
        self.views: dict[str, NodeView] = {}
        """The live nodes of a known type, by id."""
        self.live: set[str] = set()
        """Nodes neither draining nor gone (of any type)."""
        self.count: dict[str, int] = dict.fromkeys(types, 0)
        self.next_order = 0
        self.orders: dict[str, int] = {}
        self.groups: dict[State, list[_Bin]] = {}
        self.scan: tuple[dict[str, ScanList], ...] = tuple(
            {kind: ([], []) for kind in KINDS} for _ in (False, True)
        )
        self.evict: list[tuple[int, float, int, str]] = []
        """Allocatable nodes running pods that are all safe to evict: (pods, price, order, id), sorted."""
        self.wasteful: list[tuple[float, int, str]] = []
        """Repack candidates as their nodes stand: (minus waste, order, id), sorted."""
        self.newest: dict[str, tuple[float, float]] = {}
        """Per node in ``wasteful``: the latest arrival of its pods (how long they have all run) and its sort
        key's minus waste."""
        self.empty: set[str] = set()
        """Bins whose node has no pods bound or promised."""

    # ----- following the snapshots -----
    def sync(
        self,
        nodes: tuple[NodeView, ...],
        types: dict[str, NodeType],
        key: tuple[object, ...],
        waste: Callable[[NodeType, float, int], float | None],
        changes: NodeChanges | None = None,
        now: float = -math.inf,
    ) -> None:
        """Make the bins those of ``nodes`` (``key``: what else the indexes depend on; ``changes``: what changed
        since an earlier snapshot, used if that is the one these bins are of; ``now``: the snapshot's time)."""
        self.now = now
        if self.dirty or types is not self.types or key != self.key:
            self._waste = waste
            self.key = key
            self._rebuild(nodes, types)
            return
        prev = self.prev
        if nodes is prev:
            return
        if changes is not None and changes.since is prev:
            for nid in changes.removed:  # bounded by the changes
                self.freed.pop(nid, None)
                if nid in self.orders:
                    self._remove(nid)
            for v in changes.views:
                if v.id in self.orders:
                    self._replace(v)
                else:
                    self._add(v, self.next_order)
                    self.next_order += 1
            self.prev, self._prev_ids = nodes, None
            self.generation += 1
            return
        if len(nodes) == len(prev):
            # most often: the same nodes, some of them changed (all in C: no Python step per node)
            moved = list(itertools.compress(range(len(nodes)), map(operator.is_not, nodes, prev)))
            if all(nodes[i].id == prev[i].id for i in moved):
                for i in moved:
                    self._replace(nodes[i])
                self.prev = nodes
                if moved:
                    self.generation += 1
                return
        ids = list(map(_ID, nodes))
        here = set(ids)
        prev_ids = self.prev_ids
        kept = list(itertools.compress(prev, map(here.__contains__, prev_ids)))
        k = len(kept)
        if list(map(_ID, kept)) != ids[:k] or len(kept) < len(nodes) // 2:
            # a known node moved in the order (or most are new): start again
            self._rebuild(nodes, types)
            return
        for nid in itertools.filterfalse(here.__contains__, prev_ids):
            self.freed.pop(nid, None)
            self._remove(nid)
        for i in itertools.compress(range(k), map(operator.is_not, nodes[:k], kept)):
            self._replace(nodes[i])
        for v in nodes[k:]:
            self._add(v, self.next_order)
            self.next_order += 1
        self.prev, self._prev_ids = nodes, ids
        self.generation += 1

    @property
    def prev_ids(self) -> list[str]:
        """The ids of ``prev``, in order."""
        if self._prev_ids is None:
            self._prev_ids = list(map(_ID, self.prev))
        return self._prev_ids

    def _rebuild(self, nodes: tuple[NodeView, ...], types: dict[str, NodeType]) -> None:
        self._clear(types)
        for i, v in enumerate(nodes):  # bounded by the snapshot's nodes
            self._add(v, i)
        self.next_order = len(nodes)
        self.prev, self._prev_ids = nodes, None
        self.dirty = False
        self.freed = {nid: t for nid, t in self.freed.items() if nid in self.orders}

    def _replace(self, v: NodeView) -> None:
        old = self.views.get(v.id)
        if old is not None and sum(v.devs) > sum(old.devs):
            self.freed[v.id] = self.now
        order = self.orders[v.id]
        self._remove(v.id)
        self._add(v, order)

    def _add(self, v: NodeView, order: int) -> None:
        self.orders[v.id] = order
        state = v.state
        if state is NodeState.DRAINING or state is NodeState.GONE:
            return
        self.live.add(v.id)
        nt = self.types.get(v.type)
        if nt is None:
            return
        self.count[nt.name] += 1
        self.freed.setdefault(v.id, self.now)
        kind = _kind(v, nt)
        b = _Bin(v.id, nt, Capacity(v.cpu, v.mem, list(v.devs)), kind, order, v.pods, avail=v.available_at)
        self.bins[v.id] = b
        self.views[v.id] = v
        self.enter(b)
        if not v.pods:
            self.empty.add(v.id)
        bound = v.bound
        if kind == "ready" and bound and all(p.safe_to_evict for p in bound):
            bisect.insort(self.evict, (len(bound), nt.price_per_hour, order, v.id))
            if v.pods == len(bound):
                waste = self._waste(nt, sum(v.devs) / 1000, v.cpu)
                if waste is not None:
                    bisect.insort(self.wasteful, (-waste, order, v.id))
                    self.newest[v.id] = (max(p.arrival for p in bound), -waste)

    def _remove(self, nid: str) -> None:
        order = self.orders.pop(nid)
        self.live.discard(nid)
        b = self.bins.pop(nid, None)
        if b is None:
            return
        v = self.views.pop(nid)
        self.count[b.nt.name] -= 1
        self.leave(b)
        self.empty.discard(nid)
        bound = v.bound
        if b.kind == "ready" and bound and all(p.safe_to_evict for p in bound):
            entry = (len(bound), b.nt.price_per_hour, order, nid)
            i = bisect.bisect_left(self.evict, entry)
            del self.evict[i]
        got = self.newest.pop(nid, None)
        if got is not None:
            del self.wasteful[bisect.bisect_left(self.wasteful, (got[1], order, nid))]

    # ----- the scan lists -----
    def enter(self, b: _Bin) -> None:
        """Put ``b`` in the group of its state (its scan-list entry moves if it comes first)."""
        cap = b.cap
        state: State = (b.kind, b.nt.name, cap.cpu, cap.mem, tuple(cap.devs), b.pods > 0, b.avail)
        b.state = state
        group = self.groups.get(state)
        if group is None:
            group = self.groups[state] = [b]
            self._list(b, group, b.order, True)
            return
        first = group[0]
        if b.order < first.order:
            self._list(first, group, first.order, False)
            group.insert(0, b)
            self._list(b, group, b.order, True)
        else:
            bisect.insort(group, b, key=_ORDER)

    def leave(self, b: _Bin) -> None:
        """Take ``b`` out of its group (and the scan lists, with the group's first bin)."""
        state = b.state
        if state is None:
            return
        b.state = None
        group = self.groups[state]
        if group[0] is not b:
            del group[bisect.bisect_left(group, b.order, key=_ORDER)]
            return
        self._list(b, group, b.order, False)
        if len(group) == 1:
            del self.groups[state]
            return
        del group[0]
        self._list(group[0], group, group[0].order, True)

    def _list(self, b: _Bin, group: list[_Bin], order: int, add: bool) -> None:
        """Add ``group``'s entry (keyed by ``b``'s free CPU and ``order``) to the scan lists, or remove it."""
        key = (-b.cap.cpu, order)
        keys, groups = self.scan[0][b.kind]
        i = bisect.bisect_left(keys, key)
        if add:
            keys.insert(i, key)
            groups.insert(i, group)
        else:
            del keys[i]
            del groups[i]
        if any(b.cap.devs):
            keys, groups = self.scan[1][b.kind]
            i = bisect.bisect_left(keys, key)
            if add:
                keys.insert(i, key)
                groups.insert(i, group)
            else:
                del keys[i]
                del groups[i]

    def restore(self, touched: list[_Bin], new: list[_Bin]) -> None:
        """Give the bins a plan changed their nodes' state back and drop the bins it opened."""
        for b in new:
            self.leave(b)
        for b in touched:
            self.leave(b)
            v = self.views[b.id]
            b.cap = Capacity(v.cpu, v.mem, list(v.devs))
            b.pods = v.pods
            b.real = []
            b.phantom = 0
            b.touched = False
            self.enter(b)
        self.dirty = False
