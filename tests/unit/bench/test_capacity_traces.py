"""The capacity benches' trace scaling (bench/_capacity_traces.py): a grown trace is that many copies of every pod,
each gang copied as a gang of its own."""

from __future__ import annotations

import pytest
from bench._capacity_traces import grow

from capstan.capacity import synthetic_agentic

pytestmark = pytest.mark.unit


def test_grow_multiplies_pods_and_keeps_gangs_apart() -> None:
    w = synthetic_agentic(1)
    g = grow(w, 3, seed=0)
    assert len(g.pods) == 3 * len(w.pods)
    assert len({p.name for p in g.pods}) == len(g.pods)
    gangs = {p.gang for p in g.pods if p.gang}
    assert len(gangs) == 3 * len({p.gang for p in w.pods if p.gang})
