"""The cluster-autoscaler emulation (``cluster-autoscaler``) and its CapacityBuffer variant (``ca-buffer``), with
the buffer's sizing; what they do and why is in :mod:`capstan.capacity.policies`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from capstan.capacity._scans import first_fit_decreasing, live_count, next_scan
from capstan.capacity.forecast import gpu_horizon
from capstan.capacity.model import GPU_MILLI, IN_FLIGHT, NodeState, NodeType, Pod, PodShape
from capstan.capacity.placement import (
    Assignment,
    Capacity,
    choose_devices,
    fits,
    give,
    take,
    why_incompatible,
)
from capstan.capacity.sim import Sim, SimNode, SimPod


@dataclass
class CAConfig:
    scan_interval: float = 10.0
    scale_down_unneeded_time: float = 600.0
    scale_down_delay_after_add: float = 600.0
    utilization_threshold: float = 0.5
    gpu_utilization_threshold: float = 0.5
    max_empty_bulk_delete: int = 10
    gpu_unready_is_upcoming: bool = True
    """CA's GPU hack: a node whose GPUs are not yet allocatable counts as upcoming, not as a node without GPUs."""
    soft_taint_unneeded: bool = False
    """Taint the nodes found unneeded ``DeletionCandidateOfClusterAutoscaler:PreferNoSchedule`` (and take it off
    once they are needed again), as cluster-autoscaler does, so the scheduler keeps new pods off the nodes it means
    to remove. False (the default, as this emulation did first): new pods may land there, LeastAllocated
    preferring an empty node, and reset its unneeded time."""
    buffer_gpus: int | None = 0
    """A CapacityBuffer of this many virtual one-GPU pods (0: none; None: the trace's peak burst,
    :func:`peak_burst_gpus`)."""


def buffer_template(pods: list[Pod] | tuple[Pod, ...]) -> Pod:
    """The CapacityBuffer's pod template: one whole GPU with the median CPU and memory per GPU of the trace's
    whole-GPU pods (its GPU pods', if none asks for whole GPUs), no GPU-model constraint."""
    gpu_pods = [p for p in pods if p.wants_gpu]
    whole = [p for p in gpu_pods if p.gpu_milli >= GPU_MILLI] or gpu_pods
    if not whole:
        return Pod("buffer", 0.0, 1000, 4096, num_gpu=1, gpu_milli=GPU_MILLI)
    per_gpu = [max(1.0, p.gpu_total_milli / GPU_MILLI) for p in whole]
    cpu = sorted(p.cpu_milli / g for p, g in zip(whole, per_gpu, strict=True))[len(whole) // 2]
    mem = sorted(p.memory_mib / g for p, g in zip(whole, per_gpu, strict=True))[len(whole) // 2]
    return Pod("buffer", 0.0, max(1, int(cpu)), max(1, int(mem)), num_gpu=1, gpu_milli=GPU_MILLI)


def buffer_size_and_template(
    pods: list[Pod] | tuple[Pod, ...], types: tuple[NodeType, ...], count: int | None
) -> tuple[int, Pod]:
    """A CapacityBuffer of ``count`` one-GPU pods (None: the peak burst over one boot plus GPU-ready delay of
    ``types``) and its pod template (:func:`buffer_template`)."""
    # pods no node type can run are no burst a buffer could absorb (and may ask for any number of GPUs)
    fit: dict[PodShape, bool] = {}
    servable = [
        p for p in pods if fit.setdefault(p.shape, any(why_incompatible(t, p) is None for t in types))
    ]
    if count is None:
        count = peak_burst_gpus(servable, gpu_horizon(types))
    return count, buffer_template(servable)


def peak_burst_gpus(pods: list[Pod] | tuple[Pod, ...], horizon: float) -> int:
    """The most GPUs asked for by pods arriving within any window of ``horizon`` seconds (whole GPUs, rounded up)."""
    gpu_pods = sorted((p for p in pods if p.wants_gpu), key=lambda p: p.arrival)
    best = total = 0
    lo = 0
    for p in gpu_pods:
        total += p.gpu_total_milli
        while gpu_pods[lo].arrival <= p.arrival - horizon:
            total -= gpu_pods[lo].gpu_total_milli
            lo += 1
        best = max(best, total)
    return -(-best // GPU_MILLI)


class ClusterAutoscalerPolicy:
    name = "cluster-autoscaler"

    def __init__(self, config: CAConfig | None = None, name: str = "cluster-autoscaler") -> None:
        self.name = name
        self.cfg = config or CAConfig()
        self.buffer: list[SimPod] = []
        """The CapacityBuffer's virtual pods (never given to the simulator's scheduler)."""
        self.unneeded_since: dict[str, float] = {}
        self.last_scale_up = -math.inf
        self.last_scan = -math.inf
        self.scale_ups: list[tuple[float, str, int]] = []
        self.removals: list[tuple[float, str]] = []

    def start(self, sim: Sim) -> None:
        count, template = buffer_size_and_template(sim.workload.pods, sim.node_types, self.cfg.buffer_gpus)
        if count:
            self.buffer = [SimPod(dataclasses.replace(template, name=f"buffer-{i}")) for i in range(count)]
            sim.wake(0.0, "scan")

    def on_change(self, sim: Sim, now: float) -> None:
        sim.wake(next_scan(now, self.cfg.scan_interval, self.last_scan), "scan")

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        self.last_scan = now
        # the buffer's pods stand on free capacity for this scan only, as CA injects them into its simulation
        standing, homeless = self._place_buffer(sim)
        try:
            self._scale_up(sim, now, homeless)
            self._scale_down(sim, now, standing, bool(homeless))
        finally:
            for n, sp, a in standing:
                give(n.cap, sp.pod, a)

    def _place_buffer(self, sim: Sim) -> tuple[list[tuple[SimNode, SimPod, Assignment]], list[Pod]]:
        """Put the buffer's pods on free allocatable capacity (taken until the scan ends); the rest have no
        room. A node that holds buffer pods and no real pod is headroom in the accounting."""
        if not self.buffer:
            return [], []
        nodes = sim.allocatable_nodes()
        standing: list[tuple[SimNode, SimPod, Assignment]] = []
        # first fit in node order, as CA's hinting simulator places the pods it injects; the buffer's pods are
        # alike, so that fills each node in turn as far as they fit
        todo = iter(self.buffer)
        sp = next(todo, None)
        for n in nodes:
            if sp is None:
                break
            if not sim.compatible(n.nt, sp.pod):
                continue
            while sp is not None and fits(n.cap, sp.pod):
                a = choose_devices(n.cap, sp.pod)
                take(n.cap, sp.pod, a)
                standing.append((n, sp, a))
                sp = next(todo, None)
        homeless = [] if sp is None else [sp.pod, *(rest.pod for rest in todo)]
        # only allocatable nodes ever hold buffer pods, so the others are never headroom
        sim.hold_headroom({n.id for n, _, _ in standing if not n.pods})
        return standing, homeless

    def _upcoming(self, sim: Sim) -> list[SimNode]:
        states = (
            set(IN_FLIGHT) if self.cfg.gpu_unready_is_upcoming else {NodeState.REQUESTED, NodeState.BOOTING}
        )
        return [n for n in sim.active.values() if n.state in states and not n.allocatable]

    def _scale_up(self, sim: Sim, now: float, buffer: list[Pod]) -> None:
        pending = sorted(
            (sp for sp in sim.pending.values() if sp.state == "pending"),
            key=lambda s: (s.pod.arrival, s.pod.name),
        )
        if not pending and not buffer:
            return
        templates = [(n, Capacity.of(n.nt)) for n in self._upcoming(sim)]
        left: list[Pod] = []
        for pod in [sp.pod for sp in pending] + buffer:  # real pods first, then the buffer's
            for n, cap in templates:
                if fits(cap, pod) and sim.compatible(n.nt, pod):
                    take(cap, pod, choose_devices(cap, pod))
                    break
            else:
                left.append(pod)
        if not left:
            return
        best: tuple[tuple[float, str], NodeType, int, list[Pod]] | None = None
        for nt in sim.node_types:
            ok = [p for p in left if sim.compatible(nt, p)]
            if not ok:
                continue
            quota = None if nt.max_count is None else nt.max_count - live_count(sim, nt)
            if quota is not None and quota <= 0:
                continue
            count, placed = first_fit_decreasing(ok, nt, quota)
            if not placed:
                continue
            cpu = sum(p.cpu_milli for p in placed)
            mem = sum(p.memory_mib for p in placed)
            waste = (count * nt.cpu_milli - cpu) / (count * nt.cpu_milli) + (count * nt.memory_mib - mem) / (
                count * nt.memory_mib
            )
            key = (waste, nt.name)
            if best is None or key < best[0]:
                best = (key, nt, count, placed)
        if best is None:
            return
        _, nt, count, placed = best
        real = {id(sp.pod) for sp in pending}
        for_pods = any(id(p) in real for p in placed)
        for _ in range(count):
            sim.launch(nt.name, purpose="pods" if for_pods else "headroom")
        sim.mark_decided(p.name for p in placed if id(p) in real)
        self.last_scale_up = now
        self.scale_ups.append((now, nt.name, count))
        if len(placed) < len(left):
            sim.wake(now + self.cfg.scan_interval, "scan")

    def _utilization(self, n: SimNode) -> float:
        if n.nt.gpu:
            return 1.0 - n.cap.free_gpu_milli() / (n.nt.gpu * 1000)
        return max(1.0 - n.cap.cpu / n.nt.cpu_milli, 1.0 - n.cap.mem / n.nt.memory_mib)

    def _scale_down(
        self,
        sim: Sim,
        now: float,
        buffer: list[tuple[SimNode, SimPod, Assignment]],
        buffer_full: bool = False,
    ) -> None:
        """Nodes unneeded for ``scale_down_unneeded_time`` go; ``buffer`` are the buffer's pods standing on nodes,
        ``buffer_full`` says some had no room (so no node has room for one)."""
        ready = [n for n in sim.active.values() if n.allocatable and not n.promised]
        standing: dict[str, list[SimPod]] = {}
        for n, sp, _ in buffer:
            standing.setdefault(n.id, []).append(sp)
        cands = sorted(
            (
                n
                for n in ready
                if self._utilization(n) < self._threshold(n)
                # a pod annotated safe-to-evict: "false" blocks its node's scale-down
                and all(sim.pods[name].pod.safe_to_evict for name in n.pods)
            ),
            key=lambda n: (self._utilization(n), n.requested_at, n.id),
        )
        removing: set[str] = set()
        undo: list[tuple[Capacity, SimPod, tuple[tuple[int, int], ...]]] = []
        # the ready nodes a pod shape fits, in node order; room only shrinks during the scan (a failed trial
        # gives back only what it took), so a list made before a trial holds every node the shape fits during it
        room: dict[PodShape, list[SimNode]] = {}
        # pods that earlier removals would move onto a node: in CA's snapshot they are that node's pods now
        incoming: dict[str, list[SimPod]] = {}
        for n in cands:
            if standing.get(n.id) and buffer_full:
                continue  # no node has room for another buffer pod, so the ones on n cannot move
            moving = [sim.pods[name] for name in n.pods] + standing.get(n.id, []) + incoming.get(n.id, [])
            for sp in moving:
                if sp.pod.shape not in room:
                    room[sp.pod.shape] = [
                        m for m in ready if fits(m.cap, sp.pod) and sim.compatible(m.nt, sp.pod)
                    ]
            trial: list[tuple[Capacity, SimPod, tuple[tuple[int, int], ...]]] = []
            moved: list[tuple[str, SimPod]] = []
            ok = True
            # its pods, the buffer's pods standing on it and those earlier removals moved there must all fit
            # elsewhere
            for sp in moving:
                targets = [m for m in room[sp.pod.shape] if m is not n and m.id not in removing]
                dest = sim.schedule(sp, targets)
                if dest is None:
                    ok = False
                    break
                a = choose_devices(dest.cap, sp.pod)
                take(dest.cap, sp.pod, a)
                trial.append((dest.cap, sp, a))
                moved.append((dest.id, sp))
            if ok:
                removing.add(n.id)
                undo.extend(trial)  # its pods stay where they would go while later candidates are tried
                for dest_id, sp in moved:
                    incoming.setdefault(dest_id, []).append(sp)
            else:
                for cap, sp, a in reversed(trial):  # as CA reverts the snapshot of a removal that fails
                    give(cap, sp.pod, a)
        for cap, sp, a in reversed(undo):
            give(cap, sp.pod, a)
        for nid in list(self.unneeded_since):
            if nid not in removing:
                del self.unneeded_since[nid]
        for nid in removing:
            self.unneeded_since.setdefault(nid, now)
        if self.cfg.soft_taint_unneeded:
            sim.prefer_not(removing)
        if not removing:
            return
        cooldown_end = self.last_scale_up + self.cfg.scale_down_delay_after_add
        due = sorted(
            (nid for nid in removing if now - self.unneeded_since[nid] >= self.cfg.scale_down_unneeded_time),
            key=lambda nid: (self.unneeded_since[nid], nid),
        )
        if now >= cooldown_end and due:
            empty = [nid for nid in due if not sim.nodes[nid].pods][: self.cfg.max_empty_bulk_delete]
            busy = [nid for nid in due if sim.nodes[nid].pods][:1]
            for nid in empty + busy:
                sim.drain(nid)
                self.removals.append((now, nid))
                self.unneeded_since.pop(nid, None)
        pending_due = [
            self.unneeded_since[nid] + self.cfg.scale_down_unneeded_time for nid in self.unneeded_since
        ]
        if pending_due:
            at = max(min(pending_due), cooldown_end)
            sim.wake(next_scan(max(at, now + 1e-6), self.cfg.scan_interval, now), "scan")

    def _threshold(self, n: SimNode) -> float:
        return self.cfg.gpu_utilization_threshold if n.nt.gpu else self.cfg.utilization_threshold
