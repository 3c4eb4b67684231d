"""Trace scaling for the capacity benches (``bench/capacity_policies.py``): the same trace at a multiple of its
load, and node-type limits raised to match. Imported the way the bench scripts import ``goals``."""

from __future__ import annotations

import random
from dataclasses import replace

from capstan.capacity import NodeType, Workload


def grow(workload: Workload, factor: int, seed: int) -> Workload:
    """``factor`` copies of every pod with seeded arrival jitter (up to 60 s): the same trace, ``factor``× the load."""
    if factor <= 1:
        return workload
    rng = random.Random(seed)
    pods = list(workload.pods)
    for k in range(1, factor):
        for p in workload.pods:
            jitter = 0.0 if p.gang else rng.uniform(0, 60)
            pods.append(
                replace(
                    p,
                    name=f"{p.name}~{k}",
                    arrival=p.arrival + jitter,
                    gang=f"{p.gang}~{k}" if p.gang else "",
                )
            )
    pods.sort(key=lambda p: (p.arrival, p.name))
    return Workload(name=f"{workload.name}x{factor}", pods=tuple(pods))


def grow_node_types(types: tuple[NodeType, ...], factor: int) -> tuple[NodeType, ...]:
    return tuple(
        replace(t, max_count=t.max_count * factor if t.max_count is not None else None) for t in types
    )
