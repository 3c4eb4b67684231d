"""The Karpenter emulation (``karpenter``): batched provisioning onto the cheapest instance type that holds the
pods, and its disruption loop (empty nodes, delete and single-node replacement consolidation); what it does and
why is in :mod:`capstan.capacity.policies`."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from capstan.capacity._scans import first_fit_decreasing, live_count, next_scan
from capstan.capacity.model import NodeType, Pod, PodShape
from capstan.capacity.placement import Capacity, choose_devices, fits, give, take
from capstan.capacity.sim import Sim, SimNode


@dataclass
class KarpenterConfig:
    batch_idle: float = 1.0
    batch_max: float = 10.0
    disruption_interval: float = 10.0
    budget_fraction: float = 0.1
    replace: bool = True
    """Single-node replacement consolidation: a node whose pods do not all fit elsewhere is replaced by one
    cheaper node that holds the rest (Karpenter's ``WhenEmptyOrUnderutilized``); False: delete only."""
    validation_delay: float = 0.0
    """Seconds Karpenter waits, with its disruption loop held, before it deletes the empty nodes a poll found, and
    only those still empty then (``commandValidationDelay``, 15 s in its code; 0: deleted at the poll, as this
    emulation did first). Applied to empty nodes only."""
    reserved_cpu_milli: int = 0
    reserved_memory_mib: int = 0
    """What Karpenter's cloud provider reserves on every instance type (its ``InstanceTypeOverhead``), taken off
    the room it packs pods into, in flight and new; the Node it launches still offers all of it to the scheduler.
    Its kwok provider reserves 100m CPU and 10 Mi, so pods that fill a node exactly fit one fewer in Karpenter's
    count. 0 (the default, as this emulation did first): none."""
    nominate_only: bool = False
    """Karpenter only nominates the pods it launched a NodeClaim for: it counts them against the claim while it
    boots, but kube-scheduler binds whichever waiting pods it tries first once the node is up, and a pod that lost
    its node to later ones is provisioned for again. False (the default, as this emulation did first): the pods
    are promised to their claim, as if the scheduler honoured the nomination (KEP-5278's NominatedNodeName)."""


class KarpenterPolicy:
    name = "karpenter"

    def __init__(self, config: KarpenterConfig | None = None) -> None:
        self.cfg = config or KarpenterConfig()
        self.batch_start: float | None = None
        self.batch_last = 0.0
        self.seen: set[str] = set()
        self.last_poll = -math.inf
        self.replacing: dict[str, str] = {}
        """Nodes cordoned for replacement consolidation → their replacement, until it is up."""
        self.moving: dict[str, list[Pod]] = {}
        """A replacement in flight → the pods it was launched for (new pods may use only the rest of it)."""
        self._cheaper: dict[tuple[str, frozenset[PodShape]], tuple[NodeType, ...]] = {}
        self._nothing_at: object = None
        """The ready nodes' state at the last poll where no node could be consolidated."""
        self.nominated: dict[str, list[str]] = {}
        """An in-flight node → the pods it was launched for (:attr:`KarpenterConfig.nominate_only`)."""
        self.validating: list[str] = []
        """Empty nodes a poll found, waiting out :attr:`KarpenterConfig.validation_delay`."""
        self.polls_skipped = 0
        """Polls skipped because the ready nodes were in that state."""
        self.replacements: list[tuple[float, str, str, str]] = []
        """(time, node, its type, the cheaper type that replaced it) for every replacement started."""

    def start(self, sim: Sim) -> None:
        return None

    def on_change(self, sim: Sim, now: float) -> None:
        for nid in [nid for nid, names in self.nominated.items() if not self._in_flight(sim.nodes[nid])]:
            # the node is up (or gone): its nominated pods that are still waiting were not bound there, and
            # the provisioner sees them again as pods to launch for
            for name in self.nominated.pop(nid):
                if name in sim.pending:
                    self.seen.discard(name)
        new = [name for name, sp in sim.pending.items() if sp.state == "pending" and name not in self.seen]
        if new:
            self.seen.update(new)
            if self.batch_start is None:
                self.batch_start = now
            self.batch_last = now
            sim.wake(
                min(self.batch_last + self.cfg.batch_idle, self.batch_start + self.cfg.batch_max), "batch"
            )
        sim.wake(next_scan(now, self.cfg.disruption_interval, self.last_poll), "disrupt")

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        if tag == "batch":
            if self.batch_start is None:
                return
            close = min(self.batch_last + self.cfg.batch_idle, self.batch_start + self.cfg.batch_max)
            if now + 1e-9 < close:
                sim.wake(close, "batch")
                return
            self.batch_start = None
            self._provision(sim)
        elif tag == "validate":
            # the command is still valid for the nodes still empty; the loop polls again one interval later
            for nid in self.validating:
                n = sim.nodes[nid]
                if n.live and n.allocatable and not n.promised and not n.pods:
                    sim.drain(nid)
            self.validating = []
            self.last_poll = now
            sim.wake(now + self.cfg.disruption_interval, "disrupt")
        elif not self.validating:
            self.last_poll = now
            self._disrupt(sim, now)

    def _provision(self, sim: Sim) -> None:
        pods = sorted(
            (sp.pod for sp in sim.pending.values() if sp.state == "pending"),
            key=lambda p: (-p.cpu_milli, -p.memory_mib, p.name),
        )
        # a cordoned node takes no pods; a replacement in flight keeps room for the pods it was launched for
        inflight = [n for n in sim.active.values() if self._in_flight(n)]
        # nominations are recomputed each pass, as Karpenter simulates every waiting pod afresh
        self.nominated = {}
        room = {n.id: self._room(n) for n in inflight}
        claims: list[tuple[list[Pod], dict[str, Capacity]]] = []
        for pod in pods:
            placed = False
            for n in inflight:
                if fits(room[n.id], pod) and sim.compatible(n.nt, pod):
                    placed = self._assign(sim, pod, n)
                    if placed:
                        take(room[n.id], pod, choose_devices(room[n.id], pod))
                    break
            if placed:
                continue
            for claim_pods, caps in claims:
                ok = {t: c for t, c in caps.items() if fits(c, pod) and sim.compatible(sim.types[t], pod)}
                if ok:
                    for t in list(caps):
                        if t not in ok:
                            del caps[t]
                    for c in ok.values():
                        take(c, pod, choose_devices(c, pod))
                    claim_pods.append(pod)
                    placed = True
                    break
            if placed:
                continue
            caps = {}
            for nt in sim.node_types:
                if not sim.compatible(nt, pod):
                    continue
                if (
                    nt.max_count is not None
                    and live_count(sim, nt) + sum(1 for _, cs in claims if nt.name in cs) >= nt.max_count
                ):
                    continue
                c = self._reserve(Capacity.of(nt))
                take(c, pod, choose_devices(c, pod))
                caps[nt.name] = c
            if caps:
                claims.append(([pod], caps))
        for claim_pods, caps in claims:
            nt = min((sim.types[t] for t in caps), key=lambda t: (t.price_per_hour, t.name))
            node = sim.launch(nt.name)
            for pod in claim_pods:
                self._assign(sim, pod, node)

    def _reserve(self, cap: Capacity) -> Capacity:
        """``cap`` less :attr:`KarpenterConfig.reserved_cpu_milli` and ``reserved_memory_mib`` (in place)."""
        cap.cpu -= self.cfg.reserved_cpu_milli
        cap.mem -= self.cfg.reserved_memory_mib
        return cap

    @staticmethod
    def _in_flight(n: SimNode) -> bool:
        """Launched, not yet taking pods: what the provisioner counts as capacity on its way."""
        return n.live and not n.allocatable and not n.cordoned

    def _assign(self, sim: Sim, pod: Pod, n: SimNode) -> bool:
        """Count ``pod`` against in-flight node ``n``: promised to it, or only nominated
        (:attr:`KarpenterConfig.nominate_only`)."""
        if not self.cfg.nominate_only:
            return sim.promise(pod.name, n.id)
        sim.mark_decided([pod.name])
        self.nominated.setdefault(n.id, []).append(pod.name)
        return True

    def _disrupt(self, sim: Sim, now: float) -> None:
        for old, new in list(self.replacing.items()):
            # the replacement is initialized (or failed): the cordoned node is drained, its pods rescheduled
            if sim.nodes[new].allocatable or not sim.nodes[new].live:
                del self.replacing[old]
                self.moving.pop(new, None)
                sim.drain(old)
        live = [n for n in sim.active.values() if n.live]
        budget = max(1, int(len(live) * self.cfg.budget_fraction))
        ready = [n for n in live if n.allocatable and not n.promised]
        empty = sorted((n for n in ready if not n.pods), key=lambda n: n.id)
        if empty and self.cfg.validation_delay > 0:
            self.validating = [n.id for n in empty[:budget]]
            sim.wake(now + self.cfg.validation_delay, "validate")
            return
        for n in empty[:budget]:
            sim.drain(n.id)
        if empty or len(self.replacing) >= budget:
            return
        counts = Counter(n.nt.name for n in live)
        key = self._poll_key(sim, ready, counts)
        if key == self._nothing_at:
            self.polls_skipped += 1
            return
        self._nothing_at = None
        for n in sorted(ready, key=lambda n: (len(n.pods), -n.nt.price_per_hour, n.id)):
            if not all(sim.pods[name].pod.safe_to_evict for name in n.pods):
                continue  # a karpenter.sh/do-not-disrupt pod blocks its node's consolidation
            # replacement needs a cheaper type that could run every pod of n; without one, stop at the first
            # pod with no room, as delete consolidation does
            cheaper = self._cheaper_types(sim, n) if self.cfg.replace else ()
            targets = [m for m in ready if m is not n]
            undo = []
            left: list[Pod] = []
            for name in n.pods:
                sp = sim.pods[name]
                dest = sim.schedule(sp, targets)
                if dest is None:
                    left.append(sp.pod)
                    if not cheaper:
                        break
                    continue
                a = choose_devices(dest.cap, sp.pod)
                take(dest.cap, sp.pod, a)
                undo.append((dest.cap, sp.pod, a))
            for cap, p, a in reversed(undo):
                give(cap, p, a)
            if not left:
                sim.drain(n.id)  # delete consolidation
                return
            nt = self._replacement(cheaper, left, counts) if cheaper else None
            if nt is not None:
                # replace consolidation: taint the node, launch the cheaper one, drain when it is up
                sim.cordon(n.id)
                new = sim.launch(nt.name, purpose="repack").id
                self.replacing[n.id] = new
                self.moving[new] = left
                self.replacements.append((now, n.id, n.nt.name, nt.name))
                return
        self._nothing_at = key

    @staticmethod
    def _poll_key(sim: Sim, ready: list[SimNode], counts: Counter[str]) -> object:
        """What the candidates' trials depend on: the ready nodes' pods and free room, and the type limits a
        replacement checks. A poll whose key equals the last one that found nothing finds nothing either."""
        return (
            tuple((n.id, n.cap.cpu, n.cap.mem, tuple(n.cap.devs), tuple(n.pods)) for n in ready),
            tuple(counts[nt.name] for nt in sim.node_types if nt.max_count is not None),
        )

    def _room(self, n: SimNode) -> Capacity:
        """What pods may still be counted against in-flight node ``n``: its free capacity, less the pods a
        replacement was launched for."""
        cap = self._reserve(n.cap.copy())
        for p in self.moving.get(n.id, []):
            if fits(cap, p):
                take(cap, p, choose_devices(cap, p))
        return cap

    def _cheaper_types(self, sim: Sim, n: SimNode) -> tuple[NodeType, ...]:
        """Types cheaper than ``n``'s on which every pod of ``n`` could run, cheapest first (cached by shapes)."""
        shapes = frozenset(sim.pods[name].pod.shape for name in n.pods)
        key = (n.nt.name, shapes)
        got = self._cheaper.get(key)
        if got is None:
            pods = [sim.pods[name].pod for name in n.pods]
            got = self._cheaper[key] = tuple(
                sorted(
                    (
                        nt
                        for nt in sim.node_types
                        if nt.price_per_hour < n.nt.price_per_hour
                        and all(sim.compatible(nt, p) for p in pods)
                    ),
                    key=lambda nt: (nt.price_per_hour, nt.name),
                )
            )
        return got

    @staticmethod
    def _replacement(cheaper: tuple[NodeType, ...], pods: list[Pod], counts: Counter[str]) -> NodeType | None:
        """The first of ``cheaper`` (cheapest first) one node of which holds all of ``pods``, within its
        type's limit (``counts``: live nodes per type; None if none)."""
        for nt in cheaper:
            if nt.max_count is not None and counts[nt.name] >= nt.max_count:
                continue
            count, placed = first_fit_decreasing(pods, nt, 1)
            if count == 1 and len(placed) == len(pods):
                return nt
        return None
