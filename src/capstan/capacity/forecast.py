"""The demand forecast behind the planner's headroom: which past window of arrivals the next boot delay should
be ready for.

Every window as long as the headroom horizon (:func:`headroom_window`: one boot plus GPU-ready delay, less the
wait a pod may bear) that starts at a GPU arrival is scored by its GPU demand. Batch pods are forecast by time of
day: the windows offered are those of the recent past and those around this time of day on each of the last days;
the one at the configured rank (the busiest, by default) is the forecast. Replicas of inference services get a
window of their own whose demand decays with age. :class:`SlidingForecast` gives the same answer as
:func:`forecast` while updating its windows as arrivals come and go, and every forecast says when it may next
change with no new arrival, so a controller knows when to look again. Pure functions of the snapshot; no I/O.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass
from typing import Protocol

from capstan.capacity._plan_types import PlannerConfig, Snapshot
from capstan.capacity.model import NodeType, Pod


def headroom_wait(cfg: PlannerConfig, horizon: float) -> float:
    """How long a pod may wait for capacity on its way: the larger of ``headroom_wait_s`` and
    ``headroom_wait_share`` of ``horizon`` (the time from request to allocatable GPUs)."""
    return max(cfg.headroom_wait_s, cfg.headroom_wait_share * horizon, 0.0)


def headroom_window(cfg: PlannerConfig, horizon: float) -> float:
    """How long a window of arrivals headroom covers: ``horizon`` (the time from request to allocatable GPUs) less
    :func:`headroom_wait`, at least a second.

    NOTE: headroom is replaced as soon as it is used, so a pod that finds it all taken waits for the node
    launched when the earliest of the pods before it took its share. If the headroom covers every window of
    ``horizon - wait``, that node was launched at least that long before the pod came, so it is up within
    ``wait`` of it, provided the pod takes the in-flight node that comes up first (the planner's ``_Work.best_bin``). On
    openb default at a 5-minute boot delay, a 78 s wait without that preference let p99 reach 99 s; with it,
    16 s.
    """
    if horizon <= 0:
        return horizon
    return max(horizon - headroom_wait(cfg, horizon), min(horizon, 1.0))


def gpu_horizon(types: tuple[NodeType, ...]) -> float:
    """How far ahead headroom must look: the longest mean time from request to allocatable GPUs."""
    return max((t.boot_delay.mean() + t.gpu_ready_delay.mean() for t in types if t.gpu), default=0.0)


@dataclass(frozen=True)
class Forecast:
    """The pods headroom is held for, and when the forecast next changes with no new arrival."""

    pods: tuple[Pod, ...]
    changes_at: float | None
    known: frozenset[str] = frozenset()
    """The names of those ``pods`` that a queue announced (:class:`~capstan.capacity.QueuedDemand`): they are
    coming, not guessed, so headroom holds each one whole (a guessed pod of many GPUs is held as one-GPU
    phantoms, ``PlannerConfig.headroom_split_gpus``) and may launch a node of any size for one pinned to GPU
    models (``PlannerConfig.pinned_headroom_node_ratio`` bounds guesses only)."""
    guessed: bool = True
    """The forecaster guesses demand (from past arrivals, say). False (:class:`NoForecast`, and a queue's
    announcements beside it): it holds headroom for announced pods only, so an empty node none of them needs is
    drained after ``PlannerConfig.known_idle_s`` rather than ``min_idle_s`` (a damper for guesses that come and
    go).

    NOTE: told each pod an hour ahead (the queue the whole forecast), nodes launched for announced pods that were
    placed elsewhere when they came stood empty for the 300 s. Exploratory replays (2026-12-07), cost against the
    oracle's on openb gpuspec20 / default: 300 s 1.055× / 1.018×, 30 s 1.054× / 1.014×, 15 s 1.051×, 5 s 1.051×,
    at once 1.050× / 1.015×. At once raced live: a Job resumed leaves the queue a moment before the Job
    controller's pods exist, and its node was drained in between (tests/integration/capacity/test_live.py)."""


def forecast(snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
    """The arrivals of a past window of length ``horizon`` (one boot plus GPU-ready delay) that headroom must
    absorb. Windows start at each arrival, so a burst is never split by a grid line. Batch pods: among the
    windows of the last ``forecast_recent_s`` and those that started within ``forecast_day_band_s`` of this
    time of day on each of the last ``forecast_days`` days (:func:`_batch_ranges`), the one at rank
    ``(1 - forecast_quantile) × forecast_windows`` by GPU demand, busiest first (0: the busiest).

    The forecast changes when a pod arrives, when an arrival leaves the recent look-back, or when the daily
    bands, moving in steps of ``forecast_day_step_s``, take in or let go of an arrival; ``changes_at`` says
    when it may next change (:func:`_batch_changes_at` skips band moves that cannot change the busiest
    window). One window serves every GPU model: pods limited to a few models may find the
    headroom on others (see docs/capacity.md). Replicas of inference services are ranked apart
    (:func:`_service_window`) and their window is added.
    """
    services = _forecast_pods(snap, snap.now - horizon * cfg.forecast_windows, services=True, cfg=cfg)
    return _with_services(_batch_window(snap, cfg, horizon), services, cfg, horizon)


def _batch_lookback(cfg: PlannerConfig, horizon: float) -> float:
    if cfg.forecast_days <= 0:
        return horizon * cfg.forecast_windows
    span = (
        cfg.forecast_days * cfg.forecast_day_s + cfg.forecast_day_band_s + max(cfg.forecast_day_step_s, 0.0)
    )
    return max(cfg.forecast_recent_s, span)


def forecast_lookback(cfg: PlannerConfig, horizon: float) -> float:
    """How far back the forecast reads arrivals: a caller keeps at least this much of ``Snapshot.recent``."""
    return max(horizon * cfg.forecast_windows, _batch_lookback(cfg, horizon))


def _batch_ranges(now: float, cfg: PlannerConfig, horizon: float) -> list[tuple[float, float]]:
    """The arrival times ``(lo, hi]`` whose windows batch headroom is chosen from: the recent look-back, then
    one band around this time of day (rounded down to ``forecast_day_step_s``) on each past day.

    NOTE: openb's arrivals follow the time of day (its nights see 2.7 times the arrivals of its middays), so
    holding the busiest window of the last ten hours kept the night's headroom all morning; the same hour on
    past days says what the next boot delay brings, and two recent hours catch a day unlike the others.
    """
    if cfg.forecast_days <= 0:
        return [(now - horizon * cfg.forecast_windows, math.inf)]
    step = cfg.forecast_day_step_s
    grid = math.floor(now / step) * step if step > 0 else now
    band = cfg.forecast_day_band_s
    out = [(now - cfg.forecast_recent_s, math.inf)]
    for d in range(1, cfg.forecast_days + 1):
        mid = grid - d * cfg.forecast_day_s
        out.append((mid - band, mid + band))
    return out


def _offered(
    arrivals: list[float], lo: int, now: float, cfg: PlannerConfig, horizon: float
) -> tuple[list[range], list[tuple[int, int]]]:
    """The indexes (from ``lo`` on) of ``arrivals`` inside :func:`_batch_ranges`, as sorted, disjoint ranges,
    and each range's own ``(first, end)`` indexes, in :func:`_batch_ranges` order."""
    spans = [
        (bisect.bisect_right(arrivals, a, lo=lo), bisect.bisect_right(arrivals, b, lo=lo))
        for a, b in _batch_ranges(now, cfg, horizon)
    ]
    out: list[range] = []
    for i, j in sorted(spans):
        if i >= j:
            continue
        if out and i <= out[-1].stop:
            out[-1] = range(out[-1].start, max(out[-1].stop, j))
        else:
            out.append(range(i, j))
    return out, spans


_ENTERING_SCAN = 32
"""How many arrivals past a daily band's end :func:`_batch_changes_at` looks at for a busier window."""


def _batch_changes_at(
    arrivals: list[float],
    demand: list[int],
    lo: int,
    now: float,
    cfg: PlannerConfig,
    horizon: float,
    spans: list[tuple[int, int]],
    best: int | None,
) -> float | None:
    """When the batch window picked (index ``best`` of ``arrivals``, whose windows have GPU ``demand``) may
    next change with no new arrival (None: not until one comes). Never later than the change; earlier only
    costs a recheck that finds the same window.

    With daily bands and the busiest window wanted, only two things change it: the picked window leaves every
    range it is in, or a window at least as busy (busier, or as busy and earlier) enters a band; the bands take
    in arrivals in order, so the first ``_ENTERING_SCAN`` beyond each band's end are checked, and the
    time the last of them enters is a safe bound when none is busier. Otherwise any window entering or
    leaving may change it. The answer is always after ``now``: float rounding can put an arrival an ulp past a
    band's end (it enters at the next instant, not at ``now``).
    """
    if lo >= len(arrivals):
        return None
    if cfg.forecast_days <= 0:
        # the oldest arrival leaves the look-back
        return max(arrivals[lo] + horizon * cfg.forecast_windows, math.nextafter(now, math.inf))
    step = cfg.forecast_day_step_s
    band = cfg.forecast_day_band_s

    def band_at(t: float) -> float:  # the first position of the stepping bands at or after t
        return math.ceil(t / step) * step if step > 0 else t

    busiest = _wanted_rank(cfg) == 0  # whatever the number of windows offered
    at: list[float] = []
    if busiest and best is not None:
        leaves = [arrivals[best] + cfg.forecast_recent_s] if spans[0][0] <= best < spans[0][1] else []
        for d, (i, j) in enumerate(spans[1:], start=1):
            if i <= best < j:
                leaves.append(band_at(arrivals[best] + d * cfg.forecast_day_s + band))
        at.append(max(leaves))
        top = demand[best]
        for d, (_, j) in enumerate(spans[1:], start=1):
            shift = d * cfg.forecast_day_s - band
            stop = min(j + _ENTERING_SCAN, len(arrivals))
            k = None
            if j < stop and max(demand[j:stop]) >= top:  # in C: most bands have nothing as busy ahead
                k = next(
                    (k for k in range(j, stop) if demand[k] > top or (demand[k] == top and k < best)), None
                )
            if k is not None:
                at.append(band_at(arrivals[k] + shift))
            elif stop < len(arrivals):
                at.append(band_at(arrivals[stop] + shift))
        return max(min(at), math.nextafter(now, math.inf))
    i = spans[0][0]
    if i < len(arrivals):
        at.append(arrivals[i] + cfg.forecast_recent_s)  # the oldest recent arrival leaves
    for d, (i, j) in enumerate(spans[1:], start=1):
        shift = d * cfg.forecast_day_s
        if i < j:
            at.append(band_at(arrivals[i] + shift + band))  # the band lets go of its oldest arrival
        if j < len(arrivals):
            at.append(band_at(arrivals[j] + shift - band))  # the band takes in the next one
    return max(min(at), math.nextafter(now, math.inf)) if at else None


def _forecast_pods(snap: Snapshot, since: float, *, services: bool, cfg: PlannerConfig) -> list[Pod]:
    """The GPU arrivals after ``since`` (gangs left out) of batch pods, or of service replicas, by arrival."""
    apart = cfg.service_half_life_s > 0
    pods = [
        p
        for p in snap.recent
        if p.arrival > since and p.wants_gpu and not p.gang and (bool(p.service) and apart) == services
    ]
    arrivals = [p.arrival for p in pods]
    if arrivals != sorted(arrivals):
        pods.sort(key=lambda p: (p.arrival, p.name))
    return pods


def _windows(pods: list[Pod], horizon: float) -> list[tuple[int, int, int]]:
    """(GPU demand, start, end) of the window of length ``horizon`` starting at each of ``pods``."""
    windows: list[tuple[int, int, int]] = []
    demand = 0
    end = 0
    for i, p in enumerate(pods):
        while end < len(pods) and pods[end].arrival < p.arrival + horizon:
            demand += pods[end].gpu_total_milli
            end += 1
        windows.append((demand, i, end))
        demand -= p.gpu_total_milli
    return windows


def _wanted_rank(cfg: PlannerConfig) -> int:
    """The rank, busiest first, of the window headroom covers: ``(1 - forecast_quantile) × forecast_windows``."""
    return math.floor((1.0 - cfg.forecast_quantile) * cfg.forecast_windows + 1e-9)


def _rank(cfg: PlannerConfig, count: int) -> int:
    return min(count - 1, _wanted_rank(cfg))


def _batch_window(snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
    pods = _forecast_pods(snap, snap.now - _batch_lookback(cfg, horizon), services=False, cfg=cfg)
    if horizon <= 0 or not pods:
        return Forecast((), None)
    windows = _windows(pods, horizon)
    arrivals = [p.arrival for p in pods]
    demand = [d for d, _, _ in windows]
    slices, spans = _offered(arrivals, 0, snap.now, cfg, horizon)
    offered = [(-windows[i][0], i, windows[i][2]) for r in slices for i in r]
    if not offered:
        return Forecast((), _batch_changes_at(arrivals, demand, 0, snap.now, cfg, horizon, spans, None))
    _, start, stop = heapq.nsmallest(_rank(cfg, len(offered)) + 1, offered)[-1]
    return Forecast(
        tuple(pods[start:stop]), _batch_changes_at(arrivals, demand, 0, snap.now, cfg, horizon, spans, start)
    )


def _service_window(pods: list[Pod], cfg: PlannerConfig, horizon: float) -> Forecast:
    """The window of service replicas ``pods`` (the look-back's, by arrival), ranked by demand ×
    2^-(age / ``service_half_life_s``).

    NOTE: replica counts follow a demand curve whose recent past predicts the next boot delay better than a
    ramp hours ago; on the Alibaba GenAI curve holding the busiest window of ten hours kept ~10 GPUs idle all
    night. Decay multiplies every window by the same factor as time passes, so the order only changes when a
    replica arrives or leaves the look-back (compared in log2 to stay finite).
    """
    if horizon <= 0 or not pods or cfg.service_half_life_s <= 0:
        return Forecast((), None)
    half = cfg.service_half_life_s
    scored = [(-(math.log2(d) + pods[i].arrival / half), i, e) for d, i, e in _windows(pods, horizon)]
    _, start, stop = heapq.nsmallest(_rank(cfg, len(scored)) + 1, scored)[-1]
    return Forecast(tuple(pods[start:stop]), pods[0].arrival + horizon * cfg.forecast_windows)


def _with_services(batch: Forecast, services: list[Pod], cfg: PlannerConfig, horizon: float) -> Forecast:
    if cfg.service_half_life_s <= 0:
        return batch
    svc = _service_window(services, cfg, horizon)
    if not svc.pods:
        return batch
    ats = [a for a in (batch.changes_at, svc.changes_at) if a is not None]
    return Forecast(batch.pods + svc.pods, min(ats, default=None))


class Forecaster(Protocol):
    """What headroom is held for: the planner asks it at every decision that holds headroom.

    :class:`SlidingForecast` (the planner's own, from the snapshot's recent arrivals) is the default; another may
    read a signal the snapshot does not carry (an inference gateway's demand, a batch queue). It must say in
    ``Forecast.changes_at`` when its answer may next change with no new arrival, or the planner's controller
    will not look again until something else changes; the planner reuses an answer while the snapshot's recent
    arrivals are the same and ``changes_at`` has not come. It should answer from the snapshot and what it was
    built with alone, so that a plan stays a function of its inputs.
    """

    def forecast(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
        """The pods headroom is held for at ``snap.now``; ``horizon``: the window headroom covers (seconds)."""
        ...


class NoForecast:
    """A :class:`Forecaster` that holds no headroom of its own: for ``QueuedDemand(queue, NoForecast())`` when every
    pod that needs a GPU comes through a queue (a cluster whose GPU work Kueue admits), so the queue's
    announcements are the whole forecast and guessing beside them only adds idle nodes."""

    def forecast(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
        return Forecast((), None, guessed=False)


class SlidingForecast:
    """:func:`forecast`, kept up to date as arrivals come and go instead of recomputed from all of them.

    It holds the look-back's GPU arrivals, batch pods and service replicas apart, in the order of
    ``snap.recent`` (the few service replicas are ranked from scratch by :func:`_service_window`), and the GPU
    demand of the window starting at each batch arrival. An arrival adds its demand to the windows that started less than one horizon before it
    (a suffix) and opens its own; a pod leaving the look-back, or ``snap.recent``, closes the oldest window.
    An update then walks only the arrivals of one horizon, and picking the window is one pass in C over the
    look-back's demands instead of a Python loop building a tuple per window. The result is always
    :func:`forecast`'s: whenever ``snap.recent`` is not the previous one with pods dropped from the front and
    appended at the back in arrival order, time went back, or the horizon or config changed, the state is rebuilt
    (and :func:`forecast` itself answers when arrivals are out of order). A unit test compares the two on
    random sequences of snapshots.
    """

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, key: tuple[float, PlannerConfig] | None) -> None:
        self._recent: tuple[Pod, ...] = ()
        self._now = -math.inf
        self._key = key
        self._pods: list[Pod] = []  # the look-back's GPU arrivals; the live ones are [_lo:]
        self._arrival: list[float] = []
        self._demand: list[int] = []  # GPU thousandths of the window starting at each pod
        self._lo = 0
        self._ordered = True
        # the look-back's service replicas (ranked apart); the live ones are [_svc_lo:]
        self._svc: list[Pod] = []
        self._svc_lo = 0

    def forecast(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
        recent = snap.recent
        old = self._recent
        same = self._key == (horizon, cfg) and snap.now >= self._now  # expired windows never come back
        dropped = self._dropped(old, recent) if same else None
        if dropped is None:
            self._reset((horizon, cfg))
            self._append(recent, horizon, cfg)
        else:
            gone = {id(p) for p in old[:dropped]}
            while self._lo < len(self._pods) and id(self._pods[self._lo]) in gone:
                self._lo += 1
            while self._svc_lo < len(self._svc) and id(self._svc[self._svc_lo]) in gone:
                self._svc_lo += 1
            self._append(recent[len(old) - dropped :], horizon, cfg)
        self._recent = recent
        self._now = snap.now
        if not self._ordered or horizon <= 0:
            return forecast(snap, cfg, horizon)
        since = snap.now - horizon * cfg.forecast_windows  # service replicas' look-back
        while self._svc_lo < len(self._svc) and not self._svc[self._svc_lo].arrival > since:
            self._svc_lo += 1
        if self._svc_lo > 4096 and self._svc_lo * 2 > len(self._svc):
            del self._svc[: self._svc_lo]
            self._svc_lo = 0
        return _with_services(self._batch(snap, cfg, horizon), self._svc[self._svc_lo :], cfg, horizon)

    def _batch(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
        since = snap.now - _batch_lookback(cfg, horizon)
        while self._lo < len(self._pods) and not self._arrival[self._lo] > since:
            self._lo += 1
        if self._lo > 4096 and self._lo * 2 > len(self._pods):
            for seq in (self._pods, self._arrival, self._demand):
                del seq[: self._lo]
            self._lo = 0
        if self._lo == len(self._pods):
            return Forecast((), None)
        arrivals, demand = self._arrival, self._demand
        offered, spans = _offered(arrivals, self._lo, snap.now, cfg, horizon)
        if not offered:
            return Forecast(
                (), _batch_changes_at(arrivals, demand, self._lo, snap.now, cfg, horizon, spans, None)
            )
        rank = _rank(cfg, sum(len(r) for r in offered))
        if rank == 0:
            start, top = -1, -1
            # the first of equal maxima, as the from-scratch ranking picks it (two passes in C per range)
            for r in offered:
                m = max(demand[r.start : r.stop])
                if m > top:
                    start, top = demand.index(m, r.start, r.stop), m
        else:
            ranked = heapq.nsmallest(rank + 1, (i for r in offered for i in r), key=lambda i: (-demand[i], i))
            start = ranked[rank]
        stop = bisect.bisect_left(arrivals, arrivals[start] + horizon, lo=start)
        at = _batch_changes_at(arrivals, demand, self._lo, snap.now, cfg, horizon, spans, start)
        return Forecast(tuple(self._pods[start:stop]), at)

    @staticmethod
    def _dropped(old: tuple[Pod, ...], new: tuple[Pod, ...]) -> int | None:
        """How many pods ``new`` dropped from the front of ``old`` if it is ``old[k:]`` plus appended pods."""
        if new is old:
            return 0
        if not old:
            return 0
        k = 0
        if new:
            first = new[0]
            while k < len(old) and old[k] is not first:
                k += 1
        else:
            k = len(old)
        kept = len(old) - k
        if len(new) < kept or old[k:] != new[:kept]:
            return None
        return k

    def _append(self, pods: tuple[Pod, ...], horizon: float, cfg: PlannerConfig) -> None:
        """Add arrivals: each window that starts at or after ``lo`` within ``horizon`` before a new pod's arrival
        gains its GPU demand. While arrivals come in order those windows are a suffix, found by bisection and
        added up once for the whole batch, so a burst of n pods costs O(n log n), not O(n²)."""
        apart = cfg.service_half_life_s > 0  # service replicas are ranked apart (_service_window)
        suffixes: list[tuple[int, int, int]] = []  # (first window, end, GPU thousandths) still to add
        for p in pods:
            if not p.wants_gpu or p.gang:
                continue
            t = p.arrival
            if apart and p.service:
                if self._svc and t < self._svc[-1].arrival:
                    self._ordered = False
                self._svc.append(p)
                continue
            if self._arrival and t < self._arrival[-1]:
                self._ordered = False
            milli = p.gpu_total_milli
            end = len(self._arrival)
            if self._ordered:
                # the windows j in [lo, end) with t < arrival[j] + horizon: a suffix, as arrivals are sorted
                first = bisect.bisect_right(
                    self._arrival, t, lo=min(self._lo, end), hi=end, key=lambda a: a + horizon
                )
                if first < end:
                    suffixes.append((first, end, milli))
            else:
                j = end - 1
                while j >= self._lo and t < self._arrival[j] + horizon:
                    self._demand[j] += milli
                    j -= 1
            self._pods.append(p)
            self._arrival.append(t)
            self._demand.append(milli)
        if suffixes:
            base = min(first for first, _, _ in suffixes)
            diff = [0] * (len(self._demand) - base + 1)
            for first, end, milli in suffixes:
                diff[first - base] += milli
                diff[end - base] -= milli
            running = 0
            for i in range(len(diff) - 1):
                running += diff[i]
                if running:
                    self._demand[base + i] += running
