"""A fixed cluster, ready from the start: what a team that sizes for the peak pays."""

from __future__ import annotations

from capstan.capacity.sim import Sim


class StaticPolicy:
    """``counts`` nodes of each type (by name), launched ready at the start and never changed."""

    name = "static"

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def start(self, sim: Sim) -> None:
        for nt in sim.node_types:
            for _ in range(self.counts.get(nt.name, 0)):
                sim.launch(nt.name, purpose="static")

    def on_change(self, sim: Sim, now: float) -> None:
        return None

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        return None
