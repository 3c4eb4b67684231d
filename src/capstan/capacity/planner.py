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

This module is the decision itself (:func:`plan`: one pass, or two with ``repack_both_orders``, in the order
above); its parts are modules of their own: the inputs and outputs (``_plan_types``), what is kept between
decisions (``_cache``: :class:`PlanCache`), one pass's scratch state and placement search (``_work``) and the
repack pass (``_repack``).
"""

from __future__ import annotations

from capstan.capacity._cache import PlanCache, _queue_key
from capstan.capacity._nodes import _Bin
from capstan.capacity._plan_types import (
    K8S_LAUNCH,
    K8S_MOVE,
    K8S_NOMINATE_EXISTING,
    K8S_NOMINATE_INFLIGHT,
    PLANNED_NODE_LABEL,
    Drain,
    Launch,
    NodeView,
    Nomination,
    Plan,
    PlannerConfig,
    Scope,
    Snapshot,
)
from capstan.capacity._repack import _repack
from capstan.capacity._work import _ever_fits, _place_unit, _Work
from capstan.capacity.model import Pod, PodShape
from capstan.capacity.placement import choose_devices, fits

__all__ = [
    "PLANNED_NODE_LABEL",
    "Drain",
    "Launch",
    "NodeView",
    "Nomination",
    "Plan",
    "PlanCache",
    "PlannerConfig",
    "Scope",
    "Snapshot",
    "plan",
]


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
    try:
        return _plan_with(w, snapshot, cfg, scope, repack_first=repack_first)
    finally:
        w.release()  # the cache's bins are the snapshot's again, for the next plan


def _plan_with(
    w: _Work, snapshot: Snapshot, cfg: PlannerConfig, scope: Scope, *, repack_first: bool
) -> tuple[Plan, bool]:
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
        known = fc.known
        last: tuple[tuple[PodShape, bool], _Bin] | None = None
        for j, ph in enumerate(phantoms):
            alike = (ph.shape, ph.name in known)
            if last is not None and last[0] == alike and fits(last[1].cap, ph):
                # the same shape as the phantom before, which took the first ready bin that fitted: bins
                # before that one did not fit it and have not changed, so it is still the first fit (alike also
                # in whether a queue announced it: an announced pod may take an empty node a guessed one of its
                # size may not)
                w.place(last[1], ph, choose_devices(last[1].cap, ph))
                last[1].phantom += 1
                continue
            allow = headroom_new < cfg.max_headroom_nodes
            before = len(w.new_bins)
            placed = _place_unit(w, [ph], phantoms, j + 1, allow_new=allow, phantom=True)
            headroom_new += len(w.new_bins) - before
            last = (
                (alike, placed[0][1])
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
    for b in w.unfilled():  # the other bins run pods
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
        elif view.idle_since is not None and snapshot.now < view.idle_since + (
            idle_wait := cfg.min_idle_s if w.fc.guessed else min(cfg.min_idle_s, cfg.known_idle_s)
        ):
            recheck.append(view.idle_since + idle_wait)
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
