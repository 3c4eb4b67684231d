"""The planner's repack pass: emptying wasteful allocatable nodes (delete and replacement consolidation in one
search) onto the other nodes or onto fewer, cheaper new ones, over the same scratch state (:class:`._work._Work`)
as placement; :func:`capstan.capacity.plan` runs it in a full plan, after headroom or (``repack_both_orders``)
before."""

from __future__ import annotations

from dataclasses import dataclass

from capstan.capacity._cache import _queue_key
from capstan.capacity._nodes import _Bin, repack_waste
from capstan.capacity._plan_types import K8S_CONSOLIDATE, K8S_MOVE, Drain, Nomination, PlannerConfig
from capstan.capacity._work import _Work
from capstan.capacity.model import GPU_MILLI, NodeType, Pod
from capstan.capacity.placement import Assignment, choose_devices, fits


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
    return repack_waste(nt, gpus_free, cpu_free, w.cache.gpu_price, w.cfg.consolidation_threshold)


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
    for b in w.touched:  # the bins this plan changed, as they stand now; bounded by the snapshot's nodes
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
    # the others as their nodes stand, most waste first: the first that have all run long enough are the only
    # ones that can be among the candidates
    nodes = w.nodes
    untouched = 0
    for neg, order, nid in nodes.wasteful:  # bounded by the snapshot's nodes
        if untouched >= cfg.consolidation_candidates:
            break
        b = nodes.bins[nid]
        if b.touched or now - nodes.newest[nid][0] < cfg.repack_min_age_s:
            continue
        wasteful.append((neg, order, b))
        untouched += 1
    wasteful.sort(key=lambda c: c[:2])
    cands = [b for _, _, b in wasteful[: cfg.consolidation_candidates]]
    if not cands:
        return [], [], set()
    # the trial packings depend only on the candidates and every bin's free resources: skip them when those
    # are exactly as they were when no repack paid (the nodes' generation says the snapshot's bins are as they
    # were; those this plan changed or opened are compared one by one)
    changed = sorted([*w.touched, *w.new_bins], key=lambda b: b.order)
    hosts = _hosts(w, cands, cfg)
    key = (
        tuple(b.id for b in cands),
        tuple(b.id for b in hosts),
        nodes.generation,
        tuple((b.id, b.nt.name, b.kind, b.cap.cpu, b.cap.mem, tuple(b.cap.devs), b.pods) for b in changed),
    )
    if w.cache.no_repack.get(w.repack_first) == key:
        return [], [], set()
    best: tuple[float, int] | None = None
    for size in range(1, min(cfg.repack_group, len(cands)) + 1):
        got = _try_repack(w, cands[:size], cfg)
        if got is not None and (best is None or got.saving > best[0] + 1e-9):
            best = (got.saving, size)
    if best is None:
        filled = _fill_held(w, hosts, cands, cfg)
        if filled is not None:
            return filled
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


def _hosts(w: _Work, cands: list[_Bin], cfg: PlannerConfig) -> list[_Bin]:
    """The candidates whose free room :func:`_fill_held` may fill if no repack of them pays (none when the
    forecast guesses demand)."""
    if w.fc.guessed:
        return []  # free room may be waiting for unannounced arrivals
    now = w.snap.now
    freed = w.nodes.freed
    return [
        b
        for b in cands
        if b.kind == "ready"
        and not b.phantom
        and not b.real
        and b.cap.free_gpu_milli() > 0
        and all(now - p.arrival >= cfg.repack_min_age_s for p in w.views[b.id].bound)
        and now - freed.get(b.id, now) >= cfg.repack_min_age_s
    ]


def _fill_held(
    w: _Work, hosts: list[_Bin], cands: list[_Bin], cfg: PlannerConfig
) -> tuple[list[Drain], list[Nomination], set[str]] | None:
    """Empty one node that wastes nothing into room that has stood free on nodes that stay anyway.

    Run when no repack of the candidates ``cands`` pays: those candidates stay as they are, and each one that is
    allocatable, holds no room for this plan's pods or headroom, has run all its pods at least
    ``repack_min_age_s`` and whose free GPU room has not grown for that long either (:attr:`_Nodes.freed`) is a
    host (:func:`_hosts`). The node emptied is an allocatable node not among the candidates, with no pods placed
    on it by this plan, whose pods have all run that long and are safe to evict and all fit into the hosts' free
    room now (no new or in-flight node): the dearest that does, of the first ``consolidation_candidates``. It
    must pass the same test as any repack (it saves its price, and fewer GPUs stay unallocated).

    Only when the forecast guesses nothing (:attr:`~capstan.capacity.Forecast.guessed` False: every pod is
    announced, and headroom, placed before this, holds room for those due): with guessed demand, free room on a
    node is what unannounced arrivals land in.

    NOTE: told each pod an hour ahead on gpuspec20, a repack filled a new 4-GPU T4 node with four long-running
    pods at the moment a pod pinned to G2 was announced; the 8-GPU G2 node launched for it (and the pods of two
    other repack nodes) then ran with four GPUs free beside the full T4 node, which no repack looked at (it
    wastes nothing), for 35 days (no plan ran from then until the next announcement, 16 days on, which this
    first acts at). Exploratory replays (2026-12-07), told an hour ahead: cost 137,209 -> 136,285 (1.054x ->
    1.047x the oracle's), p99 59 s as before, slow starts 74 -> 78, moves 2,587 -> 2,973; openb default and
    every guessed-forecast figure (Capstan's own forecast, the oracle) unchanged."""
    if not hosts:
        return None
    now = w.snap.now
    nodes = w.nodes
    skip = {b.id for b in cands}
    fillers: list[tuple[float, int, _Bin]] = []
    for _, price, order, nid in nodes.evict:  # bounded by the snapshot's nodes
        b = nodes.bins[nid]
        if nid in skip or b.touched or b.real or b.phantom or b.kind != "ready":
            continue
        bound = w.views[nid].bound
        if b.pods != len(bound) or any(now - p.arrival < cfg.repack_min_age_s for p in bound):
            continue
        fillers.append((-price, order, b))
    fillers.sort(key=lambda c: c[:2])
    for _, _, f in fillers[: cfg.consolidation_candidates]:
        done: list[tuple[Pod, _Bin, Assignment]] = []
        free_at_first = {h.id: _gpus_free(h) for h in hosts}
        for pod in sorted(w.views[f.id].bound, key=_queue_key):
            ok_types = w.ok_types(pod)
            dest = next((h for h in hosts if h.nt.name in ok_types and fits(h.cap, pod)), None)
            if dest is None:
                break
            a = choose_devices(dest.cap, pod)
            w.place(dest, pod, a)
            done.append((pod, dest, a))
        else:
            used = {b.id for _, b, _ in done}
            free_before = _gpus_free(f) + sum(free_at_first[h] for h in used)
            free_after = sum(_gpus_free(h) for h in hosts if h.id in used)
            if f.nt.price_per_hour > 0 and free_after < free_before - 1e-9:
                reason = (
                    f"repack: its pods fit into room long free elsewhere, saving {f.nt.price_per_hour:.2f}/h"
                )
                drains = [Drain(f.id, now, reason, K8S_CONSOLIDATE)]
                moves = [Nomination(p.name, b.id, K8S_MOVE.format(node=b.id)) for p, b, _ in done]
                return drains, moves, used
        w.undo(done, [])
    return None
