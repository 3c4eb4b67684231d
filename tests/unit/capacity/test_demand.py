"""Demand announced before it arrives (pure): what a trace's lead announces and when that changes, how the
queue's pods join the planner's forecast, and what it buys a replay."""

from __future__ import annotations

import pytest

from capstan.capacity import (
    ANNOUNCED_SUFFIX,
    Controller,
    Delay,
    Forecast,
    NodeType,
    NoForecast,
    PlannerConfig,
    Pod,
    QueuedDemand,
    Sim,
    Snapshot,
    TraceLead,
    Workload,
)

pytestmark = pytest.mark.unit

PODS = tuple(Pod(f"p{i}", a, 1000, 1024, num_gpu=1, gpu_milli=1000, duration=600.0)
             for i, a in enumerate((100.0, 200.0, 700.0)))  # fmt: skip


def test_a_trace_lead_announces_the_pods_arriving_within_it() -> None:
    lead = TraceLead(PODS, 300.0)
    assert lead.announced(0.0) == ((PODS[0], PODS[1]), 400.0)  # p2 is announced at 700 - 300
    assert lead.announced(100.0) == ((PODS[1],), 400.0)  # p0 has arrived: pending, no longer announced
    assert lead.announced(400.0) == ((PODS[2],), None)
    assert lead.announced(700.0) == ((), None)
    assert TraceLead(PODS, 0.0).announced(0.0) == ((), None)
    with pytest.raises(ValueError, match="lead"):
        TraceLead(PODS, -1.0)


class Fixed:
    def __init__(self, fc: Forecast) -> None:
        self.fc = fc

    def forecast(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
        return self.fc


def snapshot(now: float) -> Snapshot:
    return Snapshot(now=now, node_types=(), nodes=(), pending=(), recent=())


def test_announced_pods_join_the_forecast_renamed_and_say_when_it_changes() -> None:
    own = Pod("own", 0.0, 1000, 1024, num_gpu=1, gpu_milli=1000)
    fc = QueuedDemand(TraceLead(PODS, 300.0), Fixed(Forecast((own,), 250.0))).forecast(
        snapshot(0.0), PlannerConfig(), 390.0
    )
    assert [p.name for p in fc.pods] == ["own", "p0" + ANNOUNCED_SUFFIX, "p1" + ANNOUNCED_SUFFIX]
    assert fc.changes_at == 250.0  # the base forecast's change comes before the next announcement (400)
    capped = QueuedDemand(TraceLead(PODS, 300.0), Fixed(Forecast((), None)), lookahead_s=150.0)
    fc = capped.forecast(snapshot(0.0), PlannerConfig(), 390.0)
    assert [p.name for p in fc.pods] == ["p0" + ANNOUNCED_SUFFIX] and fc.changes_at == 50.0  # p1 at 200 - 150
    nothing = Forecast((), None)
    assert (
        QueuedDemand(TraceLead(PODS, 0.0), Fixed(nothing)).forecast(snapshot(0.0), PlannerConfig(), 1.0)
        is nothing
    )


def test_told_a_boot_ahead_a_pod_finds_its_node_ready() -> None:
    """One GPU pod at 1,000 s on an empty cluster, nodes 300 s from launch to GPUs (a CPU pod at 0 s on a CPU node
    makes the first decision): with its own forecast the planner has seen no GPU pod, so the pod waits a whole
    boot; announced 300 s ahead, the controller wakes for the announcement and the pod is bound as it arrives."""
    nt = NodeType("g1", 8000, 32768, 1, "L4", 1.0, boot_delay=Delay("fixed", 240.0),
                  gpu_ready_delay=Delay("fixed", 60.0))  # fmt: skip
    cpu = NodeType("c1", 4000, 16384, price_per_hour=0.1, boot_delay=Delay("fixed", 60.0))
    pod = Pod("job-0", 1000.0, 1000, 1024, num_gpu=1, gpu_milli=1000, duration=600.0)
    work = Workload("one", (Pod("web", 0.0, 500, 512, duration=10.0), pod))

    def waited(controller: Controller) -> float:
        result = Sim(work, (nt, cpu), controller).run()
        assert result.check() == []
        sp = next(p for p in result.pods if p.pod.name == "job-0")
        assert sp.bound_at is not None
        return sp.bound_at - pod.arrival

    assert waited(Controller()) >= 300.0
    assert waited(Controller(forecaster=QueuedDemand(TraceLead(work.pods, 300.0)))) < 5.0


def test_an_announced_pod_is_held_whole() -> None:
    """A pod of 8 GPUs announced 300 s ahead, and nothing else forecast: held whole, the controller launches the
    8-GPU node it needs and the pod is bound as it arrives. Split like a guessed pod into eight one-GPU phantoms, the
    headroom went to the cheaper one-GPU nodes, where the pod does not fit, and it waited a whole boot."""
    boot, ready = Delay("fixed", 240.0), Delay("fixed", 60.0)
    g1 = NodeType("g1", 8000, 32768, 1, "L4", 0.5, boot_delay=boot, gpu_ready_delay=ready)  # 0.5 per GPU-hour
    g8 = NodeType(
        "g8", 64000, 262144, 8, "L4", 8.0, boot_delay=boot, gpu_ready_delay=ready
    )  # 1.0 per GPU-hour
    cpu = NodeType("c1", 4000, 16384, price_per_hour=0.1, boot_delay=Delay("fixed", 60.0))
    big = Pod("train-0", 1000.0, 8000, 8192, num_gpu=8, gpu_milli=1000, duration=600.0)
    work = Workload("one big pod", (Pod("web", 0.0, 500, 512, duration=10.0), big))
    result = Sim(
        work, (g1, g8, cpu), Controller(forecaster=QueuedDemand(TraceLead(work.pods, 300.0), NoForecast()))
    ).run()
    assert result.check() == []
    sp = next(p for p in result.pods if p.pod.name == "train-0")
    assert sp.bound_at is not None and sp.bound_at - big.arrival < 5.0
    assert [n.nt.name for n in result.nodes if n.nt.gpu] == ["g8"]  # no one-GPU node launched for its parts


def test_an_announced_pod_pinned_to_a_gpu_model_gets_a_node_of_any_size() -> None:
    """A one-GPU pod pinned to A100s, which come only in 8-GPU nodes: a guessed phantom like it may not launch a
    node more than twice its size (``pinned_headroom_node_ratio``), an announced one is coming and does."""
    a100 = NodeType("a8", 64000, 262144, 8, "A100", 16.0, boot_delay=Delay("fixed", 240.0),
                    gpu_ready_delay=Delay("fixed", 60.0))  # fmt: skip
    cpu = NodeType("c1", 4000, 16384, price_per_hour=0.1, boot_delay=Delay("fixed", 60.0))
    pinned = Pod("job-0", 1000.0, 1000, 1024, num_gpu=1, gpu_milli=1000, gpu_models=frozenset({"A100"}),
                 duration=600.0)  # fmt: skip
    work = Workload("one pinned pod", (Pod("web", 0.0, 500, 512, duration=10.0), pinned))
    result = Sim(
        work, (a100, cpu), Controller(forecaster=QueuedDemand(TraceLead(work.pods, 300.0), NoForecast()))
    ).run()
    assert result.check() == []
    sp = next(p for p in result.pods if p.pod.name == "job-0")
    assert sp.bound_at is not None and sp.bound_at - pinned.arrival < 5.0


def test_no_forecast_holds_nothing_and_announced_names_are_known() -> None:
    assert NoForecast().forecast(snapshot(0.0), PlannerConfig(), 390.0) == Forecast((), None, guessed=False)
    own = Pod("own", 0.0, 1000, 1024, num_gpu=1, gpu_milli=1000)
    fc = QueuedDemand(TraceLead(PODS, 300.0), Fixed(Forecast((own,), None))).forecast(
        snapshot(0.0), PlannerConfig(), 390.0
    )
    assert fc.known == {"p0" + ANNOUNCED_SUFFIX, "p1" + ANNOUNCED_SUFFIX}  # the own forecast's pod is a guess
    assert fc.guessed  # beside a forecast that guesses, announced pods do not make it exact
    told = QueuedDemand(TraceLead(PODS, 300.0), NoForecast()).forecast(snapshot(0.0), PlannerConfig(), 390.0)
    assert told.known and not told.guessed  # the queue as the whole forecast: nothing is guessed
