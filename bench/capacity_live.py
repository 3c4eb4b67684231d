"""Capstan's capacity controller, the real Karpenter and the real cluster-autoscaler, each live on a real control
plane with kwok nodes, on the same time-compressed slice of a trace; beside the same slice replayed in the
simulator (Capstan, the cluster-autoscaler and Karpenter emulations, the oracle).

    .venv/bin/python bench/capacity_live.py                        # openb's busiest 3 h, 10x faster, all three
    .venv/bin/python bench/capacity_live.py --who capstan,karpenter --karpenter PATH --cluster-autoscaler PATH
    .venv/bin/python bench/capacity_live.py --trace FILE --window 6 --speed 30 --tasks 200
    .venv/bin/python bench/capacity_live.py --smoke                # seconds: 6 tasks, Capstan only

The slice is the trace's busiest ``--window`` hours of GPU tasks (gangs and tasks over 8 GPUs left out, at most
``--tasks``), replayed ``--speed`` times faster than recorded: each task's pod is created at its arrival and
deleted at its end (durations capped at the window), through ``capstan.capacity.live.replay_pods``. Every pod is
marked not safe to evict (``Pod.safe_to_evict`` False: Karpenter's ``do-not-disrupt`` and cluster-autoscaler's
``safe-to-evict: "false"``), in the live runs and in the simulator, so no autoscaler moves a running task.

Each of ``--who`` runs on a sandbox of its own (or, with ``--kubeconfig``, one after the other on that cluster):
Capstan's pods are gated for its controller (kwok provider); Karpenter's and cluster-autoscaler's are plain pods
that kube-scheduler marks unschedulable, for the peer's kwok cloud provider to launch nodes for. Boot and
GPU-ready delays are given in trace time and happen the same way for all three, from the moment the Node object
appears: Capstan's kwok provider boots its nodes itself; a peer's nodes carry the startup taint
``capstan.io/booting`` (Karpenter's NodePool ``startupTaints``, cluster-autoscaler's template nodes with
``--startup-taint``), and the bench's boot emulator (``_autoscalers.emulate_boot``) holds their allocatable GPUs at
0, takes the taint off ``--boot-delay / speed`` wall seconds later and gives the GPUs back ``--gpu-ready-delay /
speed`` after that, as a device plugin would.

Every timer is divided by the speed-up: Capstan's controller (react 1 s, reviews every 60 s, the planner's
durations such as the 300 s an empty node waits before a drain; ``live_config``), cluster-autoscaler's duration
flags (``_autoscalers.ca_flags_for_speed``: scan interval, scale-down unneeded time and delays, provision
timeouts) and Karpenter's batch windows. Two of Karpenter's waits are constants in its code (disruption polling
10 s, consolidation command validation 15 s) and last ``speed`` times longer in trace time; cluster-autoscaler's
hard-coded 30 s wait for new GPU pods is turned off (``--bypassed-scheduler-names``) rather than stretched. The
simulator replays the emulations twice: at their defaults, and as the live run had them (``as_run``: Karpenter
"at this run's waits", its disruption polling ``10 × speed`` and the wait before it deletes the empty nodes a poll
found, ``15 × speed``, ``KarpenterConfig.validation_delay``, only nominating the pods it launches for,
``nominate_only``, and packing them less its kwok provider's reserve of 100m CPU and 10 Mi a node; cluster-autoscaler soft-tainting the nodes it finds unneeded, ``soft_taint_unneeded``). Those
are compared with the real autoscalers, beside the same replayed ``--draws`` times with the waiting pods tried in
a drawn order (``Sim(queue_order="drawn")``): which waiting pods a new node's room goes to is the scheduler queue's
draw on a live cluster, and it decides the slowest pods' waits. Capstan is also replayed there without
forecast headroom, to show what its headroom costs and buys on the slice.

Figures are in trace time and, like the simulator's, stop at the end of the slice's last pod: pending p50/p99,
pods that waited over a minute, GPU-hours, idle GPU-hours by cause (booting, empty, unallocated), cost, launches,
drains. The replay polls the API server every 0.25 wall seconds, so waits are measured to about ``0.25 × speed``
trace seconds. Peers' binaries: ``--karpenter`` / ``--cluster-autoscaler`` (default ``$CAPSTAN_KARPENTER``,
``$CAPSTAN_CLUSTER_AUTOSCALER``, ``../peers/bin``; built by bench/peers/build_autoscalers.sh, see
docs/benchmarks.md); a participant whose binary is missing is left out with a line saying so.

Prints Rich tables (the runs; the emulations against the real autoscalers; the goals), writes
bench/out/capacity_live.json, and under bench/out/capacity_live-logs/ the peers' logs and each participant's
timeline (every pod's creation, binding, end and node; every node's life, in trace seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _autoscalers import (
    CA_NAMESPACE,
    KARPENTER_FIXED_S,
    PeerError,
    ca_flags_for_speed,
    emulate_boot,
    find_cluster_autoscaler,
    find_karpenter,
    install_cluster_autoscaler,
    install_karpenter,
    karpenter_flags_for_speed,
    karpenter_teardown,
    start_cluster_autoscaler,
    start_karpenter,
    wait_karpenter_pools_ready,
    write_karpenter_instance_types,
)
from capstan.capacity import (
    CAConfig,
    ClusterAutoscalerPolicy,
    Controller,
    Delay,
    KarpenterConfig,
    KarpenterPolicy,
    NodeType,
    PlannerConfig,
    Policy,
    Sim,
    SimResult,
    Summary,
    Taint,
    Workload,
    empty_start_floor,
    load_trace,
    run_policies,
    summarize,
)
from capstan.capacity.live import (
    BOOTING_TAINT,
    POOL_LABEL,
    PURPOSE_LABEL,
    ReplayResult,
    ensure_namespace,
    follow_scale_down,
    live_config,
    replay_pods,
    replay_under_controller,
)
from capstan.kube import KubeClient, resources
from capstan.percentile import percentile

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023" / "openb_pod_list_default.csv"
OUT = ROOT / "bench" / "out"
POOL = "bench-live"
NAMESPACE = "capstan-bench-live"
WHO = ("capstan", "karpenter", "cluster-autoscaler")
POLL_S = 0.25
FIDELITY = 0.15
"""The emulation goal: within 15 % of the real autoscaler on idle GPU-hours and pending p99."""


def node_types(boot: float, ready: float, *, pool: str) -> tuple[NodeType, ...]:
    taint = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    labels = ((POOL_LABEL, pool),)
    return (
        NodeType("live-l4x4", 48000, 196608, 4, "NVIDIA-L4", 3.35, boot_delay=Delay("fixed", boot),
                 gpu_ready_delay=Delay("fixed", ready), taints=taint, labels=labels),
        NodeType("live-h100x8", 96000, 786432, 8, "NVIDIA-H100", 55.04, boot_delay=Delay("fixed", boot),
                 gpu_ready_delay=Delay("fixed", ready), taints=taint, labels=labels),
    )  # fmt: skip


def the_slice(trace: str, tasks: int, window_s: float) -> Workload:
    """The busiest ``window_s`` of the trace (the most GPU tasks arriving within it; gangs and tasks over 8 GPUs
    left out), at most ``tasks`` of them, arrivals from 0, durations capped at the window, none safe to evict."""
    workload = load_trace(trace)
    pods = sorted(
        (p for p in workload.pods if p.wants_gpu and p.num_gpu <= 8 and not p.gang), key=lambda p: p.arrival
    )
    if not pods:
        raise SystemExit(f"{trace}: no GPU task to replay")
    best, lo = (0, 0), 0
    for hi in range(len(pods)):
        while pods[hi].arrival - pods[lo].arrival >= window_s:
            lo += 1
        if hi - lo + 1 > best[1] - best[0]:
            best = (lo, hi + 1)
    chosen = pods[best[0] : best[1]][:tasks]
    t0 = chosen[0].arrival
    # Kubernetes has no GPU shares: a task asking for part of a GPU asks for a whole one, in both replays
    chosen = [
        replace(
            p,
            arrival=p.arrival - t0,
            duration=min(p.duration, window_s),
            node_selector=(),
            gpu_milli=1000,
            safe_to_evict=False,
        )
        for p in chosen
    ]
    return Workload(
        f"{Path(trace).name}, busiest {window_s / 3600:.2g} h ({len(chosen)} GPU tasks)", tuple(chosen)
    )


TIME_FIELDS = (
    "forecast_day_s",
    "forecast_day_band_s",
    "forecast_day_step_s",
    "forecast_recent_s",
    "service_half_life_s",
    "headroom_wait_s",
    "repack_min_age_s",
    "min_idle_s",
    "known_idle_s",
)
"""The planner's settings that are durations: a live replay at ``speed`` divides them by it."""


def wall_config(config: PlannerConfig, speed: float) -> PlannerConfig:
    """``config`` on the wall clock of a replay ``speed`` times faster than the trace."""
    return replace(config, **{f: getattr(config, f) / speed for f in TIME_FIELDS})


def wall_controller(speed: float) -> Controller:
    """The controller the simulator replays the slice with (its defaults, the live settings), every duration of it
    and its planner on the wall clock of a replay ``speed`` times faster than the trace."""
    defaults = Controller()
    return Controller(
        wall_config(live_config(), speed),
        react=defaults.react / speed,
        review_interval=defaults.review_interval / speed,
        repack_interval=defaults.repack_interval / speed,
    )


@dataclass
class Run:
    """One participant's live run."""

    replay: ReplayResult
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Setup:
    workload: Workload
    speed: float
    boot_s: float
    gpu_ready_s: float
    wall_types: tuple[NodeType, ...]
    logs: Path
    max_nodes: int
    binaries: dict[str, Path]


async def capstan_live(kube: KubeClient, setup: Setup) -> Run:
    speed = setup.speed
    controller = wall_controller(speed)
    run = await replay_under_controller(
        kube,
        setup.workload.pods,
        NAMESPACE,
        controller,
        setup.wall_types,
        speed=speed,
        pool=POOL,
        drain_wait_s=5.0,
        poll_s=POLL_S,  # as the peers' replays: the bind seen, and each pod's run started, as promptly
    )
    decided = sorted(run.stats.decision_s)
    return Run(
        run.replay,
        {
            "decisions": run.stats.decisions,
            "decision_p99_ms": percentile(decided, 99, empty=0.0) * 1000,
            "failed_calls": len(run.stats.failures),
        },
    )


async def peer_live(kube: KubeClient, kubeconfig: Path, who: str, setup: Setup) -> Run:
    """Install and start the real ``who`` (karpenter or cluster-autoscaler), replay the slice as plain pods with
    its nodes booted by :func:`emulate_boot`, then stop it and remove what is left of the pool."""
    speed, binary = setup.speed, setup.binaries[who]
    log = setup.logs / f"{who}.log"
    log.unlink(missing_ok=True)
    if who == "karpenter":
        await install_karpenter(
            kube, setup.wall_types, consolidate_after="0s", startup_taints=[BOOTING_TAINT]
        )
        types_file = write_karpenter_instance_types(
            setup.wall_types, setup.logs / "karpenter-instance-types.json"
        )
        proc = start_karpenter(
            binary, kubeconfig, types_file, log, extra_args=karpenter_flags_for_speed(speed)
        )
    else:
        await install_cluster_autoscaler(
            kube, setup.wall_types, max_count=setup.max_nodes, startup_taints=[BOOTING_TAINT]
        )
        flags = ca_flags_for_speed(speed, startup_taints=[BOOTING_TAINT])
        proc = start_cluster_autoscaler(binary, kubeconfig, log, namespace=CA_NAMESPACE, extra_args=flags)
    extra: dict[str, Any] = {"argv": " ".join(proc.argv[1:]), "log": str(log)}
    try:
        extra["ready_s"] = round(await asyncio.to_thread(proc.wait_ready, 90.0), 1)
        if who == "karpenter":
            extra["pools_ready_s"] = round(await wait_karpenter_pools_ready(kube), 1)
        await ensure_namespace(kube, NAMESPACE)
        stop = asyncio.Event()
        booter = asyncio.create_task(
            emulate_boot(
                kube,
                f"{POOL_LABEL}={POOL}",
                setup.boot_s / speed,
                setup.gpu_ready_s / speed,
                stop,
                taint=BOOTING_TAINT,
                skip_label=PURPOSE_LABEL,
            )
        )
        try:
            result = await replay_pods(
                kube, setup.workload.pods, NAMESPACE, speed=speed, pool=POOL, gated=False, poll_s=POLL_S
            )
            await follow_scale_down(kube, POOL, result, timeout_s=5.0)
        finally:
            stop.set()
            booted = await booter
        extra["booted_nodes"] = len(booted)
        extra["exited_early"] = not proc.running()
        if who == "karpenter":
            extra["nodeclaims_left"] = await karpenter_teardown(kube)
    finally:
        extra["exit_code"] = proc.stop()
        nodes, _ = await kube.list(resources.NODES, label_selector=f"{POOL_LABEL}={POOL}")
        for node in nodes:
            await kube.delete(resources.NODES, node["metadata"]["name"])
    return Run(result, extra)


def write_timeline(path: Path, replay: ReplayResult, speed: float) -> None:
    """Each pod's and node's life in a live run, in trace seconds from the first pod's creation: what explains a
    figure (which pods waited, for which node) when the tables do not."""
    t0 = min(replay.created.values(), default=0.0)

    def at(t: float | None) -> float | None:
        return None if t is None else round((t - t0) * speed, 1)

    pods = [
        {"pod": n, "created": at(c), "bound": at(replay.bound.get(n)), "ended": at(replay.ended.get(n)),
         "node": replay.pod_node.get(n)}
        for n, c in sorted(replay.created.items(), key=lambda kv: kv[1])
    ]  # fmt: skip
    nodes = [
        {"node": n, "type": replay.node_type.get(n), "seen": at(a), "gpus_ready": at(replay.gpu_ready.get(n)),
         "gone": at(b)}
        for n, (a, b) in sorted(replay.node_life.items(), key=lambda kv: kv[1][0])
    ]  # fmt: skip
    path.write_text(json.dumps({"speed": speed, "pods": pods, "nodes": nodes}, indent=1))


def on_cluster(
    kubeconfig: Path | None,
    scratch: Path,
    name: str,
    fn: Callable[[Path], Coroutine[Any, Any, Run]],
    *,
    max_backoff_s: int,
) -> Run:
    """``fn(kubeconfig)`` on the given cluster, or on a sandbox of its own started and stopped around it (its
    kube-scheduler's pod backoff at most ``max_backoff_s``)."""
    if kubeconfig is not None:
        return asyncio.run(fn(kubeconfig))
    from capstan.sandbox import NodePool, Sandbox, SandboxSpec, find_toolchain

    toolchain = find_toolchain()
    if toolchain is None:
        raise SystemExit(
            "control plane binaries are not built: run `make test` or `capstan sandbox up` first"
        )
    box = Sandbox(scratch / name, toolchain)
    try:
        spec = SandboxSpec(
            name=name,
            node_pools=[NodePool(name="cpu", count=1)],
            scheduler_pod_max_backoff_s=max_backoff_s,
        )
        state = box.up(spec, timeout=240)
        return asyncio.run(fn(Path(state.kubeconfig)))
    finally:
        box.down()


def live_row(who: str, run: Run, setup: Setup, prices: dict[str, float]) -> dict[str, Any]:
    speed, live = setup.speed, run.replay
    end = live.last_end()
    waits = live.pending_s(speed)
    idle = live.idle_by_cause(speed, until=end)
    return {
        "policy": who,
        "where": "live",
        "pods": len(setup.workload.pods),
        "bound": len(live.bound),
        "p50_pending_s": percentile(waits, 50, empty=0.0),
        "p99_pending_s": percentile(waits, 99, empty=0.0),
        "waited_over_60s": sum(1 for w in waits if w > 60.0),
        "gpu_hours": live.gpu_hours(speed, until=end),
        "idle_gpu_hours": sum(idle.values()),
        "idle": idle,
        "cost": live.cost(speed, prices, until=end),
        "launches": len(live.node_life),
        "drains": live.drains(until=end),
        # each node's launch → GPUs allocatable, trace seconds (the boot emulation: boot + GPU-ready delay)
        "node_boot_s": sorted(
            round((live.gpu_ready[n] - a) * speed, 1)
            for n, (a, _) in live.node_life.items()
            if n in live.gpu_ready
        ),
        **run.extra,
    }


def sim_row(name: str, s: Summary, result: SimResult) -> dict[str, Any]:
    return {
        "policy": name,
        "where": "simulator",
        "pods": s.pods,
        "bound": s.bound,
        "p50_pending_s": s.pending["total"][0],
        "p99_pending_s": s.pending["total"][2],
        "waited_over_60s": s.slow_starts,
        "gpu_hours": s.gpu_hours,
        "idle_gpu_hours": sum(s.idle.values()),
        "idle": idle_as_live(result),
        "cost": s.cost,
        "launches": s.launches,
        "drains": s.drains,
    }


def idle_as_live(result: SimResult) -> dict[str, float]:
    """A replay's idle GPU-hours by the causes :meth:`ReplayResult.idle_by_cause` gives a live run: ``booting``
    from launch to GPUs allocatable, whatever the node was launched for (the simulator files a headroom node's
    boot under ``headroom``), ``unallocated`` the free GPUs of nodes some pod runs on, ``empty`` the rest
    (ready with no pod, draining, headroom, launched twice)."""
    total = sum(result.idle_gpu_hours().values())
    booting = 0.0
    for n in result.nodes:
        end = n.gone_at if n.gone_at is not None else result.end
        allocatable = n.gpu_at if n.gpu_at is not None else end
        booting += n.nt.gpu * max(0.0, min(allocatable, end) - n.requested_at) / 3600
    unallocated = sum(n.idle_s["unallocated"] for n in result.nodes) / 3600
    return {"booting": booting, "empty": max(0.0, total - booting - unallocated), "unallocated": unallocated}


def simulated(workload: Workload, trace_types: tuple[NodeType, ...], speed: float) -> list[dict[str, Any]]:
    """The slice in the simulator: Capstan (defaults; the live run's settings, with and without headroom), the
    emulations at their defaults and at the waits the compressed live run had, and the oracle."""
    rows: list[dict[str, Any]] = []
    same = run_policies(workload, trace_types, ["capstan"], planner=live_config())["capstan"]
    rows.append(sim_row("capstan, live settings", same[1], same[0]))
    reactive = run_policies(
        workload, trace_types, ["capstan"], planner=replace(live_config(), headroom=False)
    )
    rows.append(
        sim_row("capstan, live settings, no headroom", reactive["capstan"][1], reactive["capstan"][0])
    )
    for name, (result, s) in run_policies(workload, trace_types, ["capstan", "cluster-autoscaler", "karpenter",
                                                            "oracle"]).items():  # fmt: skip
        rows.append(sim_row(name, s, result))
    for name, policy in as_run(speed).items():
        t0 = time.perf_counter()
        result = Sim(workload, trace_types, policy()).run()
        rows.append(sim_row(name, summarize(result, time.perf_counter() - t0), result))
    return rows


def as_run(speed: float) -> dict[str, Callable[[], Policy]]:
    """The emulations as the live run had them, each compared with its real autoscaler: Karpenter at the
    compressed run's waits (its disruption polling and validation are constants of its code), only nominating the
    pods it launches for, packing them with its kwok provider's reserve; cluster-autoscaler (every wait scaled) soft-tainting the nodes it finds unneeded."""
    return {
        "karpenter, at this run's waits": lambda: KarpenterPolicy(
            KarpenterConfig(
                disruption_interval=KARPENTER_FIXED_S["disruption polling"] * speed,
                validation_delay=KARPENTER_FIXED_S["consolidation command validation"] * speed,
                nominate_only=True,
                # its kwok provider's InstanceTypeOverhead (kube-reserved), which the live Karpenter packs with
                reserved_cpu_milli=KARPENTER_KWOK_RESERVED[0],
                reserved_memory_mib=KARPENTER_KWOK_RESERVED[1],
            )
        ),
        "cluster-autoscaler, soft taints": lambda: ClusterAutoscalerPolicy(
            CAConfig(soft_taint_unneeded=True)
        ),
    }


KARPENTER_KWOK_RESERVED = (100, 10)
"""CPU thousandths and MiB Karpenter's kwok cloud provider reserves on every instance type
(``kwok/cloudprovider/helpers.go``, v1.15.0: ``KubeReserved`` 100m and 10Mi)."""


FIDELITY_ROWS = {
    "karpenter": "karpenter, at this run's waits",
    "cluster-autoscaler": "cluster-autoscaler, soft taints",
}
"""Each real autoscaler → the simulator row of its emulation as the live run had it (:func:`as_run`)."""


def drawn_spread(
    workload: Workload, trace_types: tuple[NodeType, ...], speed: float, draws: int
) -> dict[str, dict[str, list[float]]]:
    """Each emulation of :func:`as_run` replayed ``draws`` times with the waiting pods tried in a drawn order
    (``Sim(queue_order="drawn")``, seeds 0…): kube-scheduler gives a new node's room to whichever waiting pods it
    tries first, which a live run decides by when each pod last failed, so the real autoscalers' figures vary run
    to run the way these draws do. Per autoscaler, the sorted pending p99s and idle GPU-hours."""
    out: dict[str, dict[str, list[float]]] = {}
    policies = as_run(speed)
    for who, row in FIDELITY_ROWS.items():
        p99s, idles = [], []
        for seed in range(draws):
            s = summarize(
                Sim(workload, trace_types, policies[row](), seed=seed, queue_order="drawn").run(), 0.0
            )
            p99s.append(s.pending["total"][2])
            idles.append(sum(s.idle.values()))
        out[who] = {"p99_pending_s": sorted(p99s), "idle_gpu_hours": sorted(idles)}
    return out


def span(values: list[float], fmt: str) -> str:
    """The median of ``values`` (sorted) and their range."""
    mid = (
        values[len(values) // 2]
        if len(values) % 2
        else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
    )
    return f"{fmt.format(mid)} ({fmt.format(values[0])}-{fmt.format(values[-1])})"


def fidelity(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each real autoscaler against its emulation as the live run had it (:data:`FIDELITY_ROWS`): relative gaps
    on idle GPU-hours and pending p99."""
    by = {(r["policy"], r["where"]): r for r in rows}
    out = []
    for who, emulation in FIDELITY_ROWS.items():
        real, emu = by.get((who, "live")), by.get((emulation, "simulator"))
        if real is None or emu is None:
            continue
        gaps = {}
        for key in ("idle_gpu_hours", "p99_pending_s"):
            gaps[key] = abs(emu[key] - real[key]) / real[key] if real[key] > 0 else float(emu[key] > 0)
        out.append({"autoscaler": who, "real": real, "emulated": emu, "gaps": gaps})
    return out


def goals(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Capstan live against the better real autoscaler (of those that ran), per figure."""
    by = {r["policy"]: r for r in rows if r["where"] == "live"}
    peers = [by[w] for w in ("karpenter", "cluster-autoscaler") if w in by]
    if "capstan" not in by or not peers:
        return None
    me = by["capstan"]
    best_p99 = min(p["p99_pending_s"] for p in peers)
    best_idle = min(p["idle_gpu_hours"] for p in peers)
    cheapest = min(p["cost"] for p in peers)
    return {
        "p99_ratio": me["p99_pending_s"] / best_p99 if best_p99 > 0 else float("inf"),
        "idle_ratio": me["idle_gpu_hours"] / best_idle if best_idle > 0 else float("inf"),
        "cost_ratio": me["cost"] / cheapest if cheapest > 0 else float("inf"),
        "peers": [p["policy"] for p in peers],
    }


def bounds(
    workload: Workload, trace_types: tuple[NodeType, ...], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """What the live goals ask of this slice, beside what no policy can do better than: the p99 wait of a cluster
    that starts with no node (:func:`~capstan.capacity.empty_start_floor`; it binds every autoscaler on a cold
    slice) and the oracle's idle GPU-hours (nodes up the instant it asks, no headroom) against 0.5× the better
    autoscaler's (the real ones where they ran, else their emulations)."""
    live = {r["policy"]: r for r in rows if r["where"] == "live"}
    sim = {r["policy"]: r for r in rows if r["where"] == "simulator"}
    peers = [live[w] for w in ("karpenter", "cluster-autoscaler") if w in live] or [
        sim[w] for w in ("karpenter", "cluster-autoscaler") if w in sim
    ]
    best_idle = min((p["idle_gpu_hours"] for p in peers), default=0.0)
    best_p99 = min((p["p99_pending_s"] for p in peers), default=0.0)
    return {
        "p99_floor_s": empty_start_floor(workload, trace_types),
        "p99_goal_s": 0.2 * best_p99,
        "oracle_idle_gpu_hours": sim["oracle"]["idle_gpu_hours"] if "oracle" in sim else None,
        "idle_goal_gpu_hours": 0.5 * best_idle,
        "against": "real" if any(w in live for w in ("karpenter", "cluster-autoscaler")) else "emulated",
    }


def print_tables(console: Console, rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    for col in ("policy", "where", "bound", "pending p50 s", "pending p99 s", "waited > 60 s", "GPU-h",
                "idle GPU-h", "booting", "empty", "unalloc.", "cost $", "launches", "drains"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        i = r["idle"]
        table.add_row(
            str(r["policy"]), str(r["where"]), f"{r['bound']}/{r['pods']}", f"{r['p50_pending_s']:,.0f}",
            f"{r['p99_pending_s']:,.0f}", str(r["waited_over_60s"]), f"{r['gpu_hours']:,.1f}",
            f"{r['idle_gpu_hours']:,.1f}", f"{i['booting']:,.1f}", f"{i['empty']:,.1f}", f"{i['unallocated']:,.1f}",
            f"{r['cost']:,.0f}", str(r["launches"]), str(r["drains"]),
        )  # fmt: skip
    console.print(table)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through ``on_cluster``, which stops the sandbox and the peers


def main() -> None:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--trace", default=str(OPENB))
    ap.add_argument("--tasks", type=int, default=60, help="at most this many GPU tasks")
    ap.add_argument("--window", type=float, default=3.0, help="hours of the trace to replay (its busiest)")
    ap.add_argument("--speed", type=float, default=10.0, help="trace seconds per wall second")
    ap.add_argument("--boot-delay", type=float, default=300.0, help="trace seconds, launch → node Ready")
    ap.add_argument(
        "--gpu-ready-delay", type=float, default=90.0, help="trace seconds, Ready → GPUs allocatable"
    )
    ap.add_argument("--who", default=",".join(WHO), help=f"comma-separated, of {', '.join(WHO)}")
    ap.add_argument("--karpenter", default=None, help="Karpenter's kwok binary")
    ap.add_argument("--cluster-autoscaler", default=None, help="cluster-autoscaler's kwok binary")
    ap.add_argument("--max-nodes", type=int, default=50, help="cluster-autoscaler's node group maximum")
    ap.add_argument(
        "--kubeconfig", type=Path, default=None, help="a running cluster (default: a sandbox per participant)"
    )
    ap.add_argument(
        "--scheduler-max-backoff",
        type=int,
        default=1,
        help="the sandboxes' kube-scheduler podMaxBackoffSeconds (its default 10 s would stretch with --speed)",
    )
    ap.add_argument(
        "--draws",
        type=int,
        default=20,
        help="replays of each emulation with the waiting pods tried in a drawn order, beside the real autoscaler",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.draws < 1:
        raise SystemExit(f"--draws {args.draws}: must be at least 1")
    who = [w.strip() for w in args.who.split(",") if w.strip()]
    unknown = [w for w in who if w not in WHO]
    if unknown:
        raise SystemExit(f"--who {','.join(unknown)}: not one of {', '.join(WHO)}")
    if args.smoke:
        args.tasks, args.window, args.speed = 6, 0.25, 50.0
        if args.who == ",".join(WHO):
            who = ["capstan"]
    console = Console(width=170)
    binaries: dict[str, Path] = {}
    for name, found in (("karpenter", find_karpenter(args.karpenter)),
                        ("cluster-autoscaler", find_cluster_autoscaler(args.cluster_autoscaler))):  # fmt: skip
        if name in who and found is None:
            console.print(f"{name}: no binary (build with bench/peers/build_autoscalers.sh); left out")
            who.remove(name)
        elif found is not None:
            binaries[name] = found
    speed = args.speed
    workload = the_slice(args.trace, args.tasks, args.window * 3600)
    wall_types = node_types(args.boot_delay / speed, args.gpu_ready_delay / speed, pool=POOL)
    trace_types = node_types(args.boot_delay, args.gpu_ready_delay, pool=POOL)
    prices = {t.name: t.price_per_hour for t in trace_types}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    logs = args.out / "capacity_live-logs"
    logs.mkdir(parents=True, exist_ok=True)
    setup = Setup(workload, speed, args.boot_delay, args.gpu_ready_delay, wall_types, logs, args.max_nodes,
                  binaries)  # fmt: skip

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="capstan-live-") as scratch:
        for name in who:

            async def one(kubeconfig: Path, name: str = name) -> Run:
                async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
                    if name == "capstan":
                        return await capstan_live(kube, setup)
                    return await peer_live(kube, kubeconfig, name, setup)

            t0 = time.monotonic()
            try:
                run = on_cluster(
                    args.kubeconfig,
                    Path(scratch),
                    f"live-{name}",
                    one,
                    max_backoff_s=args.scheduler_max_backoff,
                )
            except PeerError as exc:
                console.print(f"{name}: {exc}")
                continue
            rows.append(live_row(name, run, setup, prices))
            write_timeline(logs / f"{name}-timeline.json", run.replay, speed)
            console.print(f"{name}: live run took {time.monotonic() - t0:,.0f} s wall")
    rows += simulated(workload, trace_types, speed)
    title = (
        f"{workload.name} at {speed:,.0f}x; boot {args.boot_delay:.0f} s + GPUs {args.gpu_ready_delay:.0f} s "
        "(figures in trace time, to the last pod's end)"
    )
    print_tables(console, rows, title)
    for r in rows:
        if r["where"] == "live" and r["policy"] == "capstan":
            console.print(
                f"capstan live: {r['decisions']} decisions, p99 {r['decision_p99_ms']:.1f} ms, "
                f"{r['failed_calls']} failed calls (retried)"
            )
        elif r["where"] == "live":
            console.print(f"{r['policy']}: {r['argv']}")
    gaps = fidelity(rows)
    spread = drawn_spread(workload, trace_types, speed, args.draws) if gaps else {}
    if gaps:
        table = Table(title=f"emulation against the real autoscaler (goal: within {FIDELITY:.0%})")
        for col in (
            "autoscaler",
            "idle GPU-h real",
            "emulated",
            "gap",
            f"drawn ×{args.draws}: median (range)",
            "pending p99 s real",
            "emulated",
            "gap",
            f"drawn ×{args.draws}: median (range)",
        ):
            table.add_column(col, justify="right")
        for g in gaps:
            real, emu, drawn = g["real"], g["emulated"], spread[g["autoscaler"]]
            table.add_row(
                g["autoscaler"], f"{real['idle_gpu_hours']:,.1f}", f"{emu['idle_gpu_hours']:,.1f}",
                f"{g['gaps']['idle_gpu_hours']:.0%}", span(drawn["idle_gpu_hours"], "{:,.1f}"),
                f"{real['p99_pending_s']:,.0f}", f"{emu['p99_pending_s']:,.0f}", f"{g['gaps']['p99_pending_s']:.0%}",
                span(drawn["p99_pending_s"], "{:,.0f}"),
            )  # fmt: skip
        console.print(table)
        console.print(
            f"emulated: {', '.join(FIDELITY_ROWS.values())}, waiting pods tried oldest first; drawn: the same "
            f"replayed {args.draws} times with the waiting pods tried in a drawn order (seeds 0-{args.draws - 1})"
        )
    verdict = goals(rows)
    if verdict is not None:
        console.print(
            f"capstan live against the better of {', '.join(verdict['peers'])}: pending p99 "
            f"{verdict['p99_ratio']:.2f}x (goal <= 0.2), idle GPU-h {verdict['idle_ratio']:.2f}x (goal <= 0.5), "
            f"cost {verdict['cost_ratio']:.2f}x (goal <= 1)"
        )
    bound = bounds(workload, trace_types, rows)
    console.print(
        f"bounds on this slice (against the {bound['against']} autoscalers): p99 of any autoscaler starting with no "
        f"node >= {bound['p99_floor_s']:.0f} s, the goal {bound['p99_goal_s']:.0f} s; the oracle idles "
        f"{bound['oracle_idle_gpu_hours']:.1f} GPU-h, the goal {bound['idle_goal_gpu_hours']:.1f}"
    )
    fixed = ", ".join(f"{k} {v:g} s = {v * speed:,.0f} trace s" for k, v in KARPENTER_FIXED_S.items())
    console.print(f"Karpenter's fixed waits at {speed:g}x: {fixed}")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "capacity_live.json"
    out.write_text(
        json.dumps(
            {
                "smoke": args.smoke,
                "started": started,
                "speed": speed,
                "workload": workload.name,
                "rows": rows,
                "fidelity": [
                    {"autoscaler": g["autoscaler"], **g["gaps"], "drawn": spread[g["autoscaler"]]}
                    for g in gaps
                ],
                "goals": verdict,
                "bounds": bound,
            },
            indent=1,
        )
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
