"""Demand known before it arrives, held as headroom: a :class:`~capstan.capacity.Forecaster` that adds to the
planner's own forecast the pods a queue has announced (a Job created suspended, a Kueue Workload waiting for
quota, a ProvisioningRequest), and the trace form of that signal for the simulator (:class:`TraceLead`: each pod
announced a fixed lead before it arrives), so a replay can say what knowing demand early buys.

Knowing demand early is what lets provisioning beat reaction: a node launched when a pod is announced, one boot
delay before it arrives, is ready when it comes. The planner needs nothing new for it: announced pods are
forecast pods, and headroom is held for them as for any other.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Protocol

from capstan.capacity._plan_types import PlannerConfig, Snapshot
from capstan.capacity.forecast import Forecast, Forecaster, SlidingForecast
from capstan.capacity.model import Pod

ANNOUNCED_SUFFIX = "~announced"
"""Appended to an announced pod's name in the forecast, so it never shares a name with the pod when it comes."""


class Announcements(Protocol):
    """What a queue says is coming."""

    def announced(self, now: float) -> tuple[tuple[Pod, ...], float | None]:
        """The pods announced at ``now`` and not yet arrived, and when that answer next changes by itself (None:
        not before something else changes)."""
        ...


class AllAnnounced:
    """:class:`Announcements` from several sources at once (suspended Jobs and a gateway's rate, say): every
    source's pods, in the order the sources were given, and the soonest of their next changes."""

    def __init__(self, *sources: Announcements) -> None:
        self.sources = sources

    def announced(self, now: float) -> tuple[tuple[Pod, ...], float | None]:
        pods: list[Pod] = []
        changes: list[float] = []
        for source in self.sources:
            got, at = source.announced(now)
            pods.extend(got)
            if at is not None:
                changes.append(at)
        return tuple(pods), min(changes, default=None)


class TraceLead:
    """A trace's pods, each announced ``lead`` seconds before it arrives (a Job created suspended and admitted
    ``lead`` later, with its pods created then)."""

    def __init__(self, pods: Iterable[Pod], lead: float) -> None:
        if lead < 0:
            raise ValueError(f"a lead of {lead} s: it must be 0 or more")
        self.lead = lead
        self._pods = sorted(pods, key=lambda p: (p.arrival, p.name))
        self._arrivals = [p.arrival for p in self._pods]

    def announced(self, now: float) -> tuple[tuple[Pod, ...], float | None]:
        if self.lead <= 0:
            return (), None
        lo = bisect.bisect_right(self._arrivals, now)  # arrived at or before now: pending, not announced
        hi = bisect.bisect_right(self._arrivals, now + self.lead)
        # the next announcement: the first arrival past now + lead, announced lead before it
        at = self._arrivals[hi] - self.lead if hi < len(self._arrivals) else None
        return tuple(self._pods[lo:hi]), at


class QueuedDemand:
    """A :class:`~capstan.capacity.Forecaster`: ``base``'s forecast (the planner's own, :class:`SlidingForecast`,
    by default) and, added to it, the pods ``queue`` has announced, renamed with :data:`ANNOUNCED_SUFFIX`. With
    ``lookahead_s``, only those expected (``Pod.arrival``) within that many seconds: a node launched for a pod
    further off would idle until it comes, so the time from a launch to allocatable GPUs
    (:func:`~capstan.capacity.gpu_horizon`) is the natural value. The answer changes when either part says it
    does, or when the next announced pod comes within the look-ahead."""

    def __init__(
        self, queue: Announcements, base: Forecaster | None = None, *, lookahead_s: float | None = None
    ) -> None:
        if lookahead_s is not None and lookahead_s < 0:
            raise ValueError(f"a look-ahead of {lookahead_s} s: it must be 0 or more")
        self.queue = queue
        self.base = base or SlidingForecast()
        self.lookahead_s = lookahead_s

    def forecast(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
        own = self.base.forecast(snap, cfg, horizon)
        pods, at = self.queue.announced(snap.now)
        if not pods and at is None:
            return own
        changes = [t for t in (own.changes_at, at) if t is not None]
        if self.lookahead_s is not None:
            edge = snap.now + self.lookahead_s
            changes += [
                min((p.arrival - self.lookahead_s for p in pods if p.arrival > edge), default=math.inf)
            ]
            pods = tuple(p for p in pods if p.arrival <= edge)
        announced = tuple(replace(p, name=p.name + ANNOUNCED_SUFFIX) for p in pods)
        soonest = min(changes, default=math.inf)
        return Forecast(
            own.pods + announced,
            soonest if soonest < math.inf else None,
            own.known | {p.name for p in announced},
            own.guessed,
        )
