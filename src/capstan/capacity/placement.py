"""Placement rules shared by the simulator's kube-scheduler and the planner, so both agree on what fits.

Filtering follows kube-scheduler's default plugins: NodeResourcesFit (cpu, memory, ``nvidia.com/gpu``),
TaintToleration (NoSchedule/NoExecute), NodeAffinity via ``nodeSelector``, plus the GPU-model constraint
expressed as a selector on the GPU product label. Scoring follows NodeResourcesFit's default ``LeastAllocated``
strategy over cpu and memory with weight 1 each (GPUs are not scored by default). Fractional GPU shares
(openb ``gpu_milli``) are placed on one device, best fit, as GPU-sharing device plugins do.

``fragmentation_cost`` is the planner's FGD-style alternative: it prefers the placement that leaves the fewest
GPU thousandths stranded on partly used devices or on nodes whose CPU/memory is used up.
"""

from __future__ import annotations

from dataclasses import dataclass

from capstan.capacity.model import GPU_MILLI, NodeType, Pod

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
STRANDED_CPU_MILLI = 1000
STRANDED_MEMORY_MIB = 2048


@dataclass(slots=True)
class Capacity:
    """Free resources on one node (mutable working copy); ``devs`` holds free thousandths per GPU device."""

    cpu: int
    mem: int
    devs: list[int]

    @classmethod
    def of(cls, nt: NodeType) -> Capacity:
        return cls(nt.cpu_milli, nt.memory_mib, [GPU_MILLI] * nt.gpu)

    def copy(self) -> Capacity:
        return Capacity(self.cpu, self.mem, list(self.devs))

    def free_gpu_milli(self) -> int:
        return sum(self.devs)


def node_labels(nt: NodeType) -> dict[str, str]:
    labels = {INSTANCE_TYPE_LABEL: nt.name, CAPACITY_TYPE_LABEL: nt.capacity_type}
    if nt.gpu:
        labels[GPU_PRODUCT_LABEL] = nt.gpu_model
    labels.update(nt.labels)
    return labels


def why_incompatible(nt: NodeType, pod: Pod) -> str | None:
    """The first reason ``pod`` can never run on an empty node of type ``nt``, or None if it can."""
    if pod.cpu_milli > nt.cpu_milli:
        return f"cpu {pod.cpu_milli}m > {nt.cpu_milli}m"
    if pod.memory_mib > nt.memory_mib:
        return f"memory {pod.memory_mib}Mi > {nt.memory_mib}Mi"
    if pod.wants_gpu:
        if pod.num_gpu > nt.gpu:
            return f"nvidia.com/gpu {pod.num_gpu} > {nt.gpu}"
        if pod.gpu_models and nt.gpu_model not in pod.gpu_models:
            return f"GPU model {nt.gpu_model or 'none'} not in {'|'.join(sorted(pod.gpu_models))}"
    for taint in nt.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            return f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
    if pod.node_selector:
        labels = node_labels(nt)
        for k, v in pod.node_selector:
            if labels.get(k) != v:
                return f"nodeSelector {k}={v} not matched"
    return None


def fits(cap: Capacity, pod: Pod) -> bool:
    """NodeResourcesFit on free resources (type compatibility is checked separately, once per type)."""
    if pod.cpu_milli > cap.cpu or pod.memory_mib > cap.mem:
        return False
    if not pod.wants_gpu:
        return True
    if not cap.devs:
        return False
    if pod.is_fractional:
        return max(cap.devs) >= pod.gpu_milli
    return cap.devs.count(GPU_MILLI) >= pod.num_gpu


Assignment = tuple[tuple[int, int], ...]
"""(device index, thousandths) pairs a pod holds on its node."""


def choose_devices(cap: Capacity, pod: Pod) -> Assignment:
    """Best fit per device: a share goes to the fullest device that still fits; whole GPUs to free devices."""
    if not pod.wants_gpu:
        return ()
    if pod.is_fractional:
        best = -1
        for i, d in enumerate(cap.devs):
            if d >= pod.gpu_milli and (best < 0 or d < cap.devs[best]):
                best = i
        return ((best, pod.gpu_milli),)
    picked = [i for i, d in enumerate(cap.devs) if d == GPU_MILLI][: pod.num_gpu]
    return tuple((i, GPU_MILLI) for i in picked)


def take(cap: Capacity, pod: Pod, assignment: Assignment) -> None:
    cap.cpu -= pod.cpu_milli
    cap.mem -= pod.memory_mib
    for i, m in assignment:
        cap.devs[i] -= m


def give(cap: Capacity, pod: Pod, assignment: Assignment) -> None:
    cap.cpu += pod.cpu_milli
    cap.mem += pod.memory_mib
    for i, m in assignment:
        cap.devs[i] += m


def least_allocated_score(nt: NodeType, cap: Capacity, pod: Pod) -> float:
    """kube-scheduler NodeResourcesFit LeastAllocated (cpu, memory; weight 1 each), in [0, 100]."""
    cpu_free = (cap.cpu - pod.cpu_milli) / nt.cpu_milli
    mem_free = (cap.mem - pod.memory_mib) / nt.memory_mib
    return 50.0 * (cpu_free + mem_free)


def stranded_milli(cap: Capacity) -> int:
    """GPU thousandths that are hard to use: on partly used devices, or on a node out of CPU or memory."""
    devs = cap.devs
    if not devs:
        return 0
    free = sum(devs)
    if cap.cpu < STRANDED_CPU_MILLI or cap.mem < STRANDED_MEMORY_MIB:
        return free
    return free - GPU_MILLI * devs.count(GPU_MILLI)  # a device is free, partly used or fully used


def fragmentation_cost(cap: Capacity, pod: Pod, assignment: Assignment) -> int:
    """How many more GPU thousandths would be stranded after placing ``pod`` (may be negative: it fills a hole).

    The same as :func:`stranded_milli` after :func:`take` minus before, without changing ``cap``.
    """
    devs = cap.devs
    if not devs:
        return 0
    free = sum(devs)
    whole = devs.count(GPU_MILLI)
    if cap.cpu < STRANDED_CPU_MILLI or cap.mem < STRANDED_MEMORY_MIB:
        before = free
    else:
        before = free - GPU_MILLI * whole
    for i, m in assignment:  # at most one pair per device
        if m and devs[i] == GPU_MILLI:
            whole -= 1
        free -= m
    if cap.cpu - pod.cpu_milli < STRANDED_CPU_MILLI or cap.mem - pod.memory_mib < STRANDED_MEMORY_MIB:
        return free - before
    return free - GPU_MILLI * whole - before
