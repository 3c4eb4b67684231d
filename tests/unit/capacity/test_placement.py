"""Placement arithmetic: the fast fragmentation cost against its definition, on random nodes and pods."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from capstan.capacity import Pod
from capstan.capacity.model import GPU_MILLI
from capstan.capacity.placement import (
    STRANDED_CPU_MILLI,
    STRANDED_MEMORY_MIB,
    Capacity,
    choose_devices,
    fits,
    fragmentation_cost,
    give,
    stranded_milli,
    take,
)

pytestmark = pytest.mark.unit


def stranded_by_definition(cap: Capacity) -> int:
    """GPU thousandths on partly used devices, or every free one when the node is out of CPU or memory."""
    if not cap.devs:
        return 0
    if cap.cpu < STRANDED_CPU_MILLI or cap.mem < STRANDED_MEMORY_MIB:
        return sum(cap.devs)
    return sum(d for d in cap.devs if 0 < d < GPU_MILLI)


devices = st.lists(
    st.sampled_from([0, 1, 100, 250, 500, 999, GPU_MILLI]) | st.integers(0, GPU_MILLI), max_size=8
)
capacities = st.builds(Capacity, st.integers(0, 16000), st.integers(0, 32768), devices)
pods = st.builds(
    Pod,
    name=st.just("p"),
    arrival=st.just(0.0),
    cpu_milli=st.integers(0, 4000),
    memory_mib=st.integers(0, 8192),
    num_gpu=st.integers(0, 4),
    gpu_milli=st.sampled_from([0, 1, 250, 500, 999, GPU_MILLI]),
)


@given(capacities, pods)
@example(Capacity(8000, 16384, [GPU_MILLI, 500]), Pod("whole", 0.0, 1000, 1024, 1, GPU_MILLI))
@example(Capacity(8000, 16384, [GPU_MILLI, 500]), Pod("share", 0.0, 1000, 1024, 1, 500))
@example(Capacity(1500, 16384, [GPU_MILLI, 500]), Pod("starves", 0.0, 1000, 1024, 1, 250))
def test_fragmentation_cost_is_stranded_after_minus_before(cap: Capacity, pod: Pod) -> None:
    assert stranded_milli(cap) == stranded_by_definition(cap)
    if not fits(cap, pod):
        return
    a = choose_devices(cap, pod)
    kept = cap.copy()
    before = stranded_by_definition(cap)
    take(cap, pod, a)
    after = stranded_by_definition(cap)
    give(cap, pod, a)
    assert cap == kept
    assert fragmentation_cost(cap, pod, a) == after - before
    assert cap == kept  # it does not touch the node
