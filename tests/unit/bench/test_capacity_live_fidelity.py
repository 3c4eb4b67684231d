"""bench/capacity_live.py's comparison of the emulations with the real autoscalers: the emulations as the live run
had them, replayed with drawn queue orders, and the gaps the table prints."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from types import ModuleType

import pytest

from capstan.capacity import Controller, PlannerConfig, Pod, Toleration, Workload, run_policies
from capstan.capacity.live import live_config

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture
def live_bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))
    module = importlib.import_module("capacity_live")
    yield module
    sys.modules.pop("capacity_live", None)


def replica(name: str, arrival: float, duration: float) -> Pod:
    """One GenAI-like replica: one GPU, 8 CPUs and 32 GiB, not safe to evict, tolerating the GPU taint."""
    return Pod(
        name,
        arrival,
        8000,
        32768,
        num_gpu=1,
        gpu_milli=1000,
        duration=duration,
        safe_to_evict=False,
        tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
    )


def test_drawn_spread_replays_each_emulation_per_seed(live_bench: ModuleType) -> None:
    """Eight one-GPU pods in two waves a boot apart on 4-GPU nodes: each emulation is replayed once per draw,
    the figures come back sorted, and the same draws give the same spread."""
    types = live_bench.node_types(300.0, 90.0, pool="p")
    pods = tuple(replica(f"r{i}", 0.0 if i < 4 else 250.0, 2000.0) for i in range(8))
    workload = Workload("w", pods)
    spread = live_bench.drawn_spread(workload, types, 20.0, 5)
    assert set(spread) == set(live_bench.FIDELITY_ROWS)
    for figures in spread.values():
        for values in figures.values():
            assert len(values) == 5 and values == sorted(values)
        assert min(figures["p99_pending_s"]) >= 390.0  # the first wave waits a whole boot under any order
    assert spread == live_bench.drawn_spread(workload, types, 20.0, 5)


def test_fidelity_compares_each_real_autoscaler_with_its_emulation_as_run(live_bench: ModuleType) -> None:
    def row(policy: str, where: str, idle: float, p99: float) -> dict[str, object]:
        return {"policy": policy, "where": where, "idle_gpu_hours": idle, "p99_pending_s": p99}

    rows = [
        row("karpenter", "live", 20.0, 700.0),
        row("cluster-autoscaler", "live", 10.0, 400.0),
        row("karpenter", "simulator", 1.0, 1.0),  # the emulation at its defaults is not the one compared
        row("karpenter, at this run's waits", "simulator", 22.0, 350.0),
        row("cluster-autoscaler, soft taints", "simulator", 10.0, 400.0),
    ]
    gaps = {g["autoscaler"]: g["gaps"] for g in live_bench.fidelity(rows)}
    assert gaps["karpenter"] == pytest.approx({"idle_gpu_hours": 0.1, "p99_pending_s": 0.5})
    assert gaps["cluster-autoscaler"] == {"idle_gpu_hours": 0.0, "p99_pending_s": 0.0}
    assert live_bench.span([1.0, 2.0, 9.0], "{:.0f}") == "2 (1-9)"
    assert live_bench.span([1.0, 2.0, 4.0, 9.0], "{:.1f}") == "3.0 (1.0-9.0)"


def test_simulator_rows_split_idle_by_the_live_runs_causes(live_bench: ModuleType) -> None:
    """A live run files every node's boot under ``booting``; the simulator files a headroom node's under
    ``headroom``. The bench's simulator rows use the live split, so a headroom node's boot is ``booting`` there
    too, and the three causes still add up to the replay's idle GPU-hours."""
    types = live_bench.node_types(300.0, 90.0, pool="p")
    pods = tuple(replica(f"r{i}", 600.0 * i, 3000.0) for i in range(12))
    result, summary = run_policies(Workload("w", pods), types, ["capstan"], planner=live_config())["capstan"]
    headroom = [n for n in result.nodes if n.purpose == "headroom"]
    assert headroom, "the live settings hold headroom on this workload"
    split = live_bench.idle_as_live(result)
    every_boot = (
        sum(n.nt.gpu * (n.gpu_at - n.requested_at) for n in result.nodes if n.gpu_at is not None) / 3600
    )
    assert split["booting"] == pytest.approx(every_boot)
    assert split["booting"] > summary.idle["booting"]  # the simulator's own split leaves headroom boots out
    assert sum(split.values()) == pytest.approx(sum(summary.idle.values()))
    assert split["unallocated"] == pytest.approx(summary.idle["unallocated"])


def test_the_live_controller_runs_every_duration_on_the_replays_clock(live_bench: ModuleType) -> None:
    """The live run's controller is the simulator's at ``speed`` times its pace: each of the planner's durations
    and the controller's react, review and repack intervals divided by it (the repack interval was not, so the
    live run made its full plans 20 times less often than its replay)."""
    durations = {f.name for f in fields(PlannerConfig) if f.name.endswith("_s")}
    assert durations == set(live_bench.TIME_FIELDS)
    sim, live = Controller(live_config()), live_bench.wall_controller(20.0)
    for name in ("react", "review_interval", "repack_interval"):
        assert getattr(live, name) == getattr(sim, name) / 20.0
    for name in durations:
        assert getattr(live.config, name) == getattr(sim.config, name) / 20.0
    assert replace(live.config, **{n: getattr(sim.config, n) for n in durations}) == sim.config
