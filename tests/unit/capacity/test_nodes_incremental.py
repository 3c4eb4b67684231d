"""The planner's nodes kept between decisions (``capstan.capacity._nodes``): brought up to date from what changed,
they are what a fresh build from the same snapshot gives, and a replay decides the same with and without the
simulator's change hints."""

from __future__ import annotations

from dataclasses import replace

import pytest

from capstan.capacity import Controller, Sim, Snapshot
from capstan.capacity._nodes import _Nodes
from capstan.capacity.controller import Cluster
from tests.unit.capacity.test_sim import replay_inputs

pytestmark = pytest.mark.unit


def _shape(nodes: _Nodes) -> object:
    """Everything the planner reads of ``nodes``, with orders replaced by the ranks they give."""
    bins = sorted(nodes.bins.values(), key=lambda b: b.order)
    scan = [
        [(keys[i][0], [b.id for b in groups[i]]) for i in range(len(keys))]
        for lists in nodes.scan
        for keys, groups in lists.values()
    ]
    return (
        [(b.id, b.kind, b.cap, b.pods, b.avail, b.state) for b in bins],
        scan,
        [e[3] for e in nodes.evict],
        [(e[0], e[2]) for e in nodes.wasteful],
        sorted(nodes.empty),
        sorted(nodes.live),
        nodes.count,
    )


class _Checked(Controller):
    """The controller, checking before each decision that its cache's nodes, synced to the snapshot, are those a
    fresh build gives."""

    def __init__(self) -> None:
        super().__init__()
        self.checked = 0

    def on_wake(self, cluster: Cluster, now: float, tag: str) -> None:
        snap = cluster.snapshot()
        kept = self._cache.nodes
        if kept.key:
            kept.sync(snap.nodes, kept.types, kept.key, kept._waste, snap.changes)
            fresh = _Nodes()
            fresh.sync(snap.nodes, kept.types, kept.key, kept._waste)
            assert _shape(kept) == _shape(fresh), f"at {now}"
            self.checked += 1
        super().on_wake(cluster, now, tag)


class _NoHints(Sim):
    """The simulator with its snapshots' change hints left out: the planner compares the nodes itself."""

    def snapshot(self) -> Snapshot:
        return replace(super().snapshot(), changes=None)


def test_nodes_kept_between_decisions_are_those_a_fresh_build_gives() -> None:
    wl, types = replay_inputs("openb", openb_tasks=300)
    policy = _Checked()
    result = Sim(wl, types, policy, seed=0).run()
    assert policy.checked > 100 and result.launches > 10 and result.drains > 0


def test_a_replay_decides_the_same_without_the_simulators_change_hints() -> None:
    wl, types = replay_inputs("openb", openb_tasks=300)
    hinted = Sim(wl, types, Controller(), seed=0).run()
    plain = _NoHints(wl, types, Controller(), seed=0).run()
    assert hinted.events == plain.events
