"""The scratch state of one planning pass (:class:`_Work`: the bins, one per existing, in-flight or planned node,
and the scan lists that find the best bin fast) and the placement search over it: a pod or a gang into the bins
or onto a new node of the best type (:func:`_place_unit`), and freeing an allocatable node for a pending pod
(:func:`_make_room`).

NOTE: one unit of almost 600 lines on purpose. The search methods read and update the bins and scan lists in
step (each placement moves a bin between the lists), so splitting them would spread one invariant over modules.
"""

from __future__ import annotations

import bisect
import itertools
import math

from capstan.capacity._cache import PlanCache, _queue_key, pod_value
from capstan.capacity._nodes import _Bin, repack_waste
from capstan.capacity._plan_types import NodeView, PlannerConfig, Snapshot
from capstan.capacity.forecast import Forecast, headroom_wait
from capstan.capacity.model import GPU_MILLI, NodeType, Pod, PodShape
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


class _Work:
    """The mutable scratch state of one ``plan`` call (never escapes it)."""

    def __init__(self, snap: Snapshot, cfg: PlannerConfig, cache: PlanCache | None) -> None:
        self.snap = snap
        self.cfg = cfg
        if cache is None or cache.node_types is not snap.node_types or len(cache.why) > cache.limit:
            cache = PlanCache(snap.node_types) if cache is None else cache.reset(snap.node_types)
        self.cache = cache
        self.types = cache.by_name
        nodes = cache.nodes
        price, threshold = cache.gpu_price, cfg.consolidation_threshold
        nodes.sync(
            snap.nodes,
            self.types,
            (price, threshold),
            lambda nt, gpus, cpu: repack_waste(nt, gpus, cpu, price, threshold),
            snap.changes,
            snap.now,
        )
        nodes.dirty = True  # until :meth:`release` gives the bins back
        self.nodes = nodes
        self.count: dict[str, int] = dict(nodes.count)
        self.new_bins: list[_Bin] = []
        self.touched: list[_Bin] = []
        """Bins of the snapshot's nodes this plan changed (:meth:`release` restores them)."""
        self.views: dict[str, NodeView] = nodes.views
        self.next_id = snap.next_id
        self._mix: list[Pod] | None = None
        self.type_memo: dict[tuple[object, ...], NodeType | str] = {}
        self.live: set[str] = nodes.live
        """Nodes neither draining nor gone (of any type)."""
        self.repack_first = False
        """This plan searches for repacks before it places headroom."""
        self.passed_over = False
        """The repack search passed over a candidate because forecast headroom held room on it."""
        self._evictable: dict[int, list[_Bin]] = {}
        self.room_moves: list[tuple[Pod, _Bin]] = []
        """Running pods moved in this plan, and where, to free allocatable nodes for pending pods (:func:`_make_room`)."""
        self.fc = self.cache.forecast(snap, cfg) if cfg.headroom else Forecast((), None)
        # the phantoms headroom places (big forecast pods split into smaller ones), not the forecast's own pods
        self.phantoms = self.cache.phantoms(self.fc, cfg, self.ok_types) if cfg.headroom else []
        # with a headroom wait, a pod that must wait for an in-flight node takes the one up first (best_bin)
        self.soonest = headroom_wait(cfg, cache.horizon) > 0
        # groups of bins alike (:mod:`._nodes`) by kind (a bin's kind never changes) and then only those with a
        # free GPU thousandth (what pods asking for GPUs scan): each a list of sort keys and one of groups, most
        # free CPU first (ties: snapshot order), so a scan stops at the first group with less free CPU than the
        # pod asks for
        self._scan = nodes.scan

    @property
    def bins(self) -> list[_Bin]:
        """Every bin: the snapshot's live nodes in snapshot order, then this plan's new ones (O(nodes): for
        tests and checks, not the placement search)."""
        return sorted(self.nodes.bins.values(), key=lambda b: b.order) + self.new_bins

    def bin(self, nid: str) -> _Bin | None:
        got = self.nodes.bins.get(nid)
        if got is None:
            got = next((b for b in self.new_bins if b.id == nid), None)
        return got

    def release(self) -> None:
        """The plan is made: give the snapshot's bins their nodes' state back for the next decision."""
        self.nodes.restore(self.touched, self.new_bins)
        self.touched = []

    def unfilled(self) -> list[_Bin]:
        """The bins that may have no pods left but phantoms, in :attr:`bins` order: those of empty nodes and
        those this plan changed or opened (every other bin still runs its node's pods)."""
        empty = [self.nodes.bins[nid] for nid in self.nodes.empty]
        seen = {b.id for b in empty}
        empty += [b for b in self.touched if b.id not in seen]
        empty.sort(key=lambda b: b.order)
        return empty + self.new_bins

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
            index = self.nodes.evict  # the snapshot's nodes: a plan's new bins are never allocatable
            end = bisect.bisect_left(index, (max_moves + 1,))
            bins = self.nodes.bins
            got = self._evictable[max_moves] = [bins[e[3]] for e in index[:end]]
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
        # bin that fits decides. Bins of one group (:mod:`._nodes`) score alike but for snapshot order, so only
        # a group's first bin is scored (an exploratory count before groups: a 1,000-pod decision scored 25,363
        # new bins in 420 states)
        scan = self._scan[gpu]
        for rank, kind in enumerate(kinds):
            for group in scan[kind][1]:
                b = group[0]
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
                if b.nt.name not in ok_types:
                    continue
                if exclude and b.id in exclude:
                    # the group's first bin not excluded: the others alike but later in snapshot order
                    b = next((m for m in group if m.id not in exclude), b)
                    if b.id in exclude:
                        continue
                if not b.pods and b.nt.gpu > max_empty_gpus and b.nt.price_per_hour > max_empty_price:
                    continue
                if first_fit and rank == 0:
                    # the first in snapshot order, as a scan in that order would find
                    if first is None or b.order < first[0]:
                        first = (b.order, b)
                    continue
                up = 0.0
                if soonest and kind == "inflight":
                    up = b.avail
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
        for nid in ids:  # bounded by the drains
            b = self.bin(nid)
            if b is not None:
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
        self.nodes.enter(b)

    def _leave(self, b: _Bin) -> None:
        if not b.touched and b.kind != "new":
            b.touched = True
            self.touched.append(b)
        self.nodes.leave(b)

    def open_bin(self, nt: NodeType) -> _Bin:
        b = _Bin(
            f"{self.snap.node_prefix}{self.next_id}",
            nt,
            Capacity.of(nt),
            "new",
            self.nodes.next_order + len(self.new_bins),
        )
        self.next_id += 1
        self.count[nt.name] += 1
        self.new_bins.append(b)
        self._enter(b)
        return b

    def close_bin(self, b: _Bin) -> None:
        self._leave(b)
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
        # a node kept or launched for nothing but a guessed phantom pinned to GPU models is at most this large,
        # unless it costs no more than a type that is not (max_price -inf: no type is); announced pods are not
        # guesses
        max_gpus = max_price = math.inf
        if phantom and pod.gpu_models and pod.name not in w.fc.known:
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
