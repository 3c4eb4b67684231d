"""What the incumbent emulations (:mod:`._cluster_autoscaler`, :mod:`._karpenter`) share: the grid their periodic
scans run on, how many nodes of a type are live, and the first-fit-decreasing estimate of how many new nodes a set
of pods needs."""

from __future__ import annotations

import math

from capstan.capacity.model import NodeType, Pod
from capstan.capacity.placement import Capacity, choose_devices, fits, take
from capstan.capacity.sim import Sim


def next_scan(now: float, interval: float, last: float) -> float:
    """The first point of the ``interval`` grid at or after ``now`` that is later than ``last`` (the last scan)."""
    t = math.ceil(now / interval - 1e-9) * interval
    return t if t > last else last + interval


def live_count(sim: Sim, nt: NodeType) -> int:
    """Nodes of type ``nt`` neither draining nor gone (what counts against its ``max_count``)."""
    return sum(1 for n in sim.active.values() if n.nt.name == nt.name and n.live)


def first_fit_decreasing(pods: list[Pod], nt: NodeType, limit: int | None) -> tuple[int, list[Pod]]:
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
