"""The vocabulary of the capacity planner: node types, nodes' lifecycle, pods and their GPU requests.

Everything here is an immutable value so that a planner snapshot can be shared between the simulator and the
live controller without copying. GPU requests follow the Alibaba openb convention: ``num_gpu`` whole devices, or
one device shared at ``gpu_milli`` thousandths when ``num_gpu == 1`` and ``gpu_milli < 1000``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Literal

GPU_MILLI = 1000
"""Thousandths of one GPU device; a whole device is ``GPU_MILLI``."""


class NodeState(StrEnum):
    """Where a node is in its life: requested → booting → ready → GPU allocatable → draining → gone."""

    REQUESTED = "requested"
    BOOTING = "booting"
    READY = "ready"
    GPU_ALLOCATABLE = "gpu_allocatable"
    DRAINING = "draining"
    GONE = "gone"


IN_FLIGHT = frozenset({NodeState.REQUESTED, NodeState.BOOTING, NodeState.READY})
"""States of a node that is paid for but cannot yet run GPU pods (a CPU-only node is allocatable at READY)."""


@dataclass(frozen=True)
class Delay:
    """A delay distribution in seconds: ``fixed`` (a), ``uniform`` (a..b) or ``lognormal`` (median a, sigma b)."""

    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    a: float = 0.0
    b: float = 0.0

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return self.a * math.exp(rng.gauss(0.0, self.b))

    def mean(self) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.a * math.exp(self.b * self.b / 2)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"] = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes semantics: an empty key with ``Exists`` tolerates everything; an empty effect matches all."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True)
class NodeType:
    """One kind of node that can be launched (an instance type in a node group / NodePool)."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpu: int = 0
    gpu_model: str = ""
    price_per_hour: float = 0.0
    capacity_type: Literal["on-demand", "spot"] = "on-demand"
    boot_delay: Delay = field(default_factory=Delay)
    gpu_ready_delay: Delay = field(default_factory=Delay)
    taints: tuple[Taint, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    max_count: int | None = None

    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


class PodShape:
    """A pod's placement-relevant fields as a dictionary key whose hash is computed once."""

    __slots__ = ("_hash", "fields")

    def __init__(self, fields: tuple[object, ...]) -> None:
        self.fields = fields
        self._hash = hash(fields)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, PodShape) and self._hash == other._hash and self.fields == other.fields
        )

    def __repr__(self) -> str:
        return f"PodShape{self.fields!r}"


@dataclass(frozen=True)
class Pod:
    """A pod as the trace describes it: a batch task, or one replica of a service while demand needs it."""

    name: str
    arrival: float
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: frozenset[str] = frozenset()
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    gang: str = ""
    gang_size: int = 1
    duration: float = 0.0
    service: str = ""
    """Set for replicas of an inference service; their arrival and duration come from the demand curve."""
    safe_to_evict: bool = True
    """False for a pod whose eviction loses its work (a batch task without checkpoints): no policy moves it, and
    a node it runs on is not emptied while it runs (Kubernetes: the annotation
    ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``, or Karpenter's ``karpenter.sh/do-not-disrupt``).
    If it is evicted anyway, the simulator runs it again from the start."""

    @cached_property
    def gpu_total_milli(self) -> int:
        """GPU thousandths this pod takes: whole devices or one device's share."""
        return self.num_gpu * self.gpu_milli if self.num_gpu > 1 else self.gpu_milli

    @cached_property
    def is_fractional(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < GPU_MILLI

    @cached_property
    def wants_gpu(self) -> bool:
        return self.num_gpu > 0 and self.gpu_milli > 0

    @cached_property
    def shape(self) -> PodShape:
        """Everything placement looks at; pods with equal shapes are interchangeable for packing."""
        return PodShape(
            (
                self.cpu_milli,
                self.memory_mib,
                self.num_gpu,
                self.gpu_milli,
                self.gpu_models,
                self.node_selector,
                self.tolerations,
            )
        )


@dataclass(frozen=True)
class Workload:
    """What a simulation replays: pods with arrival times and run durations, sorted by arrival."""

    name: str
    pods: tuple[Pod, ...]

    def horizon(self) -> float:
        return max((p.arrival + p.duration for p in self.pods), default=0.0)
